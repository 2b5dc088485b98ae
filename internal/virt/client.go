package virt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Defaults for Settings fields left zero.
const (
	DefaultDialTimeout = 15 * time.Second
	DefaultCallTimeout = 2 * time.Minute
)

// TLSSettings are the options of the tls transport; they win over the URI's
// pkipath and no_verify parameters.
type TLSSettings struct {
	// PKIPath is a directory holding cacert.pem, clientcert.pem and clientkey.pem.
	PKIPath string
	// NoVerify skips verification of the server certificate (insecure).
	NoVerify bool
	// NoVerifySet says NoVerify was given explicitly: then it wins over
	// the URI's no_verify, false included.
	NoVerifySet bool
	// CACert, ClientCert and ClientKey are PEM text; each set one is used
	// instead of its file (tls.go). ClientKey is never logged.
	CACert, ClientCert, ClientKey string
}

// Settings describe one libvirt host connection.
type Settings struct {
	URI string
	// DialTimeout bounds dialing and the libvirt handshake.
	DialTimeout time.Duration
	// CallTimeout bounds each libvirt call. A call that exceeds it means the
	// daemon is hung: the connection is dropped and the next call redials.
	CallTimeout time.Duration
	SSH         SSHSettings
	TLS         TLSSettings
}

// Client is one connection to one libvirt host, shared by every resource placed
// on that host. It dials lazily, bounds every call with a deadline (go-libvirt
// has none), and redials when the connection was lost.
type Client struct {
	ep       Endpoint
	settings Settings
	dialer   *trackingDialer

	mu sync.Mutex
	lv *libvirt.Libvirt

	dials atomic.Int64
}

// New validates the settings and returns a client that connects on first use.
func New(s Settings) (*Client, error) {
	ep, err := ParseURI(s.URI)
	if err != nil {
		return nil, err
	}
	if s.DialTimeout <= 0 {
		s.DialTimeout = DefaultDialTimeout
	}
	if s.CallTimeout <= 0 {
		s.CallTimeout = DefaultCallTimeout
	}
	inner, err := dialerFor(ep, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ep.Redacted(), err)
	}
	return newWithDialer(ep, s, inner), nil
}

func newWithDialer(ep Endpoint, s Settings, inner socket.Dialer) *Client {
	return &Client{ep: ep, settings: s, dialer: &trackingDialer{inner: inner}}
}

func dialerFor(ep Endpoint, s Settings) (socket.Dialer, error) {
	switch ep.Transport {
	case TransportUnix:
		return dialers.NewLocal(dialers.WithSocket(ep.Socket), dialers.WithLocalTimeout(s.DialTimeout)), nil
	case TransportTCP:
		return dialers.NewRemote(ep.Host, dialers.UsePort(ep.Port), dialers.WithRemoteTimeout(s.DialTimeout)), nil
	case TransportTLS:
		return newTLSDialer(ep, s), nil
	case TransportSSH:
		return newSSHDialer(ep, s.SSH, s.DialTimeout)
	}
	return nil, fmt.Errorf("unsupported transport %q", ep.Transport)
}

// Endpoint returns the parsed URI of this client.
func (c *Client) Endpoint() Endpoint { return c.ep }

// Dials reports how many times this client has dialed (1 unless it reconnected).
func (c *Client) Dials() int64 { return c.dials.Load() }

// RPCs reports how many libvirt remote procedure calls this client has sent.
func (c *Client) RPCs() int64 { return c.dialer.rpcs.Load() }

// Call runs fn with a live connection, dialing or redialing first when needed.
// The call is bounded by the context and by the client's CallTimeout; op names
// the operation in errors ("define domain web-1").
//
// When the call times out the connection is presumed hung: it is closed, which
// also unblocks fn, and the next Call redials. When the context ends first
// (Terraform cancelled the operation), Call returns at once and leaves the
// shared connection alone.
func (c *Client) Call(ctx context.Context, op string, fn func(*libvirt.Libvirt) error) error {
	lv, err := c.connect(ctx)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn(lv) }()
	timer := time.NewTimer(c.settings.CallTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		if !lv.IsConnected() {
			c.forget(lv)
			return &ConnectionError{Endpoint: c.ep, Op: op, Err: fmt.Errorf("the connection was lost during the call (%w); it is re-established on the next call", err)}
		}
		return &CallError{Op: op, Err: err}
	case <-timer.C:
		c.abandon(lv)
		return &ConnectionError{Endpoint: c.ep, Op: op, Err: fmt.Errorf("libvirt did not answer within %s; the connection was closed and will be re-established on the next call", c.settings.CallTimeout)}
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
}

// connect returns the live connection, dialing when there is none.
func (c *Client) connect(ctx context.Context) (*libvirt.Libvirt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lv != nil && c.lv.IsConnected() {
		return c.lv, nil
	}
	c.lv = nil
	lv := libvirt.NewWithDialer(c.dialer)
	c.dials.Add(1)
	done := make(chan error, 1)
	go func() { done <- lv.ConnectToURI(libvirt.ConnectURI(c.ep.Name)) }()
	timer := time.NewTimer(c.settings.DialTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return nil, &ConnectionError{Endpoint: c.ep, Op: "connect", Err: err}
		}
	case <-timer.C:
		c.dialer.closeLast()
		return nil, &ConnectionError{Endpoint: c.ep, Op: "connect", Err: fmt.Errorf("no answer within %s", c.settings.DialTimeout)}
	case <-ctx.Done():
		c.dialer.closeLast()
		return nil, &ConnectionError{Endpoint: c.ep, Op: "connect", Err: ctx.Err()}
	}
	c.lv = lv
	return lv, nil
}

