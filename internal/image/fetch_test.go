package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha512"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFetchCompressions(t *testing.T) {
	qcow := makeQCOW2(8<<30, qcowOpts{})
	raw := makeRaw(1<<20, true)
	bz2, err := os.ReadFile("testdata/raw.img.bz2")
	if err != nil {
		t.Fatal(err)
	}
	bz2Image := make([]byte, 65536) // see testdata/make-fixtures.sh
	bz2Image[510], bz2Image[511] = 0x55, 0xAA
	copy(bz2Image[1024:], "kohaku bzip2 fixture\n")

	cases := []struct {
		name, path  string
		body, image []byte
		format      string
		vsize       uint64
		compression string
	}{
		{"qcow2", "/a.qcow2", qcow, qcow, FormatQCOW2, 8 << 30, ""},
		{"raw", "/a.raw", raw, raw, FormatRaw, 1 << 20, ""},
		{"xz", "/a.qcow2.xz", xzBytes(t, qcow), qcow, FormatQCOW2, 8 << 30, "xz"},
		{"gzip", "/a.raw.gz", gzipBytes(t, raw), raw, FormatRaw, 1 << 20, "gzip"},
		{"zstd", "/a.qcow2.zst", zstdBytes(t, qcow), qcow, FormatQCOW2, 8 << 30, "zstd"},
		{"bzip2", "/raw.img.bz2", bz2, bz2Image, FormatRaw, 65536, "bzip2"},
		{"tar", "/a.tar", tarBytes(t, tar.FormatUSTAR, tarFile{"disk.raw", raw}), raw, FormatRaw, 1 << 20, "tar"},
		{"xz+tar", "/a.tar.xz", xzBytes(t, tarBytes(t, tar.FormatGNU, tarFile{"disk.raw", raw})), raw, FormatRaw, 1 << 20, "xz+tar"},
		{"gzip+tar", "/a.tar.gz", gzipBytes(t, tarBytes(t, tar.FormatGNU, tarFile{"image", qcow})), qcow, FormatQCOW2, 8 << 30, "gzip+tar"},
		{"zstd+tar", "/a.tar.zst", zstdBytes(t, tarBytes(t, tar.FormatPAX, tarFile{"disk.qcow2", qcow})), qcow, FormatQCOW2, 8 << 30, "zstd+tar"},
		// Recognised by content, not name.
		{"xz named qcow2", "/misnamed.qcow2", xzBytes(t, qcow), qcow, FormatQCOW2, 8 << 30, "xz"},
		{"plain named xz", "/misnamed.qcow2.xz", qcow, qcow, FormatQCOW2, 8 << 30, ""},
	}
	srv := newImageServer(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			url := srv.put(c.path, c.body)
			want := sha256Digest(c.body)
			for _, withSum := range []bool{false, true} {
				req := Request{Source: url}
				if withSum {
					req.Checksum = &want
				}
				r := mustFetch(t, &Cache{Dir: dir}, req)
				if r.Format != c.format || r.VirtualSize != c.vsize || r.Compression != c.compression {
					t.Fatalf("got format %s, virtual size %d, compression %q; want %s, %d, %q",
						r.Format, r.VirtualSize, r.Compression, c.format, c.vsize, c.compression)
				}
				if r.Digest != want || r.Verified != withSum || !r.Downloaded || r.Size != int64(len(c.image)) {
					t.Fatalf("got digest %v verified %v downloaded %v size %d; want %v %v true %d",
						r.Digest, r.Verified, r.Downloaded, r.Size, want, withSum, len(c.image))
				}
				if filepath.Dir(r.Path) != dir {
					t.Fatalf("result %s not in the cache %s", r.Path, dir)
				}
				assertFile(t, r.Path, c.image)
				r.Release()
			}
		})
	}
}

func TestFetchSHA512(t *testing.T) {
	srv := newImageServer(t)
	img := makeQCOW2(1<<30, qcowOpts{})
	url := srv.put("/x.qcow2", img)
	d, err := ParseDigest("sha512:" + hexSHA512(img))
	if err != nil {
		t.Fatal(err)
	}
	r := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: url, Checksum: &d})
	if r.Digest != d || !r.Verified {
		t.Fatalf("digest %v verified %v, want %v", r.Digest, r.Verified, d)
	}
}

