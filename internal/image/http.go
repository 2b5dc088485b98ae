package image

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxRedirects is how many redirects a GET follows.
const maxRedirects = 10

// DefaultStallTimeout is how long a transfer may deliver no bytes before it
// fails, when Request.StallTimeout is zero.
const DefaultStallTimeout = 60 * time.Second

// DefaultMinRate is the minimum download rate, in bytes per second, over
// each stall window, when Request.MinRate is zero: 16 KiB/s (a 1 GiB image
// in under 18 hours).
const DefaultMinRate = 16 << 10

// userAgent is sent with every request.
const userAgent = "terraform-provider-kohaku (image fetch)"

var (
	defaultClientOnce sync.Once
	defaultClient     *http.Client
)

// DefaultClient returns the client used when Request.Client is nil: proxies
// from the environment, timeouts for connecting, the TLS handshake and the
// response headers, but no overall timeout (a download of several GiB takes
// as long as it takes; stalls are caught by Request.StallTimeout), and no
// transparent decompression (the digest covers the bytes as served).
func DefaultClient() *http.Client {
	defaultClientOnce.Do(func() {
		t := http.DefaultTransport.(*http.Transport).Clone() //nolint:forcetypeassert // net/http declares DefaultTransport as an *http.Transport and nothing here replaces it
		t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		t.TLSHandshakeTimeout = 30 * time.Second
		t.ResponseHeaderTimeout = 60 * time.Second
		t.ExpectContinueTimeout = time.Second
		t.IdleConnTimeout = 90 * time.Second
		t.DisableCompression = true
		defaultClient = &http.Client{Transport: t, CheckRedirect: checkRedirect}
	})
	return defaultClient
}

// redirectError is returned by checkRedirect.
type redirectError struct {
	loop bool
	url  string
	via  []string
}

func (e *redirectError) Error() string {
	chain := strings.Join(append(append([]string(nil), e.via...), e.url), " -> ")
	if e.loop {
		return fmt.Sprintf("redirect loop: %s redirects back to %s (%s)", e.via[len(e.via)-1], e.url, chain)
	}
	return fmt.Sprintf("too many redirects (more than %d), last to %s", maxRedirects, e.url)
}

// ErrDowngrade is wrapped by the error of a request that an https URL
// redirected to plain http.
var ErrDowngrade = errors.New("redirect from https to http refused")

// downgrade returns an error wrapping ErrDowngrade when a redirect leads
// from https to http: someone on the path could then replace what is
// served.
func downgrade(req *http.Request, via []*http.Request) error {
	if strings.EqualFold(req.URL.Scheme, "http") {
		for _, v := range via {
			if strings.EqualFold(v.URL.Scheme, "https") {
				return fmt.Errorf("%w: %s redirects to %s; ask the server's owner for an https location, "+
					"or give that location yourself if you accept plain http", ErrDowngrade, redactURL(v.URL), redactURL(req.URL))
			}
		}
	}
	return nil
}

// checkRedirect follows up to maxRedirects redirects, refuses loops and
// refuses a downgrade from https to http.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if err := downgrade(req, via); err != nil {
		return err
	}
	next := req.URL.String()
	var chain []string
	loop := false
	for _, v := range via {
		chain = append(chain, redactURL(v.URL))
		loop = loop || v.URL.String() == next
	}
	if loop {
		return &redirectError{loop: true, url: redactURL(req.URL), via: chain}
	}
	if len(via) > maxRedirects {
		return &redirectError{url: redactURL(req.URL), via: chain}
	}
	return nil
}

// client returns the client for a request: the given one (with redirect
// checking added when it has none, and the downgrade check always) or
// DefaultClient.
func requestClient(c *http.Client) *http.Client {
	if c == nil {
		return DefaultClient()
	}
	cc := *c
	if c.CheckRedirect == nil {
		cc.CheckRedirect = checkRedirect
	} else {
		own := c.CheckRedirect
		cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			if err := downgrade(req, via); err != nil {
				return err
			}
			return own(req, via)
		}
	}
	return &cc
}

// stallError is the cause of a transfer cancelled for delivering no bytes.
type stallError struct{ d time.Duration }

func (e *stallError) Error() string { return fmt.Sprintf("stalled: no data for %v", e.d) }