// forget drops a connection that libvirt already closed.
func (c *Client) forget(lv *libvirt.Libvirt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lv == lv {
		c.lv = nil
	}
}

// abandon closes a connection that stopped answering. Closing the socket
// makes go-libvirt fail every call still waiting on it.
func (c *Client) abandon(lv *libvirt.Libvirt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lv == lv {
		c.lv = nil
		c.dialer.closeLast()
	}
}

// Close ends the connection, if any.
func (c *Client) Close() error {
	c.mu.Lock()
	lv := c.lv
	c.lv = nil
	c.mu.Unlock()
	if lv == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- lv.Disconnect() }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Second):
		c.dialer.closeLast()
		return errors.New("libvirt did not acknowledge the close; the socket was closed")
	}
}

// Unreachable bounds how long an undo waits for a host that cannot be
// reached (WhileUnreachable): long enough for a restarting libvirtd.
const Unreachable = 30 * time.Second

// WhileUnreachable runs fn again as long as it fails because the host
// cannot be reached (a *ConnectionError: refused, lost or hung), backing
// off from 200 ms to 2 s, for up to window or until ctx ends. Undo steps
// after a failed create use it: a libvirtd restarted mid-apply is back in a
// few seconds, and an undo that waits for it leaves the host as it was
// instead of an object whose fate nobody knows. fn's own errors are
// returned at once.
func WhileUnreachable(ctx context.Context, window time.Duration, fn func() error) error {
	deadline := time.Now().Add(window)
	wait := 200 * time.Millisecond
	for {
		err := fn()
		var ce *ConnectionError
		if err == nil || !errors.As(err, &ce) || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// ConnectionError says the host could not be reached, refused us, or stopped
// answering. It names the URI and the transport so a user knows which host.
type ConnectionError struct {
	Endpoint Endpoint
	Op       string
	Err      error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("%s: libvirt host %s (transport %s, %s): %v%s",
		e.Op, e.Endpoint.Redacted(), e.Endpoint.Transport, e.Endpoint.Address(), e.Err, hint(e.Endpoint, e.Err))
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// CallError is an error libvirt itself returned for an operation.
type CallError struct {
	Op  string
	Err error
}

func (e *CallError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// hint adds what to check for the common ways a connection fails.
func hint(ep Endpoint, err error) string {
	var opErr *net.OpError
	var unknown *UnknownHostKeyError
	var mismatch *HostKeyMismatchError
	var auth *AuthError
	var tlsErr *TLSError
	switch {
	case errors.As(err, &unknown), errors.As(err, &mismatch), errors.As(err, &auth), errors.As(err, &tlsErr):
		return "" // these errors already say what to do
	case errors.As(err, &opErr):
		switch ep.Transport {
		case TransportUnix:
			return fmt.Sprintf(". Is libvirtd running on this machine, and may this user open %s? (For another machine use qemu+ssh://user@host/system.)", ep.Socket)
		case TransportTCP:
			return fmt.Sprintf(". Is libvirtd on %s listening for TCP (listen_tcp = 1 in libvirtd.conf and "+
				"libvirtd started with --listen, or the libvirtd-tcp socket enabled), and is port %s open?", ep.Host, ep.Port)
		case TransportTLS:
			return fmt.Sprintf(". Is libvirtd on %s listening for TLS on port %s, and are the client certificates in place?", ep.Host, ep.Port)
		case TransportSSH:
			return fmt.Sprintf(". Is sshd running on %s port %s and reachable from here?", ep.Host, ep.Port)
		}
	}
	return ""
}

// trackingDialer remembers the last connection it made so a hung one can be
// closed from outside go-libvirt, and counts the RPCs sent over it.
type trackingDialer struct {
	inner socket.Dialer
	mu    sync.Mutex
	last  net.Conn
	shut  bool
	rpcs  atomic.Int64
}

func (t *trackingDialer) Dial() (net.Conn, error) {
	conn, err := t.inner.Dial()
	if err != nil {
		return nil, err
	}
	counted := newWireConn(conn, &t.rpcs)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shut {
		// Shut while this dial was under way (a slow SSH handshake): nobody
		// will close what it made, so close it now.
		counted.Close()
		return nil, net.ErrClosed
	}
	t.last = counted
	return counted, nil
}

// shutDown closes the last connection and makes every later dial fail, so
// a dial still under way when its caller gave up leaves nothing open.
func (t *trackingDialer) shutDown() {
	t.mu.Lock()
	t.shut = true
	t.mu.Unlock()
	t.closeLast()
}

// lastWire is the last connection made, if it is still open.
func (t *trackingDialer) lastWire() *wireConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, _ := t.last.(*wireConn)
	return w
}

func (t *trackingDialer) closeLast() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last != nil {
		t.last.Close()
		t.last = nil
	}
}