func TestFetchTarMembers(t *testing.T) {
	raw := makeRaw(1<<20, true)
	qcow := makeQCOW2(1<<30, qcowOpts{})
	readme := []byte("This is Debian's cloud image.\n")
	srv := newImageServer(t)
	t.Run("disk.raw among others", func(t *testing.T) {
		url := srv.put("/debian.tar.xz", xzBytes(t, tarBytes(t, tar.FormatGNU,
			tarFile{"README", readme}, tarFile{"disk.raw", raw}, tarFile{"manifest.json", []byte("{}")})))
		dir := t.TempDir()
		r := mustFetch(t, &Cache{Dir: dir}, Request{Source: url})
		assertFile(t, r.Path, raw)
		if r.Compression != "xz+tar" {
			t.Errorf("compression %q", r.Compression)
		}
		r.Release()
		// Only the entry remains: the README extracted first is gone.
		if names := cacheFiles(t, dir); len(names) != 3 {
			t.Errorf("cache holds %v, want the image, its sidecar and lock", names)
		}
	})
	t.Run("one file whatever its name", func(t *testing.T) {
		url := srv.put("/one.tar", tarBytes(t, tar.FormatUSTAR, tarFile{"some/dir/image-file", qcow}))
		r := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: url})
		assertFile(t, r.Path, qcow)
	})
	t.Run("ambiguous", func(t *testing.T) {
		url := srv.put("/two.tar.gz", gzipBytes(t, tarBytes(t, tar.FormatGNU,
			tarFile{"a.img", raw}, tarFile{"README", readme}, tarFile{"b.qcow2", qcow})))
		dir := t.TempDir()
		_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url})
		errContains(t, err, url, "is a tar archive of at least 3 files of which at least 2 end in .raw, .img, .qcow2", `"a.img", "README", "b.qcow2"`)
		if !errors.Is(err, ErrUnsupportedImage) {
			t.Error("not ErrUnsupportedImage")
		}
		assertEmptyCache(t, dir)
	})
	t.Run("no disk name", func(t *testing.T) {
		url := srv.put("/none.tar", tarBytes(t, tar.FormatUSTAR, tarFile{"README", readme}, tarFile{"data", raw}))
		dir := t.TempDir()
		_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url})
		errContains(t, err, "of which none end in", `"README", "data"`)
		assertEmptyCache(t, dir)
	})
	t.Run("member checked", func(t *testing.T) {
		url := srv.put("/vmdk.tar", tarBytes(t, tar.FormatUSTAR, tarFile{"disk.img", append([]byte("KDMV"), make([]byte, 4096)...)}))
		_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: url})
		errContains(t, err, `(member "disk.img") is a VMDK image`)
	})
}

func TestFetchRefusesImages(t *testing.T) {
	dir := qemuFixtures(t)
	srv := newImageServer(t)
	for _, c := range []struct{ file, want string }{
		{"sparse.vmdk", "is a VMDK image; only qcow2 and raw disk images are accepted (convert it with qemu-img convert -O qcow2)"},
		{"small.iso", "is an ISO 9660 CD/DVD image"},
		{"backing.qcow2", `is a qcow2 image with a backing file ("plain.qcow2")`},
		{"datafile.qcow2", "is a qcow2 image with an external data file"},
		{"luks-header.qcow2", "is an encrypted qcow2 image"},
	} {
		t.Run(c.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			url := srv.put("/"+c.file+".xz", xzBytes(t, b))
			cache := t.TempDir()
			_, err = fetch(t, &Cache{Dir: cache}, Request{Source: url})
			errContains(t, err, "image "+url+" "+c.want)
			if !errors.Is(err, ErrUnsupportedImage) {
				t.Error("not ErrUnsupportedImage")
			}
			assertEmptyCache(t, cache)
		})
	}
	t.Run("raw without boot signature", func(t *testing.T) {
		b := makeRaw(1<<20, false)
		url := srv.put("/nosig.raw", gzipBytes(t, b))
		cache := t.TempDir()
		_, err := fetch(t, &Cache{Dir: cache}, Request{Source: url})
		errContains(t, err, url, "is not a recognised disk image", "it starts with bytes 00 00")
		assertEmptyCache(t, cache)
	})
	t.Run("html page", func(t *testing.T) {
		url := srv.put("/login", []byte("<!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>\n"))
		_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: url})
		errContains(t, err, "looks like an HTML page")
	})
	t.Run("two layers", func(t *testing.T) {
		url := srv.put("/double.xz", xzBytes(t, gzipBytes(t, makeRaw(1<<20, true))))
		_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: url})
		errContains(t, err, "is gzip-compressed data inside the image")
	})
}

