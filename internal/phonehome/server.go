package phonehome

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PathPrefix is the endpoint's path; a guest posts to PathPrefix + token.
const PathPrefix = "/v1/phone-home/"

// Defaults for Config.
const (
	DefaultListenAddr        = "127.0.0.1:0"
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultIdleTimeout       = 5 * time.Second
	// DefaultMaxConns bounds the connections served at once; more wait,
	// unread, until one ends (each ends within the read timeouts).
	DefaultMaxConns = 64
	maxHeaderBytes  = 8 << 10
)

var (
	// ErrServerClosed is returned once the Server has been closed.
	ErrServerClosed = errors.New("phonehome: server closed")
	// ErrWaiterClosed is returned by Wait after the waiter was closed.
	ErrWaiterClosed = errors.New("phonehome: waiter closed")
	// ErrInvalidToken means a token does not have the shape NewToken gives.
	ErrInvalidToken = errors.New("phonehome: invalid token")
	// ErrTokenInUse means a waiter for the token is already registered.
	ErrTokenInUse = errors.New("phonehome: token already registered")
	// ErrUnknownToken means no waiter is registered for the token.
	ErrUnknownToken = errors.New("phonehome: unknown token")
)

// Config configures a Server. The zero value listens on 127.0.0.1 on a free
// port with the default timeouts and does not log.
type Config struct {
	// ListenAddr is the TCP address to listen on ("127.0.0.1:0",
	// "0.0.0.0:8787"). Empty means DefaultListenAddr.
	ListenAddr string
	// BaseURL is how guests reach the listener, without the path
	// ("http://10.0.2.2:8787" under QEMU user-mode networking). Empty means
	// "http://" + Addr(), which only works when the guest can reach that
	// address and the listener is not on an unspecified address.
	BaseURL string
	// Logf, when set, receives one line per event. Tokens, URL paths and
	// bodies are never passed to it; tokens appear as TokenID.
	Logf func(format string, args ...any)
	// Timeouts for slow clients; zero means the Default* value.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MaxConns bounds the connections served at once; zero means
	// DefaultMaxConns.
	MaxConns int
}

// Server is the phone-home listener of one provider process. It starts on
// the first Register (or Start) and serves until Close.
type Server struct {
	cfg Config

	mu        sync.Mutex
	state     serverState
	ln        net.Listener
	srv       *http.Server
	serveDone chan struct{}
	closed    chan struct{}
	waiters   map[[sha256.Size]byte]*entry
	// boots are the boots (domain UUID/boot ID) whose report was taken:
	// each is taken once.
	boots map[string]struct{}
}

type serverState int

const (
	stateIdle serverState = iota
	stateRunning
	stateClosed
)

// NewServer returns a Server that has not started listening yet.
func NewServer(cfg Config) *Server {
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = DefaultListenAddr
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	return &Server{
		cfg:     cfg,
		closed:  make(chan struct{}),
		waiters: map[[sha256.Size]byte]*entry{},
	}
}

// Start starts listening if the server is not already. A failed Start may be
// retried; Start after Close returns ErrServerClosed.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateRunning:
		return nil
	case stateClosed:
		return ErrServerClosed
	}
	ln, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("phonehome: listening on %s: %w; another process holds the port, possibly another "+
				"user's, which would receive the guests' reports: free it or choose another listen_address", s.cfg.ListenAddr, err)
		}
		return fmt.Errorf("phonehome: listening on %s: %w", s.cfg.ListenAddr, err)
	}
	ln = newLimitListener(ln, s.cfg.MaxConns)
	srv := &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// net/http's own messages (accept errors, panics) carry no request
		// path or body; route them to Logf or drop them.
		ErrorLog: log.New(logWriter{s}, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	s.ln, s.srv, s.serveDone, s.state = ln, srv, done, stateRunning
	s.logf("listening on %s", ln.Addr())
	return nil
}

// Addr is the bound "host:port", or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// BaseURL starts the server if needed and returns the URL guests use, without
// the path: Config.BaseURL, or "http://" + Addr() when that is reachable.
func (s *Server) BaseURL() (string, error) {
	if s.cfg.BaseURL != "" {
		return s.cfg.BaseURL, nil
	}
	if err := s.Start(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return "", ErrServerClosed
	}
	return baseURLFor(s.ln.Addr())
}

// baseURLFor is the URL of a listener address, unless guests cannot dial it.
func baseURLFor(addr net.Addr) (string, error) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		return "", fmt.Errorf("phonehome: listening on %s, which guests cannot dial: set Config.BaseURL", addr)
	}
	return "http://" + tcp.String(), nil
}

