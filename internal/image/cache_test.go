package image

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestConcurrentFetchOneDownload(t *testing.T) {
	img := makeQCOW2(4<<30, qcowOpts{})
	for _, withSum := range []bool{false, true} {
		t.Run(fmt.Sprintf("checksum=%v", withSum), func(t *testing.T) {
			srv := newImageServer(t)
			srv.delay = 200 * time.Millisecond // keep the first download going while the others arrive
			body := xzBytes(t, img)
			url := srv.put("/shared.qcow2.xz", body)
			d := sha256Digest(body)
			dir := t.TempDir()
			const n = 8
			var (
				wg      sync.WaitGroup
				results = make([]*Result, n)
				errs    = make([]error, n)
			)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := Request{Source: url}
					if withSum {
						req.Checksum = &d
					}
					results[i], errs[i] = (&Cache{Dir: dir}).Fetch(context.Background(), req)
				}()
			}
			wg.Wait()
			downloaded := 0
			for i := range results {
				if errs[i] != nil {
					t.Fatalf("Fetch %d: %v", i, errs[i])
				}
				defer results[i].Release()
				if results[i].Path != results[0].Path {
					t.Errorf("Fetch %d got %s, Fetch 0 %s", i, results[i].Path, results[0].Path)
				}
				if results[i].Downloaded {
					downloaded++
				}
				assertFile(t, results[i].Path, img)
			}
			if gets, _ := srv.count("/shared.qcow2.xz"); gets != 1 {
				t.Errorf("server saw %d GETs of the image, want 1", gets)
			}
			if downloaded != 1 {
				t.Errorf("%d Results say they downloaded, want 1", downloaded)
			}
		})
	}
}

// The helper process of TestConcurrentFetchAcrossProcesses: it fetches the
// URL in $KOHAKU_IMAGE_HELPER_URL into $KOHAKU_IMAGE_HELPER_DIR and prints
// the Result as JSON.
func TestHelperProcess(t *testing.T) {
	url := os.Getenv("KOHAKU_IMAGE_HELPER_URL")
	if url == "" {
		t.Skip("helper process for TestConcurrentFetchAcrossProcesses")
	}
	r, err := (&Cache{Dir: os.Getenv("KOHAKU_IMAGE_HELPER_DIR")}).Fetch(context.Background(), Request{Source: url})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	defer r.Release()
	b, _ := json.Marshal(r)
	fmt.Println("RESULT", string(b))
}

func TestConcurrentFetchAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	img := makeRaw(4<<20, true)
	srv := newImageServer(t)
	srv.delay = 300 * time.Millisecond
	url := srv.put("/multi.raw.gz", gzipBytes(t, img))
	dir := t.TempDir()
	const procs = 4
	var wg sync.WaitGroup
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
			cmd.Env = append(os.Environ(), "KOHAKU_IMAGE_HELPER_URL="+url, "KOHAKU_IMAGE_HELPER_DIR="+dir)
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	// And this process too.
	r, err := (&Cache{Dir: dir}).Fetch(context.Background(), Request{Source: url})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	downloaded := 0
	if r.Downloaded {
		downloaded++
	}
	for i := range outs {
		if errs[i] != nil {
			t.Fatalf("helper %d: %v\n%s", i, errs[i], outs[i])
		}
		_, line, ok := strings.Cut(string(outs[i]), "RESULT ")
		if !ok {
			t.Fatalf("helper %d printed no result:\n%s", i, outs[i])
		}
		var hr Result
		if err := json.Unmarshal([]byte(strings.SplitN(line, "\n", 2)[0]), &hr); err != nil {
			t.Fatal(err)
		}
		if hr.Path != r.Path {
			t.Errorf("helper %d got %s, want %s", i, hr.Path, r.Path)
		}
		if hr.Downloaded {
			downloaded++
		}
	}
	if gets, _ := srv.count("/multi.raw.gz"); gets != 1 {
		t.Errorf("server saw %d GETs of the image from %d processes, want 1", gets, procs+1)
	}
	if downloaded != 1 {
		t.Errorf("%d processes say they downloaded, want 1", downloaded)
	}
	assertFile(t, r.Path, img)
}

