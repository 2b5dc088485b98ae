package virt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// MaxChannelLine bounds one line read from a domain channel; a longer line
// is dropped up to its newline.
const MaxChannelLine = 64 << 10

// ErrChannelClosed says the domain's end of the channel went away (the
// domain stopped, or libvirt ended the stream).
var ErrChannelClosed = errors.New("the channel was closed")

// ReadChannel reads lines a guest writes to the named virtio-serial channel
// of a running domain, handing each to line, until line returns true, ctx
// ends, or the stream fails. It holds a connection of its own for the read
// (go-libvirt's stream call blocks until the stream ends and takes no
// context) and ends it in the order libvirtd expects on every transport:
// the stream is aborted by its owner and libvirtd's answer awaited, then the
// connection is closed with CONNECT_CLOSE, then the socket (and, over ssh,
// the SSH channel and client). So an ended read leaves no stream,
// connection, SSH session or goroutine behind.
//
// The channel must be of type unix. The read never takes the channel over
// from another client (no VIR_DOMAIN_CHANNEL_FORCE): libvirt 9.0 aborts the
// other client's stream from the new client's thread, which races with that
// client's own teardown and can crash libvirtd. While another client holds
// the channel the open is retried until ctx ends.
func (c *Client) ReadChannel(ctx context.Context, domain, channel string, line func([]byte) bool) error {
	op := fmt.Sprintf("read channel %s of domain %s", channel, domain)
	td := &trackingDialer{inner: c.dialer.inner}
	defer func() { c.dialer.rpcs.Add(td.rpcs.Load()) }()
	lv := libvirt.NewWithDialer(td)
	c.dials.Add(1)

	// Dial and look the domain up within the usual bounds.
	setup := make(chan error, 1)
	var dom libvirt.Domain
	go func() {
		if err := lv.ConnectToURI(libvirt.ConnectURI(c.ep.Name)); err != nil {
			setup <- &ConnectionError{Endpoint: c.ep, Op: op, Err: err}
			return
		}
		d, err := lv.DomainLookupByName(domain)
		if err != nil {
			setup <- &CallError{Op: op, Err: err}
			return
		}
		dom = d
		setup <- nil
	}()
	bound := time.NewTimer(c.settings.DialTimeout + c.settings.CallTimeout)
	defer bound.Stop()
	select {
	case err := <-setup:
		if err != nil {
			td.shutDown()
			return err
		}
	case <-bound.C:
		td.shutDown()
		return &ConnectionError{Endpoint: c.ep, Op: op, Err: fmt.Errorf("no answer within %s", c.settings.DialTimeout+c.settings.CallTimeout)}
	case <-ctx.Done():
		// No stream is open yet: closing the socket is all libvirtd needs.
		// A dial still under way closes what it makes.
		td.shutDown()
		<-setup //nolint:errcheck // waits for the dial to end; ctx's error is the one returned
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}

	lw := &lineWriter{line: line, found: make(chan struct{})}
	var streamed chan error
	var err error
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		streamed = make(chan error, 1)
		go func() { streamed <- lv.DomainOpenChannel(dom, libvirt.OptString{channel}, lw, 0) }()
		err = c.awaitChannel(ctx, op, lv, lw, streamed)
		if !isChannelBusy(err) {
			break
		}
		// Another client (or one still being torn down) holds the channel.
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%s: %w (another client held the channel: %v)", op, ctx.Err(), err)
		case <-time.After(backoff):
			continue
		}
		break
	}
	c.endChannelConn(lv, td, err)
	select { // the stream call has returned once its connection is closed
	case <-streamed: //nolint:errcheck // waits for the call to end; awaitChannel has its outcome
	case <-time.After(channelEndTimeout):
	}
	return err
}

// awaitChannel waits for the open stream to deliver the wanted line, for
// ctx to end or for the stream call to return, and classifies the end.
func (c *Client) awaitChannel(ctx context.Context, op string, lv *libvirt.Libvirt, lw *lineWriter, streamed chan error) error {
	select {
	case <-lw.found:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	case serr := <-streamed:
		streamed <- serr
		switch {
		case serr == nil:
			return &CallError{Op: op, Err: ErrChannelClosed}
		case errors.Is(serr, errFound):
			return nil // the line callback said done as the stream call returned
		case !lv.IsConnected() || errors.Is(serr, libvirt.ErrInterrupted):
			return &ConnectionError{Endpoint: c.ep, Op: op, Err: fmt.Errorf("the connection was lost (%w)", serr)}
		default:
			return &CallError{Op: op, Err: serr}
		}
	}
}

// isChannelBusy says libvirt refused the open because another stream holds
// the channel ("Active channel stream exists for this domain").
func isChannelBusy(err error) bool {
	var ce *CallError
	return errors.As(err, &ce) && strings.Contains(ce.Err.Error(), "Active channel stream exists")
}

// endChannelConn ends a channel read's own connection in order: abort the
// stream if it is still open and wait for libvirtd's answer, close the
// libvirt connection (CONNECT_CLOSE), close the socket and, over ssh, the
// SSH client, and wait for go-libvirt's reader to stop. Each step is
// bounded; a step that gets no answer falls through to closing the socket.
func (c *Client) endChannelConn(lv *libvirt.Libvirt, td *trackingDialer, readErr error) {
	bound := min(c.settings.CallTimeout, channelEndTimeout)
	lost := !lv.IsConnected()
	var ce *ConnectionError
	if errors.As(readErr, &ce) {
		lost = true
	}
	if w := td.lastWire(); w != nil && !lost {
		for _, done := range w.abortStreams() {
			select {
			case <-done:
			case <-time.After(bound):
			}
		}
		closed := make(chan struct{})
		go func() { _ = lv.Disconnect(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(bound):
		}
	}
	td.shutDown()
	select {
	case <-lv.Disconnected():
	case <-time.After(bound):
	}
}

// channelEndTimeout bounds each step of ending a channel read's connection.
const channelEndTimeout = 10 * time.Second

// errFound stops the stream once the caller has its line.
var errFound = errors.New("line found")

// lineWriter splits a channel's bytes into lines. Lines longer than
// MaxChannelLine are dropped.
type lineWriter struct {
	line     func([]byte) bool
	buf      []byte
	skipping bool
	found    chan struct{}
	done     bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errFound
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !w.skipping {
				w.buf = append(w.buf, p...)
				if len(w.buf) > MaxChannelLine {
					w.buf, w.skipping = w.buf[:0], true
				}
			}
			return n, nil
		}
		if !w.skipping {
			w.buf = append(w.buf, p[:i]...)
			if len(w.buf) <= MaxChannelLine && len(bytes.TrimSpace(w.buf)) > 0 && w.line(w.buf) {
				w.done = true
				close(w.found)
				return n, errFound
			}
		}
		w.buf, w.skipping = w.buf[:0], false
		p = p[i+1:]
	}
	return n, nil
}
