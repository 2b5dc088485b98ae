package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// qcowOpts selects the header fields of a test qcow2 image.
type qcowOpts struct {
	version     uint32 // 0: 3
	backing     string // backing file name
	crypt       uint32 // crypt_method
	dataFileBit bool   // incompatible feature bit 2
	dataFileExt string // external data file name header extension
	corrupt     bool   // incompatible feature bit 1
}

// makeQCOW2 builds a small qcow2 image of the given virtual size: a header
// cluster (header, extensions, backing file name), a refcount table and a
// refcount block, and an L1 table, with 64 KiB clusters. Only the header is
// meaningful; the rest is zeros, as in an empty image.
func makeQCOW2(size uint64, o qcowOpts) []byte {
	const cluster = 1 << 16
	b := make([]byte, 4*cluster)
	be := binary.BigEndian
	version := o.version
	if version == 0 {
		version = 3
	}
	copy(b, "QFI\xfb")
	be.PutUint32(b[4:], version)
	if o.backing != "" {
		be.PutUint64(b[8:], 0x400)
		be.PutUint32(b[16:], uint32(len(o.backing)))
		copy(b[0x400:], o.backing)
	}
	be.PutUint32(b[20:], 16) // cluster_bits
	be.PutUint64(b[24:], size)
	be.PutUint32(b[32:], o.crypt)
	l2Entries := uint64(cluster / 8)
	be.PutUint32(b[36:], uint32((size+l2Entries*cluster-1)/(l2Entries*cluster))) // l1_size
	be.PutUint64(b[40:], 3*cluster)                                              // l1_table_offset
	be.PutUint64(b[48:], cluster)                                                // refcount_table_offset
	be.PutUint32(b[56:], 1)                                                      // refcount_table_clusters
	ext := 72
	if version == 3 {
		var incompat uint64
		if o.dataFileBit {
			incompat |= 1 << 2
		}
		if o.corrupt {
			incompat |= 1 << 1
		}
		be.PutUint64(b[72:], incompat)
		be.PutUint32(b[96:], 4)    // refcount_order
		be.PutUint32(b[100:], 104) // header_length
		ext = 104
	}
	if o.dataFileExt != "" {
		be.PutUint32(b[ext:], 0x44415441)
		be.PutUint32(b[ext+4:], uint32(len(o.dataFileExt)))
		copy(b[ext+8:], o.dataFileExt)
	}
	// End of extensions: 8 zero bytes after the last one, already there.
	// Refcount table -> refcount block at cluster 2; the first four clusters
	// are in use (16-bit refcounts of 1).
	be.PutUint64(b[cluster:], 2*cluster)
	for i := 0; i < 4; i++ {
		be.PutUint16(b[2*cluster+2*i:], 1)
	}
	return b
}

// makeRaw builds a raw disk image of size bytes with an MBR boot signature
// (when mbr) and a recognisable text at 1024 and at the end.
func makeRaw(size int, mbr bool) []byte {
	b := make([]byte, size)
	if mbr {
		b[510], b[511] = 0x55, 0xAA
	}
	copy(b[1024:], fmt.Sprintf("raw test image of %d bytes", size))
	copy(b[size-16:], "end of the image")
	return b
}

// randomish returns n deterministic bytes that do not compress.
func randomish(n int, seed uint64) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

func xzBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
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

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstdBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	w, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	return w.EncodeAll(b, nil)
}

type tarFile struct {
	name string
	data []byte
}

// tarBytes builds a tar archive in the given format (FormatUSTAR: "ustar\0"
// "00" magic; FormatGNU: "ustar  \0").
func tarBytes(t testing.TB, format tar.Format, files ...tarFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, Format: format, ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Format: format, ModTime: time.Unix(1700000000, 0)}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha256Digest(b []byte) Digest {
	s := sha256.Sum256(b)
	return Digest{Algorithm: SHA256, Hex: hex.EncodeToString(s[:])}
}

// imageServer serves files and counts requests.
type imageServer struct {
	*httptest.Server
	mu       sync.Mutex
	files    map[string][]byte
	gets     map[string]int // GET requests by path
	bodies   map[string]int // 200 responses by path
	etag     bool           // send ETag and honour If-None-Match
	lastMod  time.Time      // send Last-Modified and honour If-Modified-Since (when not zero)
	delay    time.Duration  // before answering a GET of a file
	requests []*http.Request
}

func newImageServer(t testing.TB) *imageServer {
	s := &imageServer{files: map[string][]byte{}, gets: map[string]int{}, bodies: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// newTLSImageServer is newImageServer over https; its Client trusts it.
func newTLSImageServer(t testing.TB) *imageServer {
	s := &imageServer{files: map[string][]byte{}, gets: map[string]int{}, bodies: map[string]int{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *imageServer) put(path string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = b
	return s.URL + path
}

func (s *imageServer) count(path string) (gets, bodies int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[path], s.bodies[path]
}

func (s *imageServer) lastRequest() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[len(s.requests)-1]
}

func (s *imageServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.gets[r.URL.Path]++
	s.requests = append(s.requests, r)
	b, ok := s.files[r.URL.Path]
	etag, lastMod, delay := s.etag, s.lastMod, s.delay
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	time.Sleep(delay)
	if etag {
		tag := fmt.Sprintf("%q", sha256Digest(b).Hex[:16])
		w.Header().Set("ETag", tag)
		if r.Header.Get("If-None-Match") == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	if !lastMod.IsZero() {
		w.Header().Set("Last-Modified", lastMod.UTC().Format(http.TimeFormat))
		if ims, err := http.ParseTime(r.Header.Get("If-Modified-Since")); err == nil && !lastMod.Truncate(time.Second).After(ims) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	s.mu.Lock()
	s.bodies[r.URL.Path]++
	s.mu.Unlock()
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	_, _ = w.Write(b) // a client that hangs up fails on its side
}

// cacheFiles lists the files in a cache directory (none if it does not
// exist).
func cacheFiles(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	sort.Strings(names)
	return names
}

// assertEmptyCache fails unless dir holds no files.
func assertEmptyCache(t testing.TB, dir string) {
	t.Helper()
	if names := cacheFiles(t, dir); len(names) != 0 {
		t.Errorf("cache directory not empty after a failed Fetch: %v", names)
	}
}

// fetch runs Cache.Fetch and registers the Result's release.
func fetch(t testing.TB, c *Cache, req Request) (*Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Fetch(ctx, req)
	if r != nil {
		t.Cleanup(r.Release)
	}
	return r, err
}

// mustFetch is fetch failing the test on error.
func mustFetch(t testing.TB, c *Cache, req Request) *Result {
	t.Helper()
	r, err := fetch(t, c, req)
	if err != nil {
		t.Fatalf("Fetch(%s): %v", req.Source, err)
	}
	return r
}

// assertFile fails unless the file at path holds want.
func assertFile(t testing.TB, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: content differs from the image (%d bytes, want %d)", path, len(got), len(want))
	}
}

// errContains fails unless err is non-nil and its message holds all parts.
func errContains(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

// qemuFixtures extracts testdata/qemu-images.tar.xz into a temporary
// directory and returns it.
func qemuFixtures(t testing.TB) string {
	t.Helper()
	f, err := os.Open("testdata/qemu-images.tar.xz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	xr, err := xz.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(xr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		out, err := os.Create(filepath.Join(dir, filepath.Base(h.Name)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	return dir
}

func hexSHA512(b []byte) string {
	s := sha512.Sum512(b)
	return hex.EncodeToString(s[:])
}