func TestRevalidation(t *testing.T) {
	img1 := makeQCOW2(1<<30, qcowOpts{})
	img2 := makeQCOW2(2<<30, qcowOpts{})
	t.Run("etag", func(t *testing.T) {
		srv := newImageServer(t)
		srv.etag = true
		url := srv.put("/x.qcow2", img1)
		c := &Cache{Dir: t.TempDir()}
		r1 := mustFetch(t, c, Request{Source: url})
		r1.Release()
		r2 := mustFetch(t, c, Request{Source: url})
		if r2.Downloaded || r2.Path != r1.Path || r2.VirtualSize != 1<<30 {
			t.Fatalf("revalidated entry: %+v", r2)
		}
		r2.Release()
		if inm := srv.lastRequest().Header.Get("If-None-Match"); inm == "" {
			t.Error("second Fetch sent no If-None-Match")
		}
		if gets, bodies := srv.count("/x.qcow2"); gets != 2 || bodies != 1 {
			t.Errorf("server saw %d GETs and sent %d bodies, want 2 and 1", gets, bodies)
		}
		// The image changes upstream: the next Fetch replaces the entry.
		srv.put("/x.qcow2", img2)
		r3 := mustFetch(t, c, Request{Source: url})
		if !r3.Downloaded || r3.VirtualSize != 2<<30 || r3.Digest != sha256Digest(img2) {
			t.Fatalf("changed image not downloaded: %+v", r3)
		}
		assertFile(t, r3.Path, img2)
	})
	t.Run("last-modified", func(t *testing.T) {
		srv := newImageServer(t)
		srv.lastMod = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		url := srv.put("/x.qcow2", img1)
		c := &Cache{Dir: t.TempDir()}
		mustFetch(t, c, Request{Source: url}).Release()
		r2 := mustFetch(t, c, Request{Source: url})
		if r2.Downloaded {
			t.Fatal("entry downloaded again")
		}
		if ims := srv.lastRequest().Header.Get("If-Modified-Since"); ims != "Thu, 02 Jan 2025 03:04:05 GMT" {
			t.Errorf("If-Modified-Since %q", ims)
		}
		if _, bodies := srv.count("/x.qcow2"); bodies != 1 {
			t.Errorf("server sent %d bodies, want 1", bodies)
		}
	})
	t.Run("no validators, fresh", func(t *testing.T) {
		srv := newImageServer(t)
		url := srv.put("/x.qcow2", img1)
		c := &Cache{Dir: t.TempDir()}
		mustFetch(t, c, Request{Source: url}).Release()
		r2 := mustFetch(t, c, Request{Source: url})
		if r2.Downloaded {
			t.Fatal("an entry without validators was downloaded again within Fresh")
		}
		if gets, _ := srv.count("/x.qcow2"); gets != 1 {
			t.Errorf("server saw %d GETs, want 1", gets)
		}
	})
	t.Run("no validators", func(t *testing.T) {
		srv := newImageServer(t)
		url := srv.put("/x.qcow2", img1)
		c := &Cache{Dir: t.TempDir(), Fresh: -1}
		mustFetch(t, c, Request{Source: url}).Release()
		r2 := mustFetch(t, c, Request{Source: url})
		if !r2.Downloaded {
			t.Fatal("entry without validators reused")
		}
		if gets, bodies := srv.count("/x.qcow2"); gets != 2 || bodies != 2 {
			t.Errorf("server saw %d GETs and sent %d bodies, want 2 and 2", gets, bodies)
		}
	})
	t.Run("digest keyed entries are not revalidated", func(t *testing.T) {
		srv := newImageServer(t)
		srv.etag = true
		url := srv.put("/x.qcow2", img1)
		d := sha256Digest(img1)
		c := &Cache{Dir: t.TempDir()}
		mustFetch(t, c, Request{Source: url, Checksum: &d}).Release()
		r2 := mustFetch(t, c, Request{Source: url, Checksum: &d})
		if r2.Downloaded || !r2.Verified {
			t.Fatalf("got %+v", r2)
		}
		if gets, _ := srv.count("/x.qcow2"); gets != 1 {
			t.Errorf("server saw %d GETs, want 1", gets)
		}
	})
}

