package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestDetectCompression(t *testing.T) {
	cases := map[string]string{
		"\xfd7zXZ\x00rest": "xz",
		"\x1f\x8b\x08":     "gzip",
		"\x28\xb5\x2f\xfd": "zstd",
		"BZh91AY&SY":       "bzip2",
		"BZh0":             "",
		"QFI\xfb":          "",
		"\xfd7zXZ":         "",
		"":                 "",
	}
	for in, want := range cases {
		if got := detectCompression([]byte(in)); got != want {
			t.Errorf("detectCompression(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSparseWriter(t *testing.T) {
	// Zeros and data in runs that straddle the block and buffer sizes.
	var want []byte
	for i, n := range []int{3 * sparseBlock, 100, sparseBlock - 100, 2 << 20, 5000, 1 << 20, 1, 3 << 20} {
		if i%2 == 0 {
			want = append(want, make([]byte, n)...)
		} else {
			want = append(want, randomish(n, uint64(i))...)
		}
	}
	for _, tail := range []int{0, 12345} { // ending in zeros, or not
		b := append(append([]byte(nil), want...), randomish(tail, 9)...)
		f, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		w := newSparseWriter(f)
		for off := 0; off < len(b); { // odd write sizes
			n := min(len(b)-off, 70001)
			if _, err := w.Write(b[off : off+n]); err != nil {
				t.Fatal(err)
			}
			off += n
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, _ := os.ReadFile(f.Name())
		if !bytes.Equal(got, b) {
			t.Fatalf("tail %d: file differs (%d bytes, want %d)", tail, len(got), len(b))
		}
		if used, ok := allocated(f.Name()); ok && used >= int64(len(b)) {
			t.Logf("file system did not leave holes (%d bytes allocated for %d)", used, len(b))
		}
	}
}
