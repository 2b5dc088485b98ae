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

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// Defaults for Settings fields left zero.
const (
	DefaultDialTimeout = 15 * time.Second
	DefaultCallTimeout = 2 * time.Minute
)

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
	ep, err := hostconn.ParseURI(s.URI)
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

// CallError is an error libvirt itself returned for an operation.
type CallError struct {
	Op  string
	Err error
}

func (e *CallError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// Is makes a call that libvirt refused as not supported by the host's
// driver match hostapi.ErrUnsupported, which the lifecycle packages test
// for without knowing libvirt's error codes.
func (e *CallError) Is(target error) bool {
	return target == hostapi.ErrUnsupported && Unsupported(e.Err)
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
