package domain

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var capture = flag.String("capture", "", "libvirt URI (e.g. qemu:///system): define each golden case there with virsh, save its dumpxml under testdata/libvirt, undefine it")

func libvirtPath(name string) string { return filepath.Join("testdata", "libvirt", name+".xml") }

// TestCaptureLibvirtDumps refreshes testdata/libvirt from a real libvirtd. It
// only defines domains (never starts them), only ones named kohaku-domtest-*,
// refuses to touch a domain that already exists, and undefines what it
// defined.
func TestCaptureLibvirtDumps(t *testing.T) {
	if *capture == "" {
		t.Skip("set -capture=URI to refresh testdata/libvirt from a real libvirtd")
	}
	virsh := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		cmd := exec.Command("virsh", append([]string{"-c", *capture}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
		}
		return out.String(), nil
	}
	if err := os.MkdirAll(filepath.Join("testdata", "libvirt"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.spec.Name
			if !strings.HasPrefix(name, "kohaku-domtest-") {
				t.Fatalf("refusing to define %q: test domains are named kohaku-domtest-*", name)
			}
			if _, err := virsh("domstate", name); err == nil {
				t.Fatalf("a domain named %s already exists; remove it by hand first", name)
			}
			doc, err := Marshal(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), name+".xml")
			if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := virsh("define", file); err != nil {
				t.Fatalf("virsh define: %v", err)
			}
			t.Cleanup(func() {
				if _, err := virsh("undefine", "--nvram", name); err != nil {
					t.Errorf("virsh undefine %s: %v", name, err)
				}
			})
			dump, err := virsh("dumpxml", name)
			if err != nil {
				t.Fatalf("virsh dumpxml: %v", err)
			}
			if err := os.WriteFile(libvirtPath(tc.name), []byte(dump), 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
}
