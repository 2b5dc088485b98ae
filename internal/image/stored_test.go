package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
)

// memPool is an in-memory stand-in for a storage pool as virt.UploadImage
// drives it: it creates the volume, reads the source the way go-libvirt's
// stream upload does (4 MiB reads until EOF, each chunk sent as it comes),
// and deletes the volume when the source fails.
type memPool struct {
	mu   sync.Mutex
	vols map[string][]byte
}

func (p *memPool) upload(name string, r *Result) (handedOut int64, err error) {
	src, err := r.Open()
	if err != nil {
		return 0, err
	}
	defer src.Close()
	p.mu.Lock()
	if p.vols == nil {
		p.vols = map[string][]byte{}
	}
	p.vols[name] = nil
	p.mu.Unlock()
	buf := make([]byte, 4<<20)
	for {
		n, rerr := src.Read(buf)
		handedOut += int64(n)
		p.mu.Lock()
		p.vols[name] = append(p.vols[name], buf[:n]...)
		p.mu.Unlock()
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			p.mu.Lock()
			delete(p.vols, name)
			p.mu.Unlock()
			return handedOut, rerr
		}
	}
	if got := int64(len(p.vols[name])); got != r.Size {
		return handedOut, errors.New("short upload")
	}
	return handedOut, nil
}

func (p *memPool) names() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n := range p.vols {
		out = append(out, n)
	}
	return out
}

// cachedEntry serves a compressed raw image (so that it is unpacked into
// the cache) and fetches it once; it returns the cache, the request and
// the image.
func cachedEntry(t *testing.T) (*Cache, Request, []byte) {
	t.Helper()
	img := makeRaw(9<<20+7*512, true) // more than two 4 MiB reads, and a ragged end
	copy(img[1<<20:], randomish(3<<20, 7))
	body := gzipBytes(t, img)
	srv := newImageServer(t)
	d := sha256Digest(body)
	req := Request{Source: srv.put("/disk.raw.gz", body), Checksum: &d}
	c := &Cache{Dir: t.TempDir()}
	r := mustFetch(t, c, req)
	var pool memPool
	if _, err := pool.upload("first", r); err != nil {
		t.Fatalf("uploading a fresh entry: %v", err)
	}
	if !bytes.Equal(pool.vols["first"], img) {
		t.Fatal("the fresh entry uploaded other bytes")
	}
	r.Release()
	return c, req, img
}

// writable makes an entry's read-only image writable for the test to
// tamper with, as its owner could.
func writable(t *testing.T, path string) *os.File {
	t.Helper()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestTamperedCacheEntryRefused(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, path string, size int64)
		want   string
	}{
		{"same size, other bytes", func(t *testing.T, p string, size int64) {
			// One byte in the middle of the last chunk.
			if _, err := writable(t, p).WriteAt([]byte{0xA5}, size-100); err != nil {
				t.Fatal(err)
			}
		}, "has sha256 "},
		{"truncated", func(t *testing.T, p string, size int64) {
			if err := writable(t, p).Truncate(size - 4096); err != nil {
				t.Fatal(err)
			}
		}, "ends after "},
		{"grown", func(t *testing.T, p string, size int64) {
			if _, err := writable(t, p).WriteAt([]byte("more"), size); err != nil {
				t.Fatal(err)
			}
		}, "is longer than the "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, req, img := cachedEntry(t)
			// The entry is changed after the Fetch that hit it checked
			// its sidecar, so only the read can notice.
			r := mustFetch(t, c, req)
			if r.Downloaded {
				t.Fatal("the second Fetch was no cache hit")
			}
			tc.tamper(t, r.Path, r.Size)
			var pool memPool
			handed, err := pool.upload("tampered", r)
			if !errors.Is(err, ErrCacheEntryChanged) {
				t.Fatalf("upload of a tampered entry: %v, want ErrCacheEntryChanged", err)
			}
			errContains(t, err, r.Path, tc.want, "the entry was evicted")
			if handed >= r.Size {
				t.Errorf("the reader handed out all %d bytes of a tampered image before failing", handed)
			}
			if n := pool.names(); len(n) != 0 {
				t.Errorf("volumes left behind: %v", n)
			}
			for _, suffix := range []string{".img", ".json"} {
				if _, err := os.Lstat(strings.TrimSuffix(r.Path, ".img") + suffix); !os.IsNotExist(err) {
					t.Errorf("entry file %s left after the refusal: %v", suffix, err)
				}
			}
			r.Release()

			// The next Fetch downloads afresh, and that uploads.
			r2 := mustFetch(t, c, req)
			if !r2.Downloaded {
				t.Error("the next Fetch did not download the image again")
			}
			if _, err := pool.upload("again", r2); err != nil {
				t.Fatalf("upload after the re-download: %v", err)
			}
			if !bytes.Equal(pool.vols["again"], img) {
				t.Error("the re-downloaded entry uploaded other bytes")
			}
		})
	}
}