// URL starts the server if needed and returns the phone-home URL for token,
// to render into the seed.
func (s *Server) URL(token string) (string, error) {
	if !validToken(token) {
		return "", ErrInvalidToken
	}
	base, err := s.BaseURL()
	if err != nil {
		return "", err
	}
	return URL(base, token), nil
}

// Register starts the server if needed and registers a waiter for token.
// Close the waiter when done with it; until then a POST for the token wakes it.
func (s *Server) Register(token string) (*Waiter, error) {
	if !validToken(token) {
		return nil, ErrInvalidToken
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	key := tokenKey(token)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateClosed {
		return nil, ErrServerClosed
	}
	signed := tokenKey(ReportID(token))
	_, dup := s.waiters[key]
	_, dup2 := s.waiters[signed]
	if dup || dup2 {
		return nil, fmt.Errorf("%w: token %s", ErrTokenInUse, TokenID(token))
	}
	e := &entry{key: key, id: TokenID(token), signedKey: signed, token: token,
		done: make(chan struct{}), closed: make(chan struct{})}
	s.waiters[key] = e
	s.waiters[signed] = e
	s.logf("waiting for token %s", e.id)
	return &Waiter{s: s, e: e}, nil
}

// Deliver hands a report that arrived over another transport (a
// virtio-serial channel) to the waiter for token, exactly as an accepted
// POST would. It returns ErrUnknownToken if no waiter is registered.
func (s *Server) Deliver(token string, r *Report) error {
	if !validToken(token) {
		return ErrUnknownToken
	}
	if r == nil {
		return fmt.Errorf("%w: nil report", ErrMalformed)
	}
	key := tokenKey(token)
	e := s.lookup(key)
	if e == nil || e.key != key {
		return fmt.Errorf("%w: token %s", ErrUnknownToken, TokenID(token))
	}
	r = r.Clone()
	r.Token = ""
	if r.ReceivedAt.IsZero() {
		r.ReceivedAt = time.Now()
	}
	switch s.deliver(e, r) {
	case deliveredFirst:
		s.logf("report for token %s accepted: kind=%s transport=other", e.id, r.Kind)
	case deliveredAgain:
		s.logf("report for token %s repeated: kind=%s transport=other", e.id, r.Kind)
	case deliveredStale:
		s.logf("report for token %s refused: a report of its boot was already taken (replay)", e.id)
		return fmt.Errorf("%w: a report of this boot was already taken", ErrStale)
	default:
		return fmt.Errorf("%w: token %s", ErrUnknownToken, TokenID(token))
	}
	return nil
}

// Close stops the listener, drops open connections and wakes every waiter
// with ErrServerClosed. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.state == stateClosed {
		s.mu.Unlock()
		return nil
	}
	wasRunning := s.state == stateRunning
	s.state = stateClosed
	close(s.closed)
	s.waiters = map[[sha256.Size]byte]*entry{}
	srv, done := s.srv, s.serveDone
	s.mu.Unlock()
	if !wasRunning {
		return nil
	}
	err := srv.Close()
	<-done
	s.logf("closed")
	if err != nil {
		return fmt.Errorf("phonehome: closing the listener: %w", err)
	}
	return nil
}

// lookup finds the entry for a token digest. The map is keyed by digest, so
// comparing there does not depend on the secret; the constant-time compare
// restates that the match is exact.
func (s *Server) lookup(key [sha256.Size]byte) *entry {
	s.mu.Lock()
	e := s.waiters[key]
	s.mu.Unlock()
	if e == nil || subtle.ConstantTimeCompare(e.key[:], key[:]) != 1 &&
		subtle.ConstantTimeCompare(e.signedKey[:], key[:]) != 1 {
		return nil
	}
	return e
}

type deliverOutcome int

const (
	deliveredGone deliverOutcome = iota
	deliveredFirst
	deliveredAgain
	deliveredStale
)

// checkFresh checks a signed report against the domain its waiter expects
// (see Waiter.ExpectDomain and CheckFresh).
func (s *Server) checkFresh(e *entry, r *Report) error {
	s.mu.Lock()
	domain := e.domain
	s.mu.Unlock()
	if domain == "" {
		return fmt.Errorf("%w: the provider does not know the VM's domain yet", ErrStale)
	}
	return CheckFresh(r, domain, true)
}

// deliver stores r in e and wakes its waiter, unless e was unregistered
// meanwhile or already has a report (the first report wins; a repeat is
// acknowledged and dropped).
func (s *Server) deliver(e *entry, r *Report) deliverOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiters[e.key] != e {
		return deliveredGone
	}
	if e.report != nil {
		return deliveredAgain
	}
	if k := bootKey(r); k != "" {
		if _, seen := s.boots[k]; seen {
			return deliveredStale
		}
		if s.boots == nil {
			s.boots = map[string]struct{}{}
		}
		s.boots[k] = struct{}{}
	}
	e.report = r
	close(e.done)
	return deliveredFirst
}

