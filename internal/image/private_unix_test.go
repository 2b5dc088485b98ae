//go:build unix

package image

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// plantEntry writes a complete, well-formed cache entry for d holding img
// (its sidecar records img's own size and SHA-256), as another local user
// would: only the defence under test can stop it.
func plantEntry(t *testing.T, dir string, d Digest, img []byte) {
	t.Helper()
	key := d.key()
	if err := os.WriteFile(filepath.Join(dir, key+".img"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	meta := `{"version":2,"key":"` + key + `","source":"planted","digest":"` + d.String() +
		`","format":"raw","virtual_size":` + strconv.Itoa(len(img)) + `,"size":` + strconv.Itoa(len(img)) +
		`,"stored_sha256":"` + sha256Digest(img).Hex + `"}`
	if err := os.WriteFile(filepath.Join(dir, key+".json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCacheDirMustBePrivate(t *testing.T) {
	genuine := makeRaw(1<<20, true)
	d := sha256Digest(genuine)
	srv := newImageServer(t)
	url := srv.put("/disk.raw", genuine)

	// A shared directory with an entry planted under the genuine digest.
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	evil := makeRaw(1<<20, true)
	copy(evil[4096:], "planted")
	plantEntry(t, shared, d, evil)
	_, err := fetch(t, &Cache{Dir: shared}, Request{Source: url, Checksum: &d})
	errContains(t, err, "image cache directory "+shared+" is writable by group or others", "chmod 700")

	// Created by Fetch: private.
	fresh := filepath.Join(t.TempDir(), "a", "b")
	mustFetch(t, &Cache{Dir: fresh}, Request{Source: url, Checksum: &d}).Release()
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("new cache directory: %v, %v", fi.Mode(), err)
	}

	// Owned by another user (only root can make one).
	if os.Getuid() == 0 {
		other := filepath.Join(t.TempDir(), "other")
		if err := os.Mkdir(other, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		_, err := fetch(t, &Cache{Dir: other}, Request{Source: url, Checksum: &d})
		errContains(t, err, "is owned by uid 4242, not by this user")
	}

	// A symbolic link as the directory is refused too.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(fresh, link); err != nil {
		t.Fatal(err)
	}
	_, err = fetch(t, &Cache{Dir: link}, Request{Source: url, Checksum: &d})
	errContains(t, err, "is not a directory")
}

func TestCacheEntriesAreNotFollowed(t *testing.T) {
	genuine := makeRaw(1<<20, true)
	d := sha256Digest(genuine)
	srv := newImageServer(t)
	url := srv.put("/disk.raw", genuine)
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}

	// The image of the entry is a symbolic link to a file elsewhere.
	elsewhere := t.TempDir()
	evil := makeRaw(1<<20, true)
	copy(evil[4096:], "planted")
	plantEntry(t, elsewhere, d, evil)
	key := d.key()
	if err := os.Symlink(filepath.Join(elsewhere, key+".img"), filepath.Join(dir, key+".img")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, key+".json"), filepath.Join(dir, key+".json")); err != nil {
		t.Fatal(err)
	}
	r := mustFetch(t, &Cache{Dir: dir}, Request{Source: url, Checksum: &d})
	defer r.Release()
	if !r.Downloaded {
		t.Error("the linked entry was used")
	}
	assertFile(t, r.Path, genuine)
	if fi, err := os.Lstat(r.Path); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("entry %s: %v, %v", r.Path, fi.Mode(), err)
	}
	if _, err := openNoFollow(filepath.Join(dir, "x")); err == nil {
		t.Error("opened a missing file")
	}
	if err := os.Symlink(r.Path, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	_, err := openNoFollow(filepath.Join(dir, "link"))
	errContains(t, err, "is a symbolic link")
}

func TestDefaultCacheDirWithoutHome(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir := DefaultCacheDir()
	if filepath.Dir(dir) != tmp {
		t.Fatalf("DefaultCacheDir() = %s, not in %s", dir, tmp)
	}
	img := makeRaw(1<<20, true)
	srv := newImageServer(t)
	mustFetch(t, &Cache{}, Request{Source: srv.put("/disk.raw", img)}).Release()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v", dir, fi, err)
	}
}

// TestInPlaceReadsTheVerifiedHandle replaces a local image at its path
// after Fetch verified it: Open still reads the verified file.
func TestInPlaceReadsTheVerifiedHandle(t *testing.T) {
	img := makeRaw(1<<20, true)
	d := sha256Digest(img)
	p := filepath.Join(t.TempDir(), "disk.raw")
	if err := os.WriteFile(p, img, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: p, Checksum: &d})
	defer r.Release()
	if r.Path != p || !r.Verified {
		t.Fatalf("path %s verified %v", r.Path, r.Verified)
	}
	evil := makeRaw(1<<20, true)
	copy(evil[4096:], "swapped")
	os.Remove(p)
	if err := os.WriteFile(p, evil, 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := r.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, img) {
		t.Fatalf("read %d bytes (%v); equal to the verified image: %v", len(got), err, bytes.Equal(got, img))
	}
}
