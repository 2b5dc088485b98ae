package image

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInPlaceRewriteNotUploaded: a local qcow2 image without a checksum is
// checked, then rewritten in place (same size, now with a backing file)
// before its upload reads it: the upload fails instead of sending the
// rewritten image as checked.
func TestInPlaceRewriteNotUploaded(t *testing.T) {
	good := makeQCOW2(1<<20, qcowOpts{})
	bad := makeQCOW2(1<<20, qcowOpts{backing: "/etc/shadow"})
	if len(good) != len(bad) {
		t.Fatalf("test images differ in size: %d, %d", len(good), len(bad))
	}
	p := filepath.Join(t.TempDir(), "local.qcow2")
	if err := os.WriteFile(p, good, 0o644); err != nil {
		t.Fatal(err)
	}
	res := mustFetch(t, &Cache{Dir: t.TempDir()}, Request{Source: p})
	defer res.Release()
	if res.Path != p {
		t.Fatalf("image not used in place: %s", res.Path)
	}
	if err := os.WriteFile(p, bad, 0o644); err != nil { // same inode: the held handle sees it
		t.Fatal(err)
	}
	r, err := res.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = io.ReadAll(r)
	if err == nil || !strings.Contains(err.Error(), "changed between its check and its upload") {
		t.Fatalf("uploading the rewritten image: %v, want it refused", err)
	}

	// Unchanged, it uploads.
	if err := os.WriteFile(p, good, 0o644); err != nil {
		t.Fatal(err)
	}
	r2, err := res.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if _, err := io.ReadAll(r2); err != nil {
		t.Fatalf("uploading the image as checked: %v", err)
	}
}
