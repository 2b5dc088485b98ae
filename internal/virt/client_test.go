package virt

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/libvirttest"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// mockClient returns a client talking to go-libvirt's in-memory mock daemon.
// The mock answers a fixed set of procedures (AuthList, ConnectOpen,
// ConnectGetLibVersion, ...) and never answers others, which is how a hung
// libvirtd looks from the client side.
func mockClient(t *testing.T, callTimeout time.Duration) (*Client, *mockDaemon) {
	t.Helper()
	ep, err := hostconn.ParseURI("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	mock := &mockDaemon{}
	c := newWithDialer(ep, Settings{DialTimeout: 2 * time.Second, CallTimeout: callTimeout}, mock)
	t.Cleanup(func() { c.Close() })
	return c, mock
}

// mockDaemon starts a fresh mock daemon per dial: the mock numbers its
// replies itself, so one instance cannot serve a second connection.
type mockDaemon struct {
	mu   sync.Mutex
	last *libvirttest.MockLibvirt
}

// Dial puts a relay with a kernel socket pair between the client and the
// mock's net.Pipe, which fixes two ways the mock hangs under concurrent
// calls that a real libvirtd does not (each seen about once in ten runs of
// 40 concurrent calls with go-libvirt alone, no Kohaku code involved):
//   - the pipe has no buffer: a client goroutine blocked writing a call
//     while go-libvirt's reader waits on the same lock to route the mock's
//     blocked reply deadlocks. The socket pair buffers, as libvirtd's does.
//   - the mock numbers its replies from a counter of its own instead of
//     echoing the call's serial; go-libvirt takes serials before it sends,
//     so a reply could carry the serial of a call not yet registered and be
//     dropped. The relay gives each reply the serial of the oldest pending
//     call of the same procedure, as libvirtd would.
//
// Calls reach the mock one packet per write, as the mock reads them.
func (d *mockDaemon) Dial() (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = libvirttest.New()
	pipe, err := d.last.Dial()
	if err != nil {
		return nil, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "mock-libvirt")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	client, relay := conns[0], conns[1]
	type call struct{ prog, proc, serial uint32 }
	var mu sync.Mutex
	var pending []call
	// pump copies packets from src to dst, one write each, letting fix
	// look at (and change) each whole packet first.
	pump := func(src, dst net.Conn, fix func(c call, pkt []byte)) {
		defer src.Close()
		defer dst.Close()
		for {
			pkt, err := ReadPacket(src, nil)
			if err != nil {
				return
			}
			h := ParseHeader(pkt)
			c := call{h.Program, h.Procedure, h.Serial}
			mu.Lock()
			fix(c, pkt)
			mu.Unlock()
			if _, err := dst.Write(pkt); err != nil {
				return
			}
		}
	}
	go pump(relay, pipe, func(c call, _ []byte) { pending = append(pending, c) })
	go pump(pipe, relay, func(r call, pkt []byte) {
		for i, c := range pending {
			if c.prog == r.prog && c.proc == r.proc {
				binary.BigEndian.PutUint32(pkt[20:24], c.serial)
				pending = append(pending[:i], pending[i+1:]...)
				return
			}
		}
	})
	return client, nil
}

// kill closes the daemon's end of the current connection.
func (d *mockDaemon) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last.Test.Close()
}

func libVersion(ctx context.Context, c *Client) (uint64, error) {
	var v uint64
	err := c.Call(ctx, "read version", func(l *libvirt.Libvirt) error {
		var err error
		v, err = l.ConnectGetLibVersion()
		return err
	})
	return v, err
}

func TestCallDialsLazilyOnce(t *testing.T) {
	t.Parallel()
	c, _ := mockClient(t, 5*time.Second)
	if c.Dials() != 0 {
		t.Fatalf("New dialed eagerly: %d dials", c.Dials())
	}
	for i := 0; i < 3; i++ {
		v, err := libVersion(context.Background(), c)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if v == 0 {
			t.Fatalf("call %d: version 0", i)
		}
	}
	if c.Dials() != 1 {
		t.Errorf("dials = %d, want 1 for three calls", c.Dials())
	}
	// AuthList and ConnectOpen at connect, then one RPC per call.
	if got := c.RPCs(); got != 5 {
		t.Errorf("RPCs = %d, want 5 (2 for the handshake + 3 calls)", got)
	}
}

