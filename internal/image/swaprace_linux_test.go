//go:build linux

package image

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCacheDirSwapRace: whoever can write the cache directory's parent
// swaps the directory for a symbolic link to a directory of their own,
// holding a planted entry under the genuine image's digest, between the
// check and the use. The Fetch must not serve the planted image: the
// directory is checked on the handle every later operation goes through.
func TestCacheDirSwapRace(t *testing.T) {
	parent := t.TempDir()
	cacheDir := filepath.Join(parent, "cache")
	evilDir := t.TempDir()
	genuine := makeRaw(1<<20, true)
	planted := makeRaw(1<<20, true)
	copy(planted[4096:], "planted by another user")
	srv := newImageServer(t)
	gURL := srv.put("/genuine.raw", genuine)
	pURL := srv.put("/planted.raw", planted)
	gSum, pSum := sha256Digest(genuine), sha256Digest(planted)

	// The genuine entry, and the planted one under the genuine digest.
	mustFetch(t, &Cache{Dir: cacheDir}, Request{Source: gURL, Checksum: &gSum}).Release()
	mustFetch(t, &Cache{Dir: evilDir}, Request{Source: pURL, Checksum: &pSum}).Release()
	for _, suffix := range []string{".img", ".json", ".lock"} {
		if err := os.Rename(filepath.Join(evilDir, pSum.key()+suffix), filepath.Join(evilDir, gSum.key()+suffix)); err != nil {
			t.Fatal(err)
		}
	}
	side := filepath.Join(evilDir, gSum.key()+".json")
	raw, err := os.ReadFile(side)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["key"], m["digest"] = gSum.key(), gSum.String()
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(side, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	// The other user swaps the directory for a link to theirs (atomically,
	// so there is no moment without one) right after Kohaku checked it.
	link := filepath.Join(parent, "link")
	if err := os.Symlink(evilDir, link); err != nil {
		t.Fatal(err)
	}
	swap := func() error {
		return unix.Renameat2(unix.AT_FDCWD, cacheDir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
	}
	swapped := false
	testHookCacheDirOpened = func(string) {
		done := make(chan error)
		go func() { done <- swap() }()
		if err := <-done; err != nil {
			t.Errorf("swapping the cache directory: %v", err)
			return
		}
		swapped = true
	}
	defer func() { testHookCacheDirOpened = nil }()

	r, err := fetch(t, &Cache{Dir: cacheDir}, Request{Source: gURL, Checksum: &gSum})
	testHookCacheDirOpened = nil
	if !swapped {
		t.Fatal("the directory was not swapped")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	rc, err := r.Open()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, genuine) {
		t.Fatal("the image served is the one planted in the directory swapped in after the check")
	}
	if err := swap(); err != nil {
		t.Fatal(err)
	}
	// A directory that is a link when it is opened is refused.
	if err := swap(); err != nil {
		t.Fatal(err)
	}
	_, err = fetch(t, &Cache{Dir: cacheDir}, Request{Source: gURL, Checksum: &gSum})
	errContains(t, err, "not a directory")
}
