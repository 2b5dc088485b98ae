package image

import (
	"bufio"
	"bytes"
	"os"
	"testing"
)

// fuzzLimits keep one fuzz input's cost small whatever it claims.
var fuzzLimits = Limits{MaxSize: 4 << 20, MaxRatio: 100, grace: 1 << 20}

// fuzzDir is a scratch directory shared by a fuzz target's inputs.
func fuzzDir(f *testing.F) string {
	dir, err := os.MkdirTemp("", "kohaku-fuzz-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// checkUnpacked asserts what any input must give: a result within the
// size bound, or an error leaving no file behind.
func checkUnpacked(t *testing.T, dir string, u unpacked, err error) {
	if err != nil {
		if des, _ := os.ReadDir(dir); len(des) != 0 {
			t.Fatalf("error %v left %d files behind", err, len(des))
		}
		return
	}
	defer os.Remove(u.path)
	fi, serr := os.Stat(u.path)
	if serr != nil {
		t.Fatal(serr)
	}
	if fi.Size() > fuzzLimits.MaxSize {
		t.Fatalf("unpacked %d bytes, more than the bound %d", fi.Size(), fuzzLimits.MaxSize)
	}
}

// FuzzUnpack feeds arbitrary bytes to the decompressors (xz with its
// bounded dictionary, gzip, zstd, bzip2) and the tar extraction.
func FuzzUnpack(f *testing.F) {
	f.Add([]byte("plain bytes"))
	dir := fuzzDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := unpack(bufio.NewReader(bytes.NewReader(data)), pathDir(dir), "f.*.part", fuzzLimits)
		checkUnpacked(t, dir, u, err)
	})
}

// FuzzExtractTar feeds arbitrary bytes to the tar extraction alone.
func FuzzExtractTar(f *testing.F) {
	f.Add(make([]byte, 1024))
	dir := fuzzDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		path, _, member, err := extractTar(bytes.NewReader(data), pathDir(dir), "f.*.part", fuzzLimits.MaxSize)
		checkUnpacked(t, dir, unpacked{path: path, member: member}, err)
	})
}
