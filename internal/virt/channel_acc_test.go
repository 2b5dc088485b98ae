package virt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
)

// acceptance: reading the report channel of a running domain whose guest
// never writes, through the unix socket, qemu+tcp, qemu+tls (the test
// host's throwaway PKI) and qemu+ssh (an sshd of the test's own on
// loopback, libvirt's socket reached over SSH). Each read
// holds a stream on a connection of its own; fifty waits that end at their
// deadline leave no goroutine, file descriptor, libvirtd client or sshd
// session behind, a cancelled wait returns at once, a second reader waits
// for the first instead of taking the channel over, and libvirtd keeps
// running (same PID, answering) throughout. Over ssh it guards against a
// wait that ends by closing the socket while the stream is open, with the
// next read taking the channel over (VIR_DOMAIN_CHANNEL_FORCE) while
// libvirtd is still tearing the previous client down: that leaks sessions
// and crashes libvirtd 9.0.
func TestAccReadChannelReleasesEverything(t *testing.T) {
	uris := map[string]string{"unix": acctest.URI(t), "tcp": acctest.Env(t, "KOHAKU_TEST_TCP_URI")}
	uris["tls"] = acctest.Env(t, "KOHAKU_TEST_TLS_URI") + "?pkipath=" + url.QueryEscape(acctest.Env(t, "KOHAKU_TEST_TLS_PKI"))
	sshd := acctest.StartSSHD(t)
	uris["ssh"] = fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system?keyfile=%s&known_hosts=%s",
		sshd.Port, url.QueryEscape(sshd.ClientKey), url.QueryEscape(sshd.WriteKnownHosts(t)))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admin, err := New(Settings{URI: uris["unix"]})
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the domain's own cleanup, which uses it.
	t.Cleanup(func() { admin.Close() })
	name := startSilentDomain(ctx, t, admin)
	daemon := libvirtdPID()
	if daemon == "" {
		t.Fatal("cannot find the test host's libvirtd PID (/run/kohaku-testhost/libvirtd.pid)")
	}
	// alive fails the test when libvirtd crashed, was restarted or stopped
	// answering.
	alive := func(t *testing.T, when string) {
		t.Helper()
		if pid := libvirtdPID(); pid != daemon {
			t.Fatalf("%s: libvirtd's PID changed from %s to %q: the daemon crashed or restarted", when, daemon, pid)
		}
		if _, err := os.Stat("/proc/" + daemon); err != nil {
			t.Fatalf("%s: libvirtd (PID %s) is gone: %v", when, daemon, err)
		}
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		defer acancel()
		if _, err := admin.DomainState(actx, name); err != nil {
			t.Fatalf("%s: libvirtd does not answer: %v", when, err)
		}
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
			defer alive(t, "after the waits")

			// A second reader waits for the first instead of taking the
			// channel over; the first read is not disturbed.
			first := make(chan error, 1)
			fctx, fcancel := context.WithTimeout(ctx, 6*time.Second)
			defer fcancel()
			go func() {
				first <- c.ReadChannel(fctx, name, phonehome.ReportChannel, func([]byte) bool { return true })
			}()
			time.Sleep(time.Second)
			// Long enough for a dial and an open on a loaded machine.
			sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
			err = c.ReadChannel(sctx, name, phonehome.ReportChannel, func([]byte) bool { return true })
			scancel()
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "another client held the channel") {
				t.Errorf("second reader: err = %v, want a deadline while another client held the channel", err)
			}
			if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("first reader: err = %v, want its own deadline (was its stream taken over?)", err)
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
			err = c.ReadChannel(cctx, name, phonehome.ReportChannel, func([]byte) bool { return true })
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled read: err = %v, want context.Canceled (the stream did not open?)", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("cancelled read returned after %s", d)
			}

			sessions := func() int {
				if transport != "ssh" {
					return 0
				}
				return sshd.Sessions(t)
			}
			settle := func() (int, int, int) {
				time.Sleep(200 * time.Millisecond)
				return runtime.NumGoroutine(), countFDs("self"), countFDs(libvirtdPID())
			}
			g0, fd0, lfd0 := settle()
			cl0, all0 := libvirtdClients(t, sshd.PID)
			ss0 := sessions()
			dials0 := c.Dials()
			for i := 0; i < 50; i++ {
				wctx, wcancel := context.WithTimeout(ctx, 150*time.Millisecond)
				_, err := ready.WaitChannel(wctx, c, name, "", phonehome.ReportChannel, "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd")
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
			var g, fd, lfd, cl, all, ss int
			for i := 0; i < 25; i++ {
				g, fd, lfd = settle()
				cl, all = libvirtdClients(t, sshd.PID)
				ss = sessions()
				if g <= g0+1 && fd <= fd0 && lfd <= lfd0+3 && cl <= cl0 && ss <= ss0 {
					break
				}
			}
			if cl > cl0 {
				t.Errorf("libvirtd's clients of this test (virt-admin): %d before 50 waits, %d after", cl0, cl)
			}
			if ss > ss0 {
				t.Errorf("sshd sessions: %d before 50 waits, %d after", ss0, ss)
			}
			if g > g0+1 {
				t.Errorf("goroutines: %d before 50 waits, %d after", g0, g)
			}
			if fd > fd0 {
				t.Errorf("our file descriptors: %d before 50 waits, %d after", fd0, fd)
			}
			// libvirtd's descriptors are the daemon's, not this test's: they
			// are compared only when no other program used the daemon
			// meanwhile (as under make testacc).
			others := all0-cl0 != 0 || all-cl != 0
			if others {
				t.Logf("libvirtd's file descriptors not compared: other programs' clients were connected (%d before, %d after)", all0-cl0, all-cl)
			}
			if lfd0 >= 0 && lfd > lfd0+3 && !others {
				t.Errorf("libvirtd's file descriptors: %d before 50 waits, %d after (connections or streams left open)", lfd0, lfd)
			}
			t.Logf("%s: goroutines %d→%d, fds %d→%d, libvirtd fds %d→%d, libvirtd clients %d→%d, sshd sessions %d→%d",
				transport, g0, g, fd0, fd, lfd0, lfd, cl0, cl, ss0, ss)
		})
	}
}