func TestFetchCorruptCompressedData(t *testing.T) {
	srv := newImageServer(t)
	good := xzBytes(t, randomish(1<<20, 1))
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0xff
	url := srv.put("/bad.raw.xz", bad)
	dir := t.TempDir()
	_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url})
	errContains(t, err, url, "decompressing xz data")
	assertEmptyCache(t, dir)

	// With the expected digest known, the mismatch is what is reported.
	want := sha256Digest(good)
	_, err = fetch(t, &Cache{Dir: dir}, Request{Source: url, Checksum: &want})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("error %v is not a checksum mismatch", err)
	}
	assertEmptyCache(t, dir)
}

func TestFetchChecksumMismatch(t *testing.T) {
	srv := newImageServer(t)
	img := makeQCOW2(1<<30, qcowOpts{})
	for _, c := range []struct {
		name string
		body []byte
	}{{"plain", img}, {"xz", xzBytes(t, img)}} {
		t.Run(c.name, func(t *testing.T) {
			url := srv.put("/"+c.name, c.body)
			wrong := sha256Digest([]byte("something else"))
			dir := t.TempDir()
			_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url, Checksum: &wrong})
			if !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("error %v is not ErrChecksumMismatch", err)
			}
			errContains(t, err, url, "expected "+wrong.String(), "computed "+sha256Digest(c.body).String())
			assertEmptyCache(t, dir)
		})
	}
}

func TestFetchChecksumURL(t *testing.T) {
	srv := newTLSImageServer(t)
	cl := srv.Client()
	img := makeRaw(1<<20, true)
	body := xzBytes(t, img)
	d := sha256Digest(body)
	url := srv.put("/releases/12/debian-12-nocloud-amd64.raw.xz", body)
	sums := fmt.Sprintf("%s  debian-12-nocloud-amd64.qcow2\n%s  debian-12-nocloud-amd64.raw.xz\n", sumA, d.Hex)
	sumsURL := srv.put("/releases/12/SHA256SUMS", []byte(sums))
	dir := t.TempDir()
	c := &Cache{Dir: dir}
	r := mustFetch(t, c, Request{Client: cl, Source: url, ChecksumURL: sumsURL})
	if !r.Verified || r.Digest != d || !r.Downloaded {
		t.Fatalf("verified %v digest %v downloaded %v", r.Verified, r.Digest, r.Downloaded)
	}
	if filepath.Base(r.Path) != "sha256-"+d.Hex+".img" {
		t.Errorf("entry %s is not keyed by the digest", r.Path)
	}
	assertFile(t, r.Path, img)

	// A mirror serving the same bytes under another URL shares the entry.
	mirror := srv.put("/mirror/debian-12-nocloud-amd64.raw.xz", body)
	r2 := mustFetch(t, c, Request{Client: cl, Source: mirror, Checksum: &d})
	if r2.Downloaded || r2.Path != r.Path || !r2.Verified {
		t.Fatalf("mirror: downloaded %v path %s verified %v", r2.Downloaded, r2.Path, r2.Verified)
	}
	if gets, _ := srv.count("/mirror/debian-12-nocloud-amd64.raw.xz"); gets != 0 {
		t.Errorf("mirror was asked %d times", gets)
	}

	// A checksum file without the name.
	other := srv.put("/releases/13/SHA256SUMS", []byte(sumA+"  a.qcow2\n"))
	_, err := fetch(t, c, Request{Client: cl, Source: url, ChecksumURL: other})
	errContains(t, err, other, `no entry for "debian-12-nocloud-amd64.raw.xz"`, `"a.qcow2"`)

	// A local checksum file, a wrong digest in it.
	local := filepath.Join(t.TempDir(), "SHA256SUMS")
	if err := os.WriteFile(local, []byte(sumB+" *debian-12-nocloud-amd64.raw.xz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = fetch(t, &Cache{Dir: t.TempDir()}, Request{Client: cl, Source: url, ChecksumURL: local})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("error %v is not a checksum mismatch", err)
	}

	// Too large a checksum file.
	huge := srv.put("/huge/SHA256SUMS", bytes.Repeat([]byte("# padding\n"), MaxSumsSize/10+1))
	_, err = fetch(t, c, Request{Client: cl, Source: url, ChecksumURL: huge})
	errContains(t, err, "larger than")

	_, err = fetch(t, c, Request{Client: cl, Source: url, ChecksumURL: sumsURL, Checksum: &d})
	errContains(t, err, "mutually exclusive")

	_, err = fetch(t, c, Request{Client: cl, Source: url, ChecksumURL: srv.URL + "/nope/SHA256SUMS"})
	errContains(t, err, "GET "+srv.URL+"/nope/SHA256SUMS: 404 Not Found")
}

func TestFetchHTTPErrors(t *testing.T) {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	mux.HandleFunc("/loop/a", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop/b", http.StatusFound) })
	mux.HandleFunc("/loop/b", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop/a", http.StatusFound) })
	mux.HandleFunc("/chain/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/chain/")) // "/chain/" is hop 0
		http.Redirect(w, r, fmt.Sprintf("/chain/%d", n+1), http.StatusMovedPermanently)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/gone.qcow2", http.StatusFound) })
	mux.HandleFunc("/forbidden", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusForbidden) })
	img := makeQCOW2(1<<30, qcowOpts{})
	mux.HandleFunc("/hops/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hops/")) // "/hops/" is hop 0
		if n < maxRedirects {
			http.Redirect(w, r, fmt.Sprintf("/hops/%d", n+1), http.StatusFound)
			return
		}
		_, _ = w.Write(img) // a client that hangs up fails on its side
	})
	cases := []struct{ path, want string }{
		{"/x.qcow2", "GET " + srv.URL + "/x.qcow2: 404 Not Found"},
		{"/forbidden", "GET " + srv.URL + "/forbidden: 403 Forbidden"},
		{"/moved", "GET " + srv.URL + "/moved (redirected to " + srv.URL + "/gone.qcow2): 404 Not Found"},
		{"/loop/a", "GET " + srv.URL + "/loop/a: redirect loop: " + srv.URL + "/loop/b redirects back to " + srv.URL + "/loop/a"},
		{"/chain/0", "GET " + srv.URL + "/chain/0: too many redirects (more than 10), last to " + srv.URL + "/chain/11"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			dir := t.TempDir()
			_, err := fetch(t, &Cache{Dir: dir}, Request{Source: srv.URL + c.path})
			errContains(t, err, c.want)
			assertEmptyCache(t, dir)
		})
	}
	t.Run("ten redirects are fine", func(t *testing.T) {
		r := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: srv.URL + "/hops/0"})
		assertFile(t, r.Path, img)
	})
	t.Run("password redacted", func(t *testing.T) {
		u := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/x.qcow2"
		_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: u})
		errContains(t, err, "GET http://user:xxxxx@", "404 Not Found")
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %q shows the password", err)
		}
	})
	t.Run("unsupported scheme", func(t *testing.T) {
		_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: "ftp://example.com/x.img"})
		errContains(t, err, "unsupported source ftp://example.com/x.img:")
	})
}

