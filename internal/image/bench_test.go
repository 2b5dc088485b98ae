package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// benchImageSize is the size of the raw image the benchmarks decompress.
const benchImageSize = 64 << 20

var (
	benchOnce  sync.Once
	benchImage []byte
	benchComp  map[string][]byte
)

// benchData returns a 64 MiB raw image that compresses like a cloud image
// (runs of zeros, low-entropy data, some incompressible data) and its xz,
// gzip and zstd compressions, made once per process.
func benchData(b *testing.B) ([]byte, map[string][]byte) {
	b.Helper()
	benchOnce.Do(func() {
		img := make([]byte, benchImageSize)
		img[510], img[511] = 0x55, 0xAA
		x := uint64(0x9E3779B97F4A7C15)
		next := func() uint64 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			return x
		}
		const chunk = 64 << 10
		for off := chunk; off < len(img); off += chunk {
			c := img[off : off+chunk]
			switch next() % 10 {
			case 0, 1, 2, 3: // empty space
			case 4, 5, 6, 7: // low entropy: 16 symbols
				for i := range c {
					c[i] = "etaoinshrdlu \n./"[next()%16]
				}
			default: // already compressed data
				for i := 0; i+8 <= len(c); i += 8 {
					v := next()
					for j := 0; j < 8; j++ {
						c[i+j] = byte(v >> (8 * j))
					}
				}
			}
		}
		benchImage = img
		benchComp = map[string][]byte{
			compXZ:   xzBytes(b, img),
			compGzip: gzipBytes(b, img),
			compZstd: zstdBytes(b, img),
		}
	})
	return benchImage, benchComp
}

func benchDecompress(b *testing.B, kind string) {
	img, comp := benchData(b)
	data := comp[kind]
	b.SetBytes(int64(len(img)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := openDecompressor(kind, bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, d)
		d.Close()
		if err != nil || n != int64(len(img)) {
			b.Fatalf("decompressed %d bytes: %v", n, err)
		}
	}
	b.ReportMetric(float64(len(data))/float64(len(img)), "ratio")
}

// BenchmarkDecompressXZ measures xz decompression (MB/s of output).
func BenchmarkDecompressXZ(b *testing.B) { benchDecompress(b, compXZ) }

// BenchmarkDecompressZstd measures zstd decompression (MB/s of output).
func BenchmarkDecompressZstd(b *testing.B) { benchDecompress(b, compZstd) }

// BenchmarkDecompressGzip measures gzip decompression (MB/s of output).
func BenchmarkDecompressGzip(b *testing.B) { benchDecompress(b, compGzip) }

// BenchmarkCopyFloor is the floor: a plain io.Copy of the uncompressed bytes
// through a 32 KiB buffer, as the decompression benchmarks copy their output
// (the wrappers hide bytes.Reader's WriteTo, which would skip the copy).
func BenchmarkCopyFloor(b *testing.B) {
	img, _ := benchData(b)
	b.SetBytes(int64(len(img)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, err := io.Copy(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{bytes.NewReader(img)})
		if err != nil || n != int64(len(img)) {
			b.Fatalf("copied %d bytes: %v", n, err)
		}
	}
}

// BenchmarkSHA256 is the cost of the digest over the same number of bytes.
func BenchmarkSHA256(b *testing.B) {
	img, _ := benchData(b)
	b.SetBytes(int64(len(img)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h := sha256.New()
		h.Write(img)
		h.Sum(nil)
	}
}

// benchFetch measures a whole Fetch of a local compressed file into an empty
// cache: digest, decompression, sparse write, inspection.
func benchFetch(b *testing.B, kind string) {
	img, comp := benchData(b)
	src := filepath.Join(b.TempDir(), "image."+kind)
	if err := os.WriteFile(src, comp[kind], 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(img)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		b.StartTimer()
		r, err := (&Cache{Dir: dir}).Fetch(context.Background(), Request{Source: src})
		if err != nil {
			b.Fatal(err)
		}
		if r.Size != int64(len(img)) {
			b.Fatalf("size %d", r.Size)
		}
		r.Release()
	}
}

// BenchmarkFetchZstd measures Fetch of a local .zst image end to end.
func BenchmarkFetchZstd(b *testing.B) { benchFetch(b, compZstd) }

// BenchmarkFetchXZ measures Fetch of a local .xz image end to end.
func BenchmarkFetchXZ(b *testing.B) { benchFetch(b, compXZ) }
