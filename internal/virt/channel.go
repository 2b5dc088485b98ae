package virt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
// ends, or the stream fails. It holds a connection of its own for the
// read (go-libvirt's stream call blocks until the stream ends and takes no
// context; closing the connection is what ends it), and closes it on
// return, so an ended read leaves no stream, connection or goroutine
// behind. The channel must be of type unix; the read takes it over from any
// earlier reader (VIR_DOMAIN_CHANNEL_FORCE).
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
			td.closeLast()
			return err
		}
	case <-bound.C:
		td.closeLast()
		return &ConnectionError{Endpoint: c.ep, Op: op, Err: fmt.Errorf("no answer within %s", c.settings.DialTimeout+c.settings.CallTimeout)}
	case <-ctx.Done():
		td.closeLast()
		<-setup
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}

	lw := &lineWriter{line: line, found: make(chan struct{})}
	streamed := make(chan error, 1)
	go func() {
		streamed <- lv.DomainOpenChannel(dom, libvirt.OptString{channel}, lw, libvirt.DomainChannelForce)
	}()
	var err error
	select {
	case <-lw.found:
	case <-ctx.Done():
		err = fmt.Errorf("%s: %w", op, ctx.Err())
	case serr := <-streamed:
		streamed <- serr
		switch {
		case serr == nil:
			err = &CallError{Op: op, Err: ErrChannelClosed}
		case errors.Is(serr, errFound):
			// The line callback said done as the stream call returned.
		case !lv.IsConnected() || errors.Is(serr, libvirt.ErrInterrupted):
			err = &ConnectionError{Endpoint: c.ep, Op: op, Err: fmt.Errorf("the connection was lost (%w)", serr)}
		default:
			err = &CallError{Op: op, Err: serr}
		}
	}
	// Closing the socket ends the stream on both sides; libvirtd drops the
	// stream with the client. Then wait for the stream call to return so
	// no goroutine outlives the read.
	td.closeLast()
	select {
	case <-streamed:
	case <-time.After(c.settings.CallTimeout):
	}
	select {
	case <-lv.Disconnected():
	case <-time.After(c.settings.CallTimeout):
	}
	return err
}

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