func TestConcurrentCallsShareOneConnection(t *testing.T) {
	t.Parallel()
	c, _ := mockClient(t, 5*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := libVersion(context.Background(), c); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c.Dials() != 1 {
		t.Errorf("dials = %d, want 1", c.Dials())
	}
}

func TestHungCallIsBoundedAndConnectionReplaced(t *testing.T) {
	t.Parallel()
	// The call timeout is what the test proves bounded; it is long enough
	// that the mock's answer to the first call fits it on a loaded machine
	// (300ms did not, while make check compiled and built images beside it).
	c, _ := mockClient(t, 2*time.Second)
	if _, err := libVersion(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The mock never answers ConnectGetHostname: a hung daemon.
	err := c.Call(context.Background(), "read hostname", func(l *libvirt.Libvirt) error {
		_, err := l.ConnectGetHostname()
		return err
	})
	elapsed := time.Since(start)
	var ce *ConnectionError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "did not answer within 2s") {
		t.Fatalf("hung call error = %v, want a ConnectionError about the deadline", err)
	}
	if !strings.Contains(err.Error(), "read hostname") || !strings.Contains(err.Error(), "qemu:///system") {
		t.Errorf("error does not name the operation and URI: %v", err)
	}
	if elapsed < 2*time.Second || elapsed > 15*time.Second {
		t.Errorf("hung call returned after %s, want about 2s", elapsed)
	}
	if _, err := libVersion(context.Background(), c); err != nil {
		t.Fatalf("call after the hang: %v", err)
	}
	if c.Dials() != 2 {
		t.Errorf("dials = %d, want 2 (the hung connection replaced)", c.Dials())
	}
}

func TestLostConnectionIsReestablished(t *testing.T) {
	t.Parallel()
	c, mock := mockClient(t, 5*time.Second)
	if _, err := libVersion(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	mock.kill() // the daemon goes away
	deadline := time.Now().Add(2 * time.Second)
	for c.lv.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := libVersion(context.Background(), c); err != nil {
		t.Fatalf("call after the loss: %v", err)
	}
	if c.Dials() != 2 {
		t.Errorf("dials = %d, want 2", c.Dials())
	}
}

func TestCancelledContextLeavesConnectionAlone(t *testing.T) {
	t.Parallel()
	c, _ := mockClient(t, 5*time.Second)
	if _, err := libVersion(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := c.Call(ctx, "read hostname", func(l *libvirt.Libvirt) error {
		_, err := l.ConnectGetHostname()
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want context deadline", err)
	}
	// (The mock cannot answer later calls once it skipped one, so look at
	// the connection itself rather than making another call.)
	c.mu.Lock()
	lv := c.lv
	c.mu.Unlock()
	if lv == nil || !lv.IsConnected() {
		t.Errorf("a cancelled operation dropped the shared connection")
	}
}

func TestSilentServerFailsHandshakeInTime(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "silent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // accept, never answer
		}
	}()
	c, err := New(Settings{URI: "qemu:///system?socket=" + sock, DialTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = libVersion(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "no answer within 300ms") || !strings.Contains(err.Error(), sock) {
		t.Fatalf("error = %v, want a handshake deadline naming the socket", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
}

func TestUnreachableHostsSayWhatToCheck(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: bind, note the port, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cases := map[string][]string{
		"qemu+tcp://127.0.0.1:" + strconv.Itoa(port) + "/system":                                {"transport tcp", "listen_tcp", "connection refused"},
		"qemu:///system?socket=" + filepath.Join(t.TempDir(), "none.sock"):                      {"transport unix", "Is libvirtd running"},
		"qemu+ssh://root@127.0.0.1:" + strconv.Itoa(port) + "/system?known_hosts_verify=ignore": {"transport ssh", "Is sshd running"},
	}
	for uri, wants := range cases {
		c, err := New(Settings{URI: uri, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, err = libVersion(context.Background(), c)
		if err == nil {
			t.Fatalf("%s: no error", uri)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", uri, err, w)
			}
		}
	}
}

func TestWhileUnreachable(t *testing.T) {
	t.Parallel()
	lost := &ConnectionError{Op: "undefine domain x", Err: errors.New("connection refused")}
	own := errors.New("libvirt: domain is locked")

	// Unreachable twice, then answered: fn runs three times, nil comes back.
	n := 0
	start := time.Now()
	err := hostconn.WhileUnreachable(context.Background(), 10*time.Second, func() error {
		if n++; n < 3 {
			return lost
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("err = %v after %d runs, want nil after 3", err, n)
	}
	if d := time.Since(start); d < 600*time.Millisecond || d > 8*time.Second {
		t.Errorf("two retries took %s, want the 200 ms + 400 ms backoff", d)
	}

	// libvirt's own error is not retried.
	n = 0
	if err := hostconn.WhileUnreachable(context.Background(), 10*time.Second, func() error { n++; return own }); !errors.Is(err, own) || n != 1 {
		t.Errorf("own error: err = %v after %d runs, want it at once", err, n)
	}

	// A host that stays away: the last connection error once the window ends.
	n = 0
	start = time.Now()
	err = hostconn.WhileUnreachable(context.Background(), time.Second, func() error { n++; return lost })
	if !errors.Is(err, lost) || time.Since(start) > 8*time.Second || n < 3 {
		t.Errorf("window: err = %v after %d runs in %s", err, n, time.Since(start))
	}

	// A cancelled context ends the wait at once.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	if err := hostconn.WhileUnreachable(ctx, time.Minute, func() error { return lost }); !errors.Is(err, lost) || time.Since(start) > 8*time.Second {
		t.Errorf("cancel: err = %v after %s", err, time.Since(start))
	}
}

// hint is what a ConnectionError adds after its cause: the advice for
// err's kind of failure on ep's transport.
func hint(ep Endpoint, err error) string {
	full := (&ConnectionError{Endpoint: ep, Op: "op", Err: err}).Error()
	plain := (&ConnectionError{Endpoint: ep, Op: "op", Err: errors.New(err.Error())}).Error()
	return strings.TrimPrefix(full, plain)
}
