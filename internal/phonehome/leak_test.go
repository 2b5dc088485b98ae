package phonehome

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"
)

// TestNoGoroutineLeak runs 200 register/wait/cancel cycles of every kind and
// checks that the goroutine count comes back down. It is deliberately not
// parallel: it counts the goroutines of the whole test binary, and Go runs
// parallel tests only after the sequential ones have finished.
func TestNoGoroutineLeak(t *testing.T) {
	const cycles = 200
	before := runtime.NumGoroutine()

	s := NewServer(Config{ListenAddr: "127.0.0.1:0"})
	tr := &http.Transport{}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	form := readFixture(t, "form/cloud-init-22.4-all.txt")
	for i := range cycles {
		tok := mustToken(t)
		w, err := s.Register(tok)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 5 {
		case 0: // POST, then Wait
			if resp := do(t, c, http.MethodPost, endpoint(s, tok), formType, form, false); resp.code != 200 {
				t.Fatalf("cycle %d: POST %d", i, resp.code)
			}
			if _, err := w.Wait(context.Background()); err != nil {
				t.Fatalf("cycle %d: %v", i, err)
			}
		case 1: // Wait pending while the POST arrives
			woke := waitAsync(context.Background(), w)
			if resp := do(t, c, http.MethodPost, endpoint(s, tok), formType, form, false); resp.code != 200 {
				t.Fatalf("cycle %d: POST %d", i, resp.code)
			}
			if res := <-woke; res.err != nil {
				t.Fatalf("cycle %d: %v", i, res.err)
			}
		case 2: // Wait times out
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			if _, err := w.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("cycle %d: %v", i, err)
			}
			cancel()
		case 3: // Wait cancelled from elsewhere
			ctx, cancel := context.WithCancel(context.Background())
			woke := waitAsync(ctx, w)
			cancel()
			if res := <-woke; !errors.Is(res.err, context.Canceled) {
				t.Fatalf("cycle %d: %v", i, res.err)
			}
		case 4: // waiter closed under a pending Wait
			woke := waitAsync(context.Background(), w)
			w.Close()
			if res := <-woke; !errors.Is(res.err, ErrWaiterClosed) {
				t.Fatalf("cycle %d: %v", i, res.err)
			}
		}
		w.Close()
	}
	s.mu.Lock()
	left := len(s.waiters)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d waiters still registered after every Close", left)
	}

	// While the server still runs: its accept loop, plus at most a couple
	// of connection goroutines that are just ending.
	tr.CloseIdleConnections()
	settle(t, before+3, "with the server running")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	settle(t, before, "after Close")
}

// settle waits up to 5 s for the goroutine count to drop to limit; exiting
// goroutines take a moment to be accounted for.
func settle(t *testing.T, limit int, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= limit {
			return
		}
		if time.Now().After(deadline) {
			var buf bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Fatalf("%d goroutines %s, want at most %d:\n%s", n, when, limit, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