func TestEviction(t *testing.T) {
	const size = 1 << 20
	srv := newImageServer(t)
	urls := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		// Incompressible contents so the sizes are what they say.
		img := append(makeRaw(4096, true), randomish(size-4096, uint64(n[0]))...)
		urls[n] = srv.put("/"+n+".raw", img)
	}
	dir := t.TempDir()
	c := &Cache{Dir: dir, MaxBytes: 2*size + size/2} // room for two entries
	get := func(n string) *Result {
		r := mustFetch(t, c, Request{Source: urls[n]})
		time.Sleep(20 * time.Millisecond) // distinct mtimes
		return r
	}
	exists := func(r *Result) bool {
		_, err := os.Stat(r.Path)
		return err == nil
	}
	a := get("a") // held throughout
	b := get("b")
	b.Release()
	cr := get("c") // over the bound: a is the oldest but held, so b goes
	if !exists(a) || exists(b) || !exists(cr) {
		t.Fatalf("after c: a %v, b %v, c %v; want a and c kept, b evicted", exists(a), exists(b), exists(cr))
	}
	for _, name := range cacheFiles(t, dir) {
		if strings.HasPrefix(name, strings.TrimSuffix(filepath.Base(b.Path), ".img")) {
			t.Errorf("evicted entry left %s", name)
		}
	}
	assertFileSize(t, a.Path, size)

	a.Release()
	cr.Release()
	d := get("d") // a is the oldest and now free
	if exists(a) || !exists(cr) || !exists(d) {
		t.Fatalf("after d: a %v, c %v, d %v; want a evicted", exists(a), exists(cr), exists(d))
	}

	// An image larger than the bound is kept (it was just stored); all
	// others not held go.
	d.Release()
	small := &Cache{Dir: dir, MaxBytes: size / 2}
	e := mustFetch(t, small, Request{Source: urls["a"]})
	if !exists(e) || exists(cr) || exists(d) {
		t.Fatalf("oversized entry: kept %v; c kept %v, d kept %v", exists(e), exists(cr), exists(d))
	}
}

func assertFileSize(t *testing.T, p string, size int64) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size {
		t.Fatalf("%s: %d bytes, want %d", p, fi.Size(), size)
	}
}

func TestStaleTempFilesRemoved(t *testing.T) {
	srv := newImageServer(t)
	url := srv.put("/x.qcow2", makeQCOW2(1<<30, qcowOpts{}))
	dir := t.TempDir()
	key := "src-" + strings.Repeat("0", 32)
	stale := filepath.Join(dir, key+".123.part")
	fresh := filepath.Join(dir, "src-"+strings.Repeat("1", 32)+".456.part")
	held := filepath.Join(dir, "src-"+strings.Repeat("2", 32)+".789.part")
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{stale, fresh, held} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{stale, held} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	lk, err := acquireLock(context.Background(), pathDir(dir), "src-"+strings.Repeat("2", 32)+".lock", true)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.release()
	mustFetch(t, &Cache{Dir: dir}, Request{Source: url})
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("stale temporary file of a crashed Fetch left in place")
	}
	if _, err := os.Stat(filepath.Join(dir, key+".lock")); !os.IsNotExist(err) {
		t.Error("lock file of the stale temporary left in place")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("recent temporary file removed")
	}
	if _, err := os.Stat(held); err != nil {
		t.Error("temporary file of a locked entry removed")
	}
}

func TestSidecar(t *testing.T) {
	srv := newImageServer(t)
	srv.etag = true
	img := makeRaw(1<<20, true)
	body := xzBytes(t, img)
	url := srv.put("/x.raw.xz", body)
	dir := t.TempDir()
	r := mustFetch(t, &Cache{Dir: dir}, Request{Source: url})
	data, err := os.ReadFile(strings.TrimSuffix(r.Path, ".img") + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var m entryMeta
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Source != url || m.Digest != sha256Digest(body).String() || m.Format != FormatRaw || m.VirtualSize != 1<<20 ||
		m.Compression != "xz" || m.ETag == "" || m.Size != 1<<20 {
		t.Fatalf("sidecar %s", data)
	}
	if fi, _ := os.Stat(r.Path); fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("cached image is writable: %v", fi.Mode())
	}
	// A damaged sidecar makes the entry count as missing.
	r.Release()
	if err := os.WriteFile(strings.TrimSuffix(r.Path, ".img")+".json", []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := mustFetch(t, &Cache{Dir: dir}, Request{Source: url})
	if !r2.Downloaded {
		t.Error("entry with a damaged sidecar reused")
	}
	assertFile(t, r2.Path, img)
}

func TestDefaultCacheDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("relies on the XDG variables of os.UserCacheDir on Linux")
	}
	t.Setenv("XDG_CACHE_HOME", "/somewhere/cache")
	if got := DefaultCacheDir(); got != filepath.Join("/somewhere/cache", "kohaku", "images") {
		t.Errorf("DefaultCacheDir() = %s", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if got := DefaultCacheDir(); got != filepath.Join(os.TempDir(), fmt.Sprintf("kohaku-images-%d", os.Getuid())) {
		t.Errorf("DefaultCacheDir() without a user cache directory = %s", got)
	}
}