func TestFetchTLS(t *testing.T) {
	img := makeQCOW2(1<<30, qcowOpts{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake error is expected
	srv.StartTLS()
	defer srv.Close()
	_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: srv.URL + "/x.qcow2"})
	errContains(t, err, "GET "+srv.URL+"/x.qcow2: TLS error", "certificate")
	// A client trusting the server's certificate works.
	r := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: srv.URL + "/x.qcow2", Client: srv.Client()})
	assertFile(t, r.Path, img)
}

// hijackServer serves handler with the raw connection.
func hijackServer(t *testing.T, handler func(conn net.Conn, rw *bufio.ReadWriter)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		handler(conn, rw)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestFetchBodyCutShort(t *testing.T) {
	body := xzBytes(t, randomish(1<<20, 2))
	for _, c := range []struct {
		name string
		body []byte
	}{{"xz", body}, {"plain", makeRaw(1<<20, true)}} {
		t.Run(c.name, func(t *testing.T) {
			half := len(c.body) / 2
			srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
				fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n", len(c.body))
				_, _ = rw.Write(c.body[:half])
				rw.Flush()
			})
			dir := t.TempDir()
			url := srv.URL + "/cut.img"
			_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url})
			errContains(t, err, "GET "+url, fmt.Sprintf("received %d of %d bytes", half, len(c.body)))
			assertEmptyCache(t, dir)
		})
	}
}

