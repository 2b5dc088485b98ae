package virt

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/libvirttest"
)

// mockClient returns a client talking to go-libvirt's in-memory mock daemon.
// The mock answers a fixed set of procedures (AuthList, ConnectOpen,
// ConnectGetLibVersion, ...) and never answers others, which is how a hung
// libvirtd looks from the client side.
func mockClient(t *testing.T, callTimeout time.Duration) (*Client, *mockDaemon) {
	t.Helper()
	ep, err := ParseURI("qemu:///system")
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

func (d *mockDaemon) Dial() (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = libvirttest.New()
	return d.last.Dial()
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
	c, _ := mockClient(t, 300*time.Millisecond)
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
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "did not answer within 300ms") {
		t.Fatalf("hung call error = %v, want a ConnectionError about the deadline", err)
	}
	if !strings.Contains(err.Error(), "read hostname") || !strings.Contains(err.Error(), "qemu:///system") {
		t.Errorf("error does not name the operation and URI: %v", err)
	}
	if elapsed > 2*time.Second {
		t.Errorf("hung call returned after %s, want about 300ms", elapsed)
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
