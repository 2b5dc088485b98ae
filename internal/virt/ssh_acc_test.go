package virt

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// acceptance (an OpenSSH server on loopback, at its default MaxSessions 10):
// host files are read in sessions on the host's shared SSH connection, and
// reads past MaxSessions fall back to a connection of their own instead of
// failing. When the reads are over, no SSH connection is left open.
func TestAccReadHostFileSharesTheSSHConnection(t *testing.T) {
	acctest.Acceptance(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system?keyfile=%s&known_hosts=%s", sshd.Port, sshd.ClientKey, sshd.WriteKnownHosts(t))
	c, err := New(Settings{URI: uri, CallTimeout: 30 * time.Second, SSH: SSHSettings{DisableAgent: true}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	const reads = 16
	var wg sync.WaitGroup
	for i := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.ReadHostFile(context.Background(), "/etc/hostname", 256)
			if err != nil || string(got) != string(want) {
				t.Errorf("read %d: got %q %v, want %q", i, got, err, want)
			}
		}()
	}
	wg.Wait()
	tcp, hs := c.SSHConnections()
	t.Logf("%d concurrent host file reads: %d TCP connections, %d handshakes", reads, tcp, hs)
	if hs < 1 || hs > reads-8 {
		t.Errorf("%d handshakes for %d concurrent reads: want one shared connection plus at most one per read past MaxSessions 10 (and one more if the shared one closed between reads)", hs, reads)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sshd.Sessions(t) != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := sshd.Sessions(t); n != 0 {
		t.Errorf("%d SSH connections still open after the reads", n)
	}
}