func TestFetchStall(t *testing.T) {
	body := makeRaw(1<<20, true)
	release := make(chan struct{})
	defer close(release)
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		_, _ = rw.Write(body[:100000])
		rw.Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	})
	dir := t.TempDir()
	url := srv.URL + "/slow.raw"
	start := time.Now()
	_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url, StallTimeout: 300 * time.Millisecond})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("stall detected after %v", d)
	}
	errContains(t, err, "GET "+url, "stalled", "300ms", fmt.Sprintf("of %d bytes", len(body)))
	assertEmptyCache(t, dir)

	// A server that never answers is a stall too.
	silent := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	})
	_, err = fetch(t, &Cache{Dir: dir}, Request{Source: silent.URL + "/x", StallTimeout: 200 * time.Millisecond})
	errContains(t, err, "GET "+silent.URL+"/x", "stalled", "200ms")
}

func TestFetchCancel(t *testing.T) {
	body := makeRaw(8<<20, true)
	started := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		for off := 0; off < len(body); off += 64 << 10 {
			if _, err := w.Write(body[off : off+64<<10]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			once.Do(func() { close(started) })
			time.Sleep(20 * time.Millisecond)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancelledAt := make(chan time.Time, 1)
	go func() {
		<-started
		time.Sleep(100 * time.Millisecond)
		cancelledAt <- time.Now()
		cancel()
	}()
	c := &Cache{Dir: dir}
	_, err := c.Fetch(ctx, Request{Source: srv.URL + "/big.raw"})
	returned := time.Now()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v is not context.Canceled", err)
	}
	if d := returned.Sub(<-cancelledAt); d > time.Second {
		t.Errorf("Fetch returned %v after the cancellation", d)
	}
	errContains(t, err, srv.URL+"/big.raw")
	assertEmptyCache(t, dir)
}

func TestFetchProgress(t *testing.T) {
	body := makeRaw(1<<20, true)
	const chunk = 40 << 10 // 26 chunks, 100ms apart: about 2.6s
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		for off := 0; off < len(body); off += chunk {
			_, _ = w.Write(body[off:min(off+chunk, len(body))])
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}))
	defer srv.Close()
	var (
		reports []Progress
		times   []time.Time
	)
	r := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{
		Source: srv.URL + "/x.raw",
		Progress: func(p Progress) {
			reports = append(reports, p)
			times = append(times, time.Now())
		},
	})
	assertFile(t, r.Path, body)
	if len(reports) < 3 {
		t.Fatalf("got %d progress reports over ~2.6s, want at least 3 (two periodic, one final): %+v", len(reports), reports)
	}
	for i, p := range reports {
		if p.Total != int64(len(body)) {
			t.Errorf("report %d: total %d, want %d", i, p.Total, len(body))
		}
		if p.Rate <= 0 || p.Elapsed <= 0 {
			t.Errorf("report %d: rate %v elapsed %v", i, p.Rate, p.Elapsed)
		}
		if i == 0 {
			continue
		}
		if p.Done <= reports[i-1].Done || p.Elapsed <= reports[i-1].Elapsed {
			t.Errorf("report %d (%+v) does not advance on %+v", i, p, reports[i-1])
		}
		// Periodic reports are at least a second apart; the final one may
		// follow sooner.
		if i < len(reports)-1 && times[i].Sub(times[i-1]) < 950*time.Millisecond {
			t.Errorf("reports %d and %d only %v apart", i-1, i, times[i].Sub(times[i-1]))
		}
	}
	if last := reports[len(reports)-1]; last.Done != int64(len(body)) {
		t.Errorf("final report done %d, want %d", last.Done, len(body))
	}
}

