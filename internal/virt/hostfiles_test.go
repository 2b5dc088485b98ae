package virt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadHostFileLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "version")
	if err := os.WriteFile(f, []byte("550.54.14\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Settings{URI: "qemu:///system"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got, err := c.ReadHostFile(ctx, f, 256); err != nil || string(got) != "550.54.14\n" {
		t.Errorf("got %q %v", got, err)
	}
	if got, err := c.ReadHostFile(ctx, f, 3); err != nil || string(got) != "550" {
		t.Errorf("limited read: %q %v", got, err)
	}
	if _, err := c.ReadHostFile(ctx, filepath.Join(dir, "missing"), 256); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := c.ReadHostFile(ctx, "/tmp/x; rm -rf /", 256); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("unsafe path: %v", err)
	}
	tcp, err := New(Settings{URI: "qemu+tcp://10.0.0.5/system"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tcp.ReadHostFile(ctx, f, 256); !errors.Is(err, ErrHostFilesUnsupported) {
		t.Errorf("tcp: %v", err)
	}
}

func TestReadHostFilesLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "0000:c1:00.0-resource"), filepath.Join(dir, "reset_method")
	if err := os.WriteFile(a, []byte("0x1 0x2 0x200\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("flr bus\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Settings{URI: "qemu:///system"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadHostFiles(context.Background(), []string{a, b, filepath.Join(dir, "missing")}, 4)
	if err != nil || len(got) != 2 || string(got[a]) != "0x1 " || string(got[b]) != "flr " {
		t.Fatalf("got %q %v", got, err)
	}
	if _, err := c.ReadHostFiles(context.Background(), []string{a, "/x y"}, 4); err == nil {
		t.Fatal("a path with a space was accepted")
	}
	if !c.ReadsHostFiles() {
		t.Fatal("a local connection reads host files")
	}
}

// The SSH form of ReadHostFiles prints each readable file after a mark.
func TestSplitHostFiles(t *testing.T) {
	t.Parallel()
	raw := "\n@@kohaku-file@@ /sys/bus/pci/devices/0000:c1:00.0/resource\n0x1 0x2 0x200\n0x0 0x0 0x0\n" +
		"\n@@kohaku-file@@ /sys/bus/pci/devices/0000:c1:00.0/reset_method\nflr bus\n" +
		"\n@@kohaku-file@@ /sys/empty\n"
	got := splitHostFiles([]byte(raw))
	want := map[string]string{
		"/sys/bus/pci/devices/0000:c1:00.0/resource":     "0x1 0x2 0x200\n0x0 0x0 0x0\n",
		"/sys/bus/pci/devices/0000:c1:00.0/reset_method": "flr bus\n",
		"/sys/empty": "",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}
