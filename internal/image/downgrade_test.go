package image

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRedirectDowngradeRefused has an https server redirect the image and
// the checksum file to a plain http server: both are refused, nothing is
// fetched from the plain server, and nothing is cached.
func TestRedirectDowngradeRefused(t *testing.T) {
	img := makeRaw(1<<20, true)
	d := sha256Digest(img)
	plain := newImageServer(t)
	plainImg := plain.put("/disk.raw", img)
	plainSums := plain.put("/SHA256SUMS", []byte(d.Hex+"  disk.raw\n"))
	mux := http.NewServeMux()
	secure := httptest.NewTLSServer(mux)
	defer secure.Close()
	mux.HandleFunc("/disk.raw", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, plainImg, http.StatusFound) })
	mux.HandleFunc("/SHA256SUMS", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, plainSums, http.StatusFound) })
	mux.HandleFunc("/ok/disk.raw", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) })
	mux.HandleFunc("/ok/SHA256SUMS", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(d.Hex + "  disk.raw\n")) })

	dir := t.TempDir()
	c := &Cache{Dir: dir}
	for _, req := range []Request{
		{Source: secure.URL + "/disk.raw", Checksum: &d},
		{Source: secure.URL + "/ok/disk.raw", ChecksumURL: secure.URL + "/SHA256SUMS"},
		{Source: secure.URL + "/disk.raw", ChecksumURL: secure.URL + "/ok/SHA256SUMS"},
	} {
		req.Client = secure.Client()
		_, err := fetch(t, c, req)
		if !errors.Is(err, ErrDowngrade) {
			t.Fatalf("%s: error %v does not wrap ErrDowngrade", req.Source, err)
		}
		errContains(t, err, "redirect from https to http refused", "redirects to "+plain.URL)
	}
	for _, p := range []string{"/disk.raw", "/SHA256SUMS"} {
		if _, bodies := plain.count(p); bodies != 0 {
			t.Errorf("the plain server served %s %d times", p, bodies)
		}
	}
	assertEmptyCache(t, dir)

	// A client with its own redirect policy gets the check as well.
	own := secure.Client()
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return nil }
	_, err := fetch(t, c, Request{Source: secure.URL + "/disk.raw", Checksum: &d, Client: own})
	if !errors.Is(err, ErrDowngrade) {
		t.Fatalf("own policy: error %v does not wrap ErrDowngrade", err)
	}

	// https to https stays allowed.
	r := mustFetch(t, c, Request{Source: secure.URL + "/ok/disk.raw", ChecksumURL: secure.URL + "/ok/SHA256SUMS", Client: secure.Client()})
	if !r.Verified || r.ChecksumOverHTTP {
		t.Errorf("https checksum URL: verified %v, over http %v", r.Verified, r.ChecksumOverHTTP)
	}
	r.Release()
}

// TestHTTPChecksumURLNeedsOptIn: a plain http checksum URL is refused
// unless allowed, and when allowed the image is not reported as verified.
func TestHTTPChecksumURLNeedsOptIn(t *testing.T) {
	img := makeRaw(1<<20, true)
	d := sha256Digest(img)
	srv := newImageServer(t)
	// On the loopback, plain http never leaves the machine: no permission
	// needed, and the image is verified.
	local := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: srv.put("/disk.raw", img),
		ChecksumURL: srv.put("/SHA256SUMS", []byte(d.Hex+"  disk.raw\n"))})
	defer local.Release()
	if !local.Verified || local.ChecksumOverHTTP {
		t.Errorf("loopback: verified %v, over http %v", local.Verified, local.ChecksumOverHTTP)
	}
	// A mirror elsewhere: a name that is not loopback, dialled to the test
	// server.
	addr := srv.Listener.Addr().String()
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	remote := func(u string) string { return strings.Replace(u, "127.0.0.1", "mirror.invalid", 1) }
	src := remote(srv.URL + "/disk.raw")
	sums := remote(srv.URL + "/SHA256SUMS")
	dir := t.TempDir()
	_, before := srv.count("/disk.raw")
	_, err := fetch(t, &Cache{Dir: dir}, Request{Client: cl, Source: src, ChecksumURL: sums})
	errContains(t, err, "checksum URL "+sums+" is plain http", "allow plain http explicitly")
	if _, bodies := srv.count("/disk.raw"); bodies != before {
		t.Errorf("the image was downloaded %d times before the refusal", bodies-before)
	}
	r := mustFetch(t, &Cache{Dir: dir}, Request{Client: cl, Source: src, ChecksumURL: sums, AllowHTTPChecksumURL: true})
	defer r.Release()
	if r.Verified || !r.ChecksumOverHTTP || r.Digest != d {
		t.Errorf("verified %v, over http %v, digest %v", r.Verified, r.ChecksumOverHTTP, r.Digest)
	}
	// A wrong digest in it is still a mismatch.
	bad := remote(srv.put("/bad/SHA256SUMS", []byte(sumA+"  disk.raw\n")))
	_, err = fetch(t, &Cache{Dir: t.TempDir()}, Request{Client: cl, Source: src, ChecksumURL: bad, AllowHTTPChecksumURL: true})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Errorf("error %v is not a checksum mismatch", err)
	}
}

// TestURLSecretsRedacted: a URI password and a presigned query string
// reach neither error messages nor Redact's output.
func TestURLSecretsRedacted(t *testing.T) {
	u := "https://user:hunter2@127.0.0.1:1/disk.raw?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIAKEY"
	got := Redact(u)
	for _, secret := range []string{"hunter2", "s3cr3t", "AKIAKEY"} {
		if strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q keeps %q", u, got, secret)
		}
	}
	if !strings.Contains(got, "X-Amz-Signature=xxxxx") || !strings.Contains(got, "127.0.0.1:1/disk.raw") {
		t.Errorf("Redact = %q: the URL is no longer recognisable", got)
	}
	_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: u, StallTimeout: time.Second})
	if err == nil {
		t.Fatal("fetch from a closed port succeeded")
	}
	for _, secret := range []string{"hunter2", "s3cr3t", "AKIAKEY"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q keeps %q", err, secret)
		}
	}
	if Redact("/a/local/path") != "/a/local/path" {
		t.Error("a local path was changed")
	}
}