func TestFetchLocal(t *testing.T) {
	src := t.TempDir()
	img := makeQCOW2(2<<30, qcowOpts{})
	p := filepath.Join(src, "local.qcow2")
	if err := os.WriteFile(p, img, 0o644); err != nil {
		t.Fatal(err)
	}
	d := sha256Digest(img)
	cache := filepath.Join(t.TempDir(), "cache")
	c := &Cache{Dir: cache}

	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, source := range []string{p, "file://" + filepath.ToSlash(p), rel} {
		r := mustFetch(t, c, Request{Source: source, Checksum: &d})
		if r.Path != p || r.Downloaded || !r.Verified || r.Format != FormatQCOW2 || r.VirtualSize != 2<<30 || r.Compression != "" {
			t.Fatalf("%s: got %+v", source, r)
		}
		// The digest is computed in the pass that reads the image (the
		// upload's), not in one of its own before it: unknown until read.
		if r.Digest != (Digest{}) {
			t.Fatalf("%s: digest %v known before the image was read", source, r.Digest)
		}
		for range 2 { // each reader reads the whole image from its start
			if got := readAllOpen(t, r); !bytes.Equal(got, img) {
				t.Fatalf("%s: read %d bytes, not the image's %d", source, len(got), len(img))
			}
			if r.Digest != d {
				t.Fatalf("%s: digest after reading %v, want %v", source, r.Digest, d)
			}
		}
		r.Release()
	}
	// Without a checksum it is still used in place, with its digest.
	r := mustFetch(t, c, Request{Source: p})
	readAllOpen(t, r)
	if r.Path != p || r.Verified || r.Digest != d {
		t.Fatalf("got %+v", r)
	}
	r.Release()
	// sha512 when that is what is expected.
	d512 := Digest{Algorithm: SHA512, Hex: fmt.Sprintf("%x", sha512.Sum512(img))}
	r = mustFetch(t, c, Request{Source: p, Checksum: &d512})
	readAllOpen(t, r)
	if r.Digest != d512 || !r.Verified {
		t.Fatalf("sha512: got %+v", r)
	}
	r.Release()
	if names := cacheFiles(t, cache); len(names) != 0 {
		t.Errorf("in-place use wrote %v to the cache", names)
	}
	// A wrong digest: the read that would complete the image hands out
	// nothing and fails, so an upload fed by it fails.
	wrong := sha256Digest(nil)
	r = mustFetch(t, c, Request{Source: p, Checksum: &wrong})
	rc, err := r.Open()
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	r.Release()
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("error %v is not a mismatch", err)
	}
	errContains(t, err, p)
	if n >= int64(len(img)) {
		t.Errorf("the mismatching image was handed out whole (%d bytes)", n)
	}
	if r.Digest != (Digest{}) {
		t.Errorf("digest %v set for a mismatching image", r.Digest)
	}
	// A file that shrinks under the reader fails the read.
	grow := filepath.Join(src, "grow.qcow2")
	if err := os.WriteFile(grow, img, 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustFetch(t, c, Request{Source: grow})
	if err := os.Truncate(grow, int64(len(img)/2)); err != nil {
		t.Fatal(err)
	}
	rc, err = r.Open()
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	r.Release()
	errContains(t, err, "changed while it was read", "ends after")

	vmdk := filepath.Join(src, "x.vmdk")
	if err := os.WriteFile(vmdk, append([]byte("KDMV"), make([]byte, 4096)...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = fetch(t, c, Request{Source: vmdk})
	errContains(t, err, "image "+vmdk+" is a VMDK image")

	_, err = fetch(t, c, Request{Source: filepath.Join(src, "missing.qcow2")})
	errContains(t, err, "missing.qcow2", "no such file")
	_, err = fetch(t, c, Request{Source: "file://example.com/x.qcow2"})
	errContains(t, err, "only local files")
}

func TestFetchLocalCompressed(t *testing.T) {
	src := t.TempDir()
	raw := makeRaw(1<<20, true)
	p := filepath.Join(src, "disk.raw.zst")
	if err := os.WriteFile(p, zstdBytes(t, raw), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	c := &Cache{Dir: cache}
	r1 := mustFetch(t, c, Request{Source: p})
	if !r1.Downloaded || filepath.Dir(r1.Path) != cache || r1.Compression != "zstd" {
		t.Fatalf("got %+v", r1)
	}
	assertFile(t, r1.Path, raw)
	r1.Release()
	r2 := mustFetch(t, c, Request{Source: p})
	if r2.Downloaded || r2.Path != r1.Path {
		t.Fatalf("unchanged local file decompressed again: %+v", r2)
	}
	r2.Release()
	// A changed file is decompressed again.
	raw2 := makeRaw(2<<20, true)
	if err := os.WriteFile(p, zstdBytes(t, raw2), 0o644); err != nil {
		t.Fatal(err)
	}
	r3 := mustFetch(t, c, Request{Source: p})
	if !r3.Downloaded || r3.VirtualSize != 2<<20 {
		t.Fatalf("changed local file not decompressed again: %+v", r3)
	}
	assertFile(t, r3.Path, raw2)
}

func TestReleaseIdempotent(t *testing.T) {
	srv := newImageServer(t)
	url := srv.put("/x.qcow2", makeQCOW2(1<<30, qcowOpts{}))
	r := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: url})
	r.Release()
	r.Release()
	var nilResult *Result
	nilResult.Release()
}

// readAllOpen reads the whole image through a reader from r.Open.
func readAllOpen(t *testing.T, r *Result) []byte {
	t.Helper()
	rc, err := r.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