// serveHTTP is the endpoint. Order of checks: path, method, token, size,
// body. Nothing but the status code and a short reason is written back, and
// nothing from the path or body is logged.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	if !ok {
		s.respond(w, r, http.StatusNotFound, "not found", "", "path outside "+PathPrefix)
		return
	}
	token = strings.TrimSuffix(token, "/")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.respond(w, r, http.StatusMethodNotAllowed, "method not allowed", "", "method "+safeMethod(r.Method))
		return
	}
	if !validToken(token) {
		s.respond(w, r, http.StatusNotFound, "not found", "", "not a token")
		return
	}
	key := tokenKey(token)
	id := TokenID(token)
	e := s.lookup(key)
	if e == nil {
		s.respond(w, r, http.StatusNotFound, "not found", id, "unknown token")
		return
	}
	id = e.id
	if r.ContentLength > MaxBodyBytes {
		s.respond(w, r, http.StatusRequestEntityTooLarge, "request body too large", id, fmt.Sprintf("declared %d bytes", r.ContentLength))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &tooBig):
			s.respond(w, r, http.StatusRequestEntityTooLarge, "request body too large", id, "body over the limit")
		case errors.As(err, &ne) && ne.Timeout():
			s.respond(w, r, http.StatusRequestTimeout, "request timeout", id, "body read timed out")
		default:
			s.respond(w, r, http.StatusBadRequest, "cannot read body", id, "body read failed")
		}
		return
	}
	rep, err := ParseReport(r.Header.Get("Content-Type"), body)
	if err != nil {
		code, reason := http.StatusBadRequest, fmt.Sprintf("unparsable body (%d bytes)", len(body))
		if errors.Is(err, ErrUnsupportedContentType) {
			code, reason = http.StatusUnsupportedMediaType, "unsupported content type"
		}
		// The parser's reason goes to the client, which sent the body; the
		// log gets only the size.
		s.respond(w, r, code, err.Error(), id, reason)
		return
	}
	// A report posted under ReportID must be signed; a signature is
	// checked wherever one is given. A body that is not the guest's (a
	// replay of its URL with another body) fails here.
	sig, signedPath := r.Header.Get(SignatureHeader), key == e.signedKey
	if (signedPath || sig != "") && !validSignature(e.token, body, sig) {
		s.respond(w, r, http.StatusUnauthorized, "missing or invalid signature", id, "bad signature")
		return
	}
	if signedPath {
		rep.Token = ""
	}
	if rep.Token != "" {
		if subtle.ConstantTimeCompare([]byte(rep.Token), []byte(token)) != 1 {
			s.respond(w, r, http.StatusBadRequest, "token in body does not match the URL", id, "token mismatch")
			return
		}
		rep.Token = ""
	}
	rep.RemoteAddr = r.RemoteAddr
	rep.ReceivedAt, rep.Via = time.Now(), ViaPhoneHome
	if signedPath {
		if err := s.checkFresh(e, rep); err != nil {
			s.respond(w, r, http.StatusConflict, "report refused: not fresh", id, err.Error())
			return
		}
	}
	switch s.deliver(e, rep) {
	case deliveredFirst:
		s.logf("report for token %s accepted: kind=%s from %s", id, rep.Kind, r.RemoteAddr)
	case deliveredAgain:
		s.logf("report for token %s repeated: kind=%s from %s", id, rep.Kind, r.RemoteAddr)
	case deliveredStale:
		s.respond(w, r, http.StatusConflict, "report refused: not fresh", id, "a report of this boot was already taken (replay)")
		return
	default:
		s.respond(w, r, http.StatusNotFound, "not found", id, "waiter closed meanwhile")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "ok\n")
}

// respond writes an error status and logs it by reason (never the path).
func (s *Server) respond(w http.ResponseWriter, r *http.Request, code int, msg, id, reason string) {
	if id != "" {
		s.logf("rejected %d from %s for token %s: %s", code, r.RemoteAddr, id, reason)
	} else {
		s.logf("rejected %d from %s: %s", code, r.RemoteAddr, reason)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}

// safeMethod keeps an odd method name out of the log.
func safeMethod(m string) string {
	if len(m) > 16 || !validKeyType(m) {
		return "(other)"
	}
	return m
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf("phonehome: "+format, args...)
	}
}

// logWriter adapts net/http's ErrorLog to Config.Logf.
type logWriter struct{ s *Server }

func (l logWriter) Write(p []byte) (int, error) {
	l.s.logf("http: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// limitListener accepts a connection only while fewer than its bound are
// open, so a guest (or anyone who reaches the port) opening connections
// without end cannot exhaust the provider's file descriptors or memory.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