// An entry changed before the Fetch that would use it: a truncated one is
// no entry at all (its size is checked against the sidecar), and one with
// other bytes of the same size is refused by the read.
func TestTamperedCacheEntryBeforeFetch(t *testing.T) {
	t.Run("truncated", func(t *testing.T) {
		c, req, img := cachedEntry(t)
		r := mustFetch(t, c, req)
		p := r.Path
		r.Release()
		if err := writable(t, p).Truncate(int64(len(img)) / 2); err != nil {
			t.Fatal(err)
		}
		r = mustFetch(t, c, req)
		if !r.Downloaded {
			t.Error("a truncated entry was used")
		}
		assertFile(t, r.Path, img)
	})
	t.Run("same size, other bytes", func(t *testing.T) {
		c, req, _ := cachedEntry(t)
		r := mustFetch(t, c, req)
		if _, err := writable(t, r.Path).WriteAt([]byte("planted"), 4096); err != nil {
			t.Fatal(err)
		}
		r.Release()
		r = mustFetch(t, c, req)
		var pool memPool
		handed, err := pool.upload("tampered", r)
		if !errors.Is(err, ErrCacheEntryChanged) || len(pool.names()) != 0 {
			t.Fatalf("upload: %v, volumes %v", err, pool.names())
		}
		if handed >= r.Size {
			t.Errorf("handed out %d of %d bytes", handed, r.Size)
		}
	})
}

// A sidecar written before the stored file's digest was recorded is not
// trusted: the entry is downloaded again, and the new sidecar has it.
func TestOldSidecarIsAMiss(t *testing.T) {
	c, req, img := cachedEntry(t)
	r := mustFetch(t, c, req)
	side := strings.TrimSuffix(r.Path, ".img") + ".json"
	r.Release()
	data, err := os.ReadFile(side)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m["stored_sha256"] != sha256Digest(img).Hex || m["size"] != float64(len(img)) {
		t.Fatalf("sidecar does not record the stored file: %s", data)
	}
	for _, old := range []func(map[string]any){
		func(m map[string]any) { m["version"] = 1; delete(m, "stored_sha256") },
		func(m map[string]any) { delete(m, "stored_sha256") },
		func(m map[string]any) { m["stored_sha256"] = "not hex" },
	} {
		old(m)
		data, _ := json.Marshal(m)
		if err := os.WriteFile(side, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r := mustFetch(t, c, req)
		if !r.Downloaded {
			t.Errorf("entry with sidecar %s was trusted", data)
		}
		assertFile(t, r.Path, img)
		r.Release()
		if err := json.Unmarshal(mustRead(t, side), &m); err != nil || m["stored_sha256"] != sha256Digest(img).Hex {
			t.Fatalf("rewritten sidecar: %v %v", m, err)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The reader of an intact entry hands out every byte and ends cleanly,
// whatever the read sizes.
func TestCheckedReaderIntact(t *testing.T) {
	c, req, img := cachedEntry(t)
	r := mustFetch(t, c, req)
	for _, size := range []int{1, 4095, 64 << 10, 16 << 20} {
		f, err := r.Open()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		if err != nil || !bytes.Equal(got, img) {
			t.Fatalf("ReadAll: %v", err)
		}
		f.Close()
		f, _ = r.Open()
		var out bytes.Buffer
		if _, err := io.CopyBuffer(&out, struct{ io.Reader }{f}, make([]byte, size)); err != nil || !bytes.Equal(out.Bytes(), img) {
			t.Fatalf("reads of %d: %v", size, err)
		}
		f.Close()
	}
}
