package virt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// Over qemu+ssh the file is read with cat in an SSH session of its own; an
// sshd on loopback stands in for the remote host (libvirtd is not needed).
func TestAccReadHostFileSSH(t *testing.T) {
	acctest.Acceptance(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system?keyfile=%s&known_hosts=%s", sshd.Port, sshd.ClientKey, sshd.WriteKnownHosts(t))
	c, err := New(Settings{URI: uri, CallTimeout: 20 * time.Second, SSH: SSHSettings{DisableAgent: true}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := c.ReadHostFile(ctx, "/etc/hostname", 256)
	if err != nil || string(got) != string(want) {
		t.Errorf("got %q %v, want %q", got, err, want)
	}
	if _, err := c.ReadHostFile(ctx, "/sys/module/kohaku-no-such-module/version", 256); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// Several files in one session: the missing one left out, each cut at
	// the limit.
	files, err := c.ReadHostFiles(ctx, []string{"/etc/hostname", "/sys/module/kohaku-no-such-module/version", "/proc/self/stat"}, 3)
	if err != nil || len(files) != 2 || string(files["/etc/hostname"]) != string(want[:min(3, len(want))]) || len(files["/proc/self/stat"]) != 3 {
		t.Errorf("ReadHostFiles: %q %v", files, err)
	}
}
