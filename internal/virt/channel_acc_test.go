package virt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
)

// acceptance: reading the report channel of a running domain whose guest
// never writes, through the unix socket, qemu+tcp, qemu+tls (the test
// host's throwaway PKI) and qemu+ssh (an sshd of the test's own on
// loopback, libvirt's socket reached over SSH). Each read
// holds a stream on a connection of its own; fifty waits that end at their
// deadline leave no goroutine, file descriptor or libvirtd connection
// behind, and a cancelled wait returns at once.
func TestAccReadChannelReleasesEverything(t *testing.T) {
	uris := map[string]string{"unix": acctest.URI(t), "tcp": acctest.Env(t, "KOHAKU_TEST_TCP_URI")}
	uris["tls"] = acctest.Env(t, "KOHAKU_TEST_TLS_URI") + "?pkipath=" + url.QueryEscape(acctest.Env(t, "KOHAKU_TEST_TLS_PKI"))
	sshd := acctest.StartSSHD(t)
	uris["ssh"] = fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system?keyfile=%s&known_hosts=%s",
		sshd.Port, url.QueryEscape(sshd.ClientKey), url.QueryEscape(sshd.WriteKnownHosts(t)))
	kernel := acctest.Env(t, "KOHAKU_TEST_KERNEL")
	initrd := acctest.Env(t, "KOHAKU_TEST_INITRD")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admin, err := New(Settings{URI: uris["unix"]})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 3)
	rand.Read(b)
	name := "kohaku-acc-chan-" + hex.EncodeToString(b)
	// No disk: the kernel boots, finds no root and waits; the guest never
	// writes to the report channel.
	xml, err := domain.Marshal(domain.Spec{
		Name: name, Type: domain.TypeQEMU, VCPU: 1, MemoryMiB: 128,
		Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0 panic=0",
		SerialLogPath: t.TempDir() + "/serial.log",
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := admin.DefineDomain(ctx, name, xml)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		admin.StopDomain(ctx, ref, 0)
		admin.UndefineDomain(ctx, ref)
		os.Remove("/var/log/libvirt/qemu/" + name + ".log")
	})
	if err := admin.StartDomain(ctx, ref); err != nil {
		t.Fatal(err)
	}

	for transport, uri := range uris {
		t.Run(transport, func(t *testing.T) {
			c, err := New(Settings{URI: uri})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The shared connection is up before counting, as in a provider.
			if _, err := c.DomainState(ctx, name); err != nil {
				t.Fatal(err)
			}

			// A channel the domain lacks is an error from libvirt, at once.
			err = c.ReadChannel(ctx, name, "org.kohaku.no-such.0", func([]byte) bool { return true })
			var ce *CallError
			if !errors.As(err, &ce) {
				t.Errorf("missing channel: err = %v, want a CallError", err)
			}

			// Cancel while the stream is open: back at once.
			cctx, ccancel := context.WithCancel(ctx)
			time.AfterFunc(500*time.Millisecond, ccancel)
			start := time.Now()
			err = c.ReadChannel(cctx, name, domain.ReportChannel, func([]byte) bool { return true })
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled read: err = %v, want context.Canceled (the stream did not open?)", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("cancelled read returned after %s", d)
			}

			settle := func() (int, int, int) {
				time.Sleep(200 * time.Millisecond)
				return runtime.NumGoroutine(), countFDs(t, "self"), countFDs(t, libvirtdPID())
			}
			g0, fd0, lfd0 := settle()
			dials0 := c.Dials()
			for i := 0; i < 50; i++ {
				wctx, wcancel := context.WithTimeout(ctx, 150*time.Millisecond)
				_, err := ready.WaitChannel(wctx, c, name, domain.ReportChannel, "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd")
				wcancel()
				var we *ready.WaitError
				if !errors.As(err, &we) || !we.TimedOut() {
					t.Fatalf("wait %d: err = %v, want a timeout", i, err)
				}
				if we.Last != nil {
					t.Fatalf("wait %d: the stream failed instead of waiting: %v", i, we.Last)
				}
			}
			if n := c.Dials() - dials0; n != 50 {
				t.Errorf("50 waits dialed %d connections, want one each", n)
			}
			var g, fd, lfd int
			for i := 0; i < 25; i++ {
				if g, fd, lfd = settle(); g <= g0+1 && fd <= fd0 && lfd <= lfd0+3 {
					break
				}
			}
			if g > g0+1 {
				t.Errorf("goroutines: %d before 50 waits, %d after", g0, g)
			}
			if fd > fd0 {
				t.Errorf("our file descriptors: %d before 50 waits, %d after", fd0, fd)
			}
			if lfd0 >= 0 && lfd > lfd0+3 {
				t.Errorf("libvirtd's file descriptors: %d before 50 waits, %d after (connections or streams left open)", lfd0, lfd)
			}
			t.Logf("%s: goroutines %d→%d, fds %d→%d, libvirtd fds %d→%d", transport, g0, g, fd0, fd, lfd0, lfd)
		})
	}
}

// countFDs counts a process's open file descriptors (-1 when unknown).
func countFDs(t *testing.T, pid string) int {
	if pid == "" {
		return -1
	}
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// libvirtdPID finds the libvirtd serving the tests ("" when not visible).
func libvirtdPID() string {
	if b, err := os.ReadFile("/run/kohaku-testhost/libvirtd.pid"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}
