package image

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"runtime"
	"testing"

	"github.com/ulikunitz/xz"
)

// xzWith compresses b with the given writer settings.
func xzWith(t testing.TB, b []byte, cfg xz.WriterConfig) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := cfg.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// setXZDict rewrites the LZMA2 dictionary property of the first block
// header of an xz file (and the header's CRC32), as a hostile file would.
func setXZDict(t testing.TB, x []byte, prop byte) []byte {
	t.Helper()
	x = append([]byte(nil), x...)
	h := x[12:]
	size := (int(h[0]) + 1) * 4
	pos := 2
	for _, bit := range []byte{0x40, 0x80} {
		if h[1]&bit != 0 {
			_, n := binary.Uvarint(h[pos:])
			pos += n
		}
	}
	if h[pos] != 0x21 || h[pos+1] != 1 {
		t.Fatalf("first filter of the test file is %#x, not LZMA2", h[pos])
	}
	h[pos+2] = prop
	binary.LittleEndian.PutUint32(h[size-4:], crc32.ChecksumIEEE(h[:size-4]))
	return x
}

func TestXZDictionaryBombRefused(t *testing.T) {
	data := bytes.Repeat([]byte("a hostile image "), 1<<16)
	bomb := setXZDict(t, xzBytes(t, data), 40) // 4 GiB - 1

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := unpack(bufio.NewReader(bytes.NewReader(bomb)), t.TempDir(), "x.*.part", Limits{})
	runtime.ReadMemStats(&after)
	errContains(t, err, "decompressing xz data", "4.0 GiB LZMA2 dictionary", "more than the 256 MiB allowed")
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("refusing the header allocated %d MiB", grew>>20)
	}

	// Just over the bound is refused too; within it the file decodes.
	over := setXZDict(t, xzBytes(t, data), 33) // 384 MiB
	_, err = unpack(bufio.NewReader(bytes.NewReader(over)), t.TempDir(), "x.*.part", Limits{})
	errContains(t, err, "384 MiB LZMA2 dictionary")
	g := newXZGuard(bytes.NewReader(setXZDict(t, xzBytes(t, data), 22)), MaxXZDictionary) // 4 MiB
	r, err := xz.NewReader(g)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("4 MiB dictionary: %d bytes, %v", len(got), err)
	}
}

// TestXZGuardFollowsValidFiles runs the guard over the shapes of xz file
// the decoder accepts (several blocks, uncompressed chunks, every check,
// several streams with padding) and asserts it refuses none of them.
func TestXZGuardFollowsValidFiles(t *testing.T) {
	text := bytes.Repeat([]byte("compressible text of a disk image\n"), 40000)
	noise := randomish(300000, 7) // stored as uncompressed LZMA2 chunks
	mixed := append(append(append([]byte(nil), text...), noise...), text...)
	cases := map[string][]byte{
		"crc32":  xzWith(t, mixed, xz.WriterConfig{CheckSum: xz.CRC32}),
		"crc64":  xzWith(t, mixed, xz.WriterConfig{CheckSum: xz.CRC64}),
		"sha256": xzWith(t, mixed, xz.WriterConfig{CheckSum: xz.SHA256}),
		"none":   xzWith(t, mixed, xz.WriterConfig{NoCheckSum: true}),
		"blocks": xzWith(t, mixed, xz.WriterConfig{BlockSize: 100000}),
		"empty":  xzWith(t, nil, xz.WriterConfig{}),
	}
	want := map[string][]byte{}
	for k := range cases {
		want[k] = mixed
	}
	want["empty"] = nil
	two := append(append(append([]byte(nil), cases["blocks"]...), 0, 0, 0, 0, 0, 0, 0, 0), cases["crc32"]...)
	cases["streams"], want["streams"] = two, append(append([]byte(nil), mixed...), mixed...)
	for name, x := range cases {
		r, err := xz.NewReader(newXZGuard(iotestOneByte(x, name == "blocks"), MaxXZDictionary))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want[name]) {
			t.Errorf("%s: %d bytes (want %d), %v", name, len(got), len(want[name]), err)
		}
	}
}

// iotestOneByte reads b one byte at a time when slow, else in one piece.
func iotestOneByte(b []byte, slow bool) io.Reader {
	if slow {
		return oneByteReader{bytes.NewReader(b)}
	}
	return bytes.NewReader(b)
}

type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}