// slowError is the cause of a transfer cancelled for delivering less than
// the minimum rate.
type slowError struct {
	got  int64
	d    time.Duration
	rate int64
}

func (e *slowError) Error() string {
	return fmt.Sprintf("too slow: %d bytes in %v, less than the minimum of %d bytes/s", e.got, e.d, e.rate)
}

// transfer is one GET in progress: its response and the watchdog that
// cancels it when it stalls.
type transfer struct {
	url    string // for messages: without a password
	resp   *http.Response
	ctx    context.Context // the request's context
	parent context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	stall  time.Duration
	// minRate is the minimum rate, in bytes per second, over each stall
	// window once the body flows; window counts the bytes of the current
	// window.
	minRate int64
	window  atomic.Int64
	stopped atomic.Bool
}

// startGET sends a GET for u with the extra headers and returns once the
// response headers are in, with a watchdog that cancels the request when no
// bytes arrive for stall (headers included), or when fewer than minRate
// bytes per second arrive over a stall window of the body (minRate <= 0:
// no minimum): a server sending a byte now and then cannot hold a create
// until its own timeout. Non-2xx statuses other than 304
// are errors naming the URL (with any password redacted) and status.
func startGET(ctx context.Context, client *http.Client, u string, hdr http.Header, stall time.Duration, minRate int64) (*transfer, error) {
	tctx, cancel := context.WithCancelCause(ctx)
	t := &transfer{url: redact(u), ctx: tctx, parent: ctx, cancel: cancel, stall: stall, minRate: minRate}
	t.timer = time.AfterFunc(stall, t.check)
	req, err := http.NewRequestWithContext(tctx, http.MethodGet, u, nil)
	if err != nil {
		t.close()
		return nil, fmt.Errorf("GET %s: %w", t.url, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", userAgent)
	// Explicitly asking for identity also stops the transport from
	// transparently gunzipping a response served with Content-Encoding.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := client.Do(req)
	if err != nil {
		err = t.describe(err, 0, -1)
		t.close()
		return nil, err
	}
	t.resp = resp
	t.window.Store(0)
	t.timer.Reset(t.stall) // the body gets a whole window
	if resp.StatusCode == http.StatusNotModified || resp.StatusCode/100 == 2 {
		return t, nil
	}
	where := t.url
	if final := resp.Request.URL; final.String() != u {
		where = fmt.Sprintf("%s (redirected to %s)", t.url, redactURL(final))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // best effort: lets the connection be reused
	t.close()
	return nil, fmt.Errorf("GET %s: %s", where, resp.Status)
}

// redact returns the URL u with any password and the values of its query
// (presigned URLs carry their signature there) replaced by "xxxxx".
func redact(u string) string {
	if p, err := url.Parse(u); err == nil {
		return redactURL(p)
	}
	// A URL that does not parse may still carry a password: one with a
	// '/', '#' or '?' that was not percent-encoded ends the authority
	// early, which is often why it does not parse. Keep the scheme and
	// what follows the last '@', drop what precedes it.
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = "xxxxx@" + rest[i+1:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + "://" + rest
}

// Redact is redact for messages and logs outside this package: a source
// or checksum URL without its password or query values. Anything that is
// not a URL is returned unchanged.
func Redact(s string) string { return redact(s) }

// redactURL is redact of a parsed URL.
func redactURL(p *url.URL) string {
	if p.RawQuery == "" {
		return p.Redacted()
	}
	c := *p
	q := c.Query()
	for k, vs := range q {
		for i := range vs {
			vs[i] = "xxxxx"
		}
		q[k] = vs
	}
	c.RawQuery = q.Encode()
	return c.Redacted()
}

// touch counts n bytes that arrived.
func (t *transfer) touch(n int) { t.window.Add(int64(n)) }

// check runs at the end of each stall window: it cancels a transfer that
// delivered nothing, or less than the minimum rate, and starts the next
// window otherwise.
func (t *transfer) check() {
	if t.stopped.Load() {
		return
	}
	got := t.window.Swap(0)
	switch {
	case got == 0:
		t.cancel(&stallError{t.stall})
	case t.minRate > 0 && float64(got) < float64(t.minRate)*t.stall.Seconds():
		t.cancel(&slowError{got: got, d: t.stall, rate: t.minRate})
	default:
		t.timer.Reset(t.stall)
	}
}

// stopWatchdog stops the stall watchdog once everything was read.
func (t *transfer) stopWatchdog() {
	t.stopped.Store(true)
	t.timer.Stop()
}

// close stops the watchdog and releases the response.
func (t *transfer) close() {
	t.stopped.Store(true)
	t.timer.Stop()
	if t.resp != nil {
		t.resp.Body.Close()
	}
	t.cancel(nil)
}

// describe turns an error of the request or of reading its body, after got
// bytes of total (-1: unknown), into one naming the URL and what happened.
func (t *transfer) describe(err error, got, total int64) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	of := "an unknown number of"
	if total >= 0 {
		of = fmt.Sprint(total)
	}
	var (
		re   *redirectError
		se   *stallError
		slow *slowError
		cve  *tls.CertificateVerificationError
		uae  x509.UnknownAuthorityError
		he   x509.HostnameError
		cie  x509.CertificateInvalidError
		rhe  tls.RecordHeaderError
		alrt tls.AlertError
	)
	switch {
	case t.parent.Err() != nil:
		return fmt.Errorf("GET %s: %w (after %d of %s bytes)", t.url, t.parent.Err(), got, of)
	case errors.As(context.Cause(t.ctx), &se):
		return fmt.Errorf("GET %s: transfer stalled: no data received for %v (after %d of %s bytes)", t.url, se.d, got, of)
	case errors.As(context.Cause(t.ctx), &slow):
		return fmt.Errorf("GET %s: transfer too slow: %d bytes in the last %v, less than the minimum of %d bytes/s "+
			"(after %d of %s bytes)", t.url, slow.got, slow.d, slow.rate, got, of)
	case errors.As(err, &re):
		return fmt.Errorf("GET %s: %w", t.url, re)
	case errors.As(err, &cve), errors.As(err, &uae), errors.As(err, &he), errors.As(err, &cie),
		errors.As(err, &rhe), errors.As(err, &alrt):
		return fmt.Errorf("GET %s: TLS error: %w", t.url, err)
	case errors.Is(err, io.ErrUnexpectedEOF) || total >= 0 && got < total && got > 0:
		return fmt.Errorf("GET %s: connection closed early: received %d of %s bytes: %w", t.url, got, of, err)
	}
	return fmt.Errorf("GET %s: %w", t.url, err)
}

// meter counts the bytes read through it, restarts a stall watchdog on each
// read that delivers, reports progress about once a second, stops reading
// when ctx is done, and remembers the first read error.
type meter struct {
	r        io.Reader
	ctx      context.Context
	total    int64
	n        int64
	onData   func(n int)
	progress func(Progress)

	start, last time.Time
	lastN       int64
	err         error
}

// progressInterval is the minimum time between two Progress reports.
const progressInterval = time.Second

func newMeter(ctx context.Context, r io.Reader, total int64, progress func(Progress), onData func(n int)) *meter {
	now := time.Now()
	return &meter{r: r, ctx: ctx, total: total, progress: progress, onData: onData, start: now, last: now}
}

// Read reads from the underlying reader.
func (m *meter) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	if err := m.ctx.Err(); err != nil {
		m.err = err
		return 0, err
	}
	n, err := m.r.Read(p)
	if n > 0 {
		m.n += int64(n)
		if m.onData != nil {
			m.onData(n)
		}
		if m.progress != nil {
			if now := time.Now(); now.Sub(m.last) >= progressInterval {
				m.report(now, false)
			}
		}
	}
	if err != nil && err != io.EOF {
		m.err = err
	}
	return n, err
}

// report calls the progress callback, with the rate since the last report
// or, for the final one, the average rate.
func (m *meter) report(now time.Time, final bool) {
	from, fromN := m.last, m.lastN
	if final {
		from, fromN = m.start, 0
	}
	rate := 0.0
	if d := now.Sub(from).Seconds(); d > 0 {
		rate = float64(m.n-fromN) / d
	}
	m.progress(Progress{Done: m.n, Total: m.total, Rate: rate, Elapsed: now.Sub(m.start)})
	m.last, m.lastN = now, m.n
}

// finish reports the final count if it was not reported yet.
func (m *meter) finish() {
	if m.progress != nil && m.n != m.lastN {
		m.report(time.Now(), true)
	}
}
