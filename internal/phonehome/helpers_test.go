package phonehome

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// newTestServer starts a server on loopback and closes it when the test ends.
func newTestServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	s := NewServer(cfg)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// newClient is a net/http client with its own transport, closed at the end.
func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func mustToken(t testing.TB) string {
	t.Helper()
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func register(t testing.TB, s *Server, tok string) *Waiter {
	t.Helper()
	w, err := s.Register(tok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func endpoint(s *Server, tok string) string {
	return "http://" + s.Addr() + PathPrefix + tok
}

type response struct {
	code   int
	header http.Header
	body   string
}

// do sends one request; chunked hides the length so the server must count.
func do(t testing.TB, c *http.Client, method, u, ctype string, body []byte, chunked bool) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // not a *bytes.Reader: no ContentLength
		}
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

// waitAsync runs Wait in a goroutine and hands back its result.
type waitResult struct {
	r   *Report
	err error
	at  time.Time
}

func waitAsync(ctx context.Context, w *Waiter) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		r, err := w.Wait(ctx)
		ch <- waitResult{r, err, time.Now()}
	}()
	return ch
}

// notYet asserts that w has no report: Wait with a cancelled context returns
// the report if there is one, so this needs no sleeping.
func notYet(t testing.TB, w *Waiter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err := w.Wait(ctx); err == nil {
		t.Fatalf("waiter already woken: %v", r)
	}
}

// logBuffer collects Logf output.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logBuffer) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.WriteString(strings.TrimRight(fmt.Sprintf(format, args...), "\n"))
	l.buf.WriteByte('\n')
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
