package image

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dirBytes is the total length of the files in dir.
func dirBytes(t testing.TB, dir string) (n int64) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		fi, err := de.Info()
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

func TestDecompressionSizeBombRefused(t *testing.T) {
	// 64 MiB that compress to a few KiB, against a 16 MiB bound.
	data := bytes.Repeat([]byte("not zeros, so nothing is a hole "), 2<<20)
	for name, packed := range map[string][]byte{
		"zstd": zstdBytes(t, data),
		"gzip": gzipBytes(t, data),
		"xz":   xzBytes(t, data),
		"none": data,
	} {
		dir := t.TempDir()
		lim := Limits{MaxSize: 16 << 20, MaxRatio: 1 << 40}
		var seen int64
		lim.grow = func(n int64) { seen = max(seen, dirBytes(t, dir)) }
		old := growStep
		growStep = 1 << 20
		_, err := unpack(bufio.NewReader(bytes.NewReader(packed)), pathDir(dir), "x.*.part", lim)
		growStep = old
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("%s: error %v does not wrap ErrLimit", name, err)
		}
		errContains(t, err, "decompresses to more than 16 MiB")
		if seen > 16<<20 {
			t.Errorf("%s: %d bytes were written before the refusal, more than the bound", name, seen)
		}
		if n := dirBytes(t, dir); n != 0 {
			t.Errorf("%s: %d bytes left behind", name, n)
		}
	}
}

func TestDecompressionRatioBombRefused(t *testing.T) {
	data := bytes.Repeat([]byte{0xAA}, 32<<20)
	packed := zstdBytes(t, data)
	dir := t.TempDir()
	_, err := unpack(bufio.NewReader(bytes.NewReader(packed)), pathDir(dir), "x.*.part", Limits{MaxRatio: 100, grace: 1 << 20})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("error %v does not wrap ErrLimit", err)
	}
	errContains(t, err, "more than 100 times its size")
	if n := dirBytes(t, dir); n != 0 {
		t.Errorf("%d bytes left behind", n)
	}
	// Within the grace the same ratio passes, and within the ratio too.
	u, err := unpack(bufio.NewReader(bytes.NewReader(packed)), pathDir(dir), "x.*.part", Limits{MaxRatio: 100, grace: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(u.path)
}

// TestFetchBombLeavesNoEntry fetches a zstd bomb with a wrong checksum
// through the cache: the checksum mismatch is reported before anything is
// decompressed, and neither the image nor a temporary file is left.
func TestFetchBombLeavesNoEntry(t *testing.T) {
	data := bytes.Repeat([]byte("bomb"), 8<<20)
	srv := newImageServer(t)
	url := srv.put("/bomb.raw.zst", zstdBytes(t, data))
	dir := t.TempDir()
	wrong := sha256Digest([]byte("something else"))
	_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url, Checksum: &wrong, Limits: Limits{MaxSize: 4 << 20}})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("error %v is not a checksum mismatch", err)
	}
	if strings.Contains(err.Error(), "decompress") {
		t.Errorf("the unverified bomb was decompressed: %v", err)
	}
	assertEmptyCache(t, dir)
	_, err = fetch(t, &Cache{Dir: dir}, Request{Source: url, Limits: Limits{MaxSize: 4 << 20}})
	errContains(t, err, url, "decompresses to more than 4 MiB", "raise the limit")
	assertEmptyCache(t, dir)
}

// TestCacheBoundHoldsWhileWriting fills a bounded cache, then writes a
// large, verified entry: older entries are evicted while it is written,
// not only once it is stored.
func TestCacheBoundHoldsWhileWriting(t *testing.T) {
	dir := t.TempDir()
	c := &Cache{Dir: dir, MaxBytes: 3 << 20}
	fillCache(t, c)
	big := makeRaw(8<<20, true)
	copy(big[4096:], bytes.Repeat([]byte("x"), 6<<20))
	p := filepath.Join(t.TempDir(), "big.img.gz")
	packed := gzipBytes(t, big)
	if err := os.WriteFile(p, packed, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256Digest(packed)
	old := growStep
	growStep = 1 << 20
	defer func() { growStep = old }()
	r, err := fetch(t, c, Request{Source: p, Checksum: &sum})
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	if n := dirBytes(t, dir); n > 8<<20+(2<<20) {
		t.Errorf("the older entries were not evicted: the cache holds %d bytes", n)
	}
}

// fillCache stores two 1 MiB entries in c.
func fillCache(t *testing.T, c *Cache) {
	t.Helper()
	for i := range 2 {
		img := makeRaw(1<<20, true)
		copy(img[2048:], randomish(4096, uint64(i)))
		p := filepath.Join(t.TempDir(), "a.img.gz")
		if err := os.WriteFile(p, gzipBytes(t, img), 0o644); err != nil {
			t.Fatal(err)
		}
		mustFetch(t, c, Request{Source: p}).Release()
	}
	if n := dirBytes(t, c.Dir); n < 2<<20 {
		t.Fatalf("cache holds %d bytes after two 1 MiB entries", n)
	}
}

// TestUnverifiedBombEvictsNothing: a bomb that does not match its
// checksum is refused before it is decompressed, so it neither writes its
// decompressed bytes nor evicts the cached images to make room for them.
func TestUnverifiedBombEvictsNothing(t *testing.T) {
	dir := t.TempDir()
	c := &Cache{Dir: dir, MaxBytes: 3 << 20}
	fillCache(t, c)
	before := cacheFiles(t, dir)
	bomb := zstdBytes(t, bytes.Repeat([]byte("bomb"), 16<<20)) // 64 MiB
	srv := newImageServer(t)
	url := srv.put("/bomb.raw.zst", bomb)
	wrong := sha256Digest([]byte("not it"))
	old := growStep
	growStep = 1 << 20
	defer func() { growStep = old }()
	var most int64
	_, err := fetch(t, c, Request{Source: url, Checksum: &wrong, Progress: func(Progress) { most = max(most, dirBytes(t, dir)) }})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("error %v is not a checksum mismatch", err)
	}
	if after := cacheFiles(t, dir); !slices.Equal(before, after) {
		t.Errorf("cache held %v, now %v: the unverified bomb evicted entries", before, after)
	}
	if most > 2*(1<<20)+int64(len(bomb))+(1<<20) {
		t.Errorf("the cache directory grew to %d bytes for a %d-byte unverified download", most, len(bomb))
	}
}