// startSilentDomain starts a domain whose guest never writes to its report
// channel (no disk: the kernel boots, finds no root and waits) and removes
// it when the test ends.
func startSilentDomain(ctx context.Context, t *testing.T, admin *Client) string {
	t.Helper()
	kernel := acctest.Env(t, "KOHAKU_TEST_KERNEL")
	initrd := acctest.Env(t, "KOHAKU_TEST_INITRD")
	b := make([]byte, 3)
	rand.Read(b)
	name := "kohaku-acc-chan-" + hex.EncodeToString(b)
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
		_, _ = admin.StopDomain(ctx, ref, 0) // fails when it is not running: fine
		if err := admin.UndefineDomain(ctx, ref); err != nil {
			t.Logf("cleanup: %v", err)
		}
		os.Remove("/var/log/libvirt/qemu/" + name + ".log")
	})
	if err := admin.StartDomain(ctx, ref); err != nil {
		t.Fatal(err)
	}
	return name
}

// countFDs counts a process's open file descriptors (-1 when unknown).
func countFDs(pid string) int {
	if pid == "" {
		return -1
	}
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// libvirtdClients counts the clients libvirtd serves now that belong to
// this test: unix clients that are this process or a session of the test's
// sshd (sshdPID, 0 for none), and tcp/tls clients whose address is one of
// this process's sockets. It asks libvirtd's admin interface (virt-admin,
// from libvirt-clients, which the test host installs); other programs'
// clients of the same daemon are not counted.
func libvirtdClients(t *testing.T, sshdPID int) (ours, all int) {
	t.Helper()
	admin := func(args ...string) string {
		out, err := exec.Command("virt-admin", append([]string{"-c", "libvirtd:///system"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("virt-admin %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ports := ownTCPPorts()
	n := 0
	for _, l := range strings.Split(admin("srv-clients-list", "libvirtd"), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] == "Id" || strings.HasPrefix(f[0], "---") {
			continue
		}
		all++
		out, err := exec.Command("virt-admin", "-c", "libvirtd:///system", "client-info", "libvirtd", f[0]).CombinedOutput()
		if err != nil {
			continue // the client went away since the list was made
		}
		info := map[string]string{}
		for _, kv := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(kv, ":"); ok {
				info[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		switch {
		case info["unix_process_id"] != "":
			pid := info["unix_process_id"]
			if pid == strconv.Itoa(os.Getpid()) || (sshdPID > 0 && parentPID(pid) == strconv.Itoa(sshdPID)) {
				n++
			}
		case info["sock_addr"] != "":
			addr := info["sock_addr"]
			if ports[addr[strings.LastIndexAny(addr, ":;")+1:]] {
				n++
			}
		}
	}
	return n, all
}

// ownTCPPorts lists the local ports of this process's TCP sockets.
func ownTCPPorts() map[string]bool {
	inodes := map[string]bool{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	ports := map[string]bool{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) < 10 || !inodes[fs[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[strconv.FormatUint(p, 10)] = true
			}
		}
	}
	return ports
}

// parentPID reads a process's parent ("" when it is gone).
func parentPID(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	st := string(b)
	f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// libvirtdPID finds the libvirtd serving the tests ("" when not visible).
func libvirtdPID() string {
	if b, err := os.ReadFile("/run/kohaku-testhost/libvirtd.pid"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}
