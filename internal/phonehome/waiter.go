package phonehome

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
)

// Waiter waits for the report of one token. It holds no goroutine: waking is
// the close of a channel.
type Waiter struct {
	s *Server
	e *entry
}

// entry is one registered token.
type entry struct {
	key [sha256.Size]byte
	id  string
	// signedKey is the key of ReportID(token), under which only signed
	// reports are taken; token is the signing key.
	signedKey [sha256.Size]byte
	token     string
	done      chan struct{} // closed when report is set
	closed    chan struct{} // closed by Waiter.Close
	report    *Report       // written once under Server.mu, before done is closed
	// domain is the UUID of the domain whose report is awaited, set by
	// ExpectDomain under Server.mu; until then signed reports are refused.
	domain string

	closeOnce sync.Once
}

// TokenID is the loggable name of the waiter's token (see TokenID).
func (w *Waiter) TokenID() string { return w.e.id }

// Wait blocks until the guest's report has been accepted and returns it; if
// it was accepted before Wait was called, Wait returns at once. Otherwise it
// returns ctx's error (wrapped), ErrWaiterClosed or ErrServerClosed. A report
// that is already there wins over any of those. Each call returns its own
// copy of the report.
func (w *Waiter) Wait(ctx context.Context) (*Report, error) {
	e := w.e
	select {
	case <-e.done:
		return e.report.Clone(), nil
	default:
	}
	select {
	case <-e.done:
	case <-e.closed:
	case <-w.s.closed:
	case <-ctx.Done():
	}
	select {
	case <-e.done:
		return e.report.Clone(), nil
	default:
	}
	select {
	case <-e.closed:
		return nil, ErrWaiterClosed
	case <-w.s.closed:
		return nil, ErrServerClosed
	default:
	}
	return nil, fmt.Errorf("phonehome: waiting for token %s: %w", e.id, ctx.Err())
}

// ExpectDomain names the domain (its UUID) whose report the waiter takes.
// Until it is called, signed reports are refused with a status that makes
// the reporter try again; after, a signed report is taken only when it
// names this domain, and a report of a boot whose report the server
// already took is refused (see CheckFresh). Call it once the domain is
// defined, before or soon after it starts.
func (w *Waiter) ExpectDomain(uuid string) {
	w.s.mu.Lock()
	w.e.domain = strings.ToLower(strings.TrimSpace(uuid))
	w.s.mu.Unlock()
}

// Close unregisters the token (later POSTs for it get 404) and makes a
// pending or later Wait return ErrWaiterClosed unless a report is already
// there. It is safe to call more than once and concurrently with Wait.
func (w *Waiter) Close() {
	e := w.e
	e.closeOnce.Do(func() {
		s := w.s
		s.mu.Lock()
		if s.waiters[e.key] == e {
			delete(s.waiters, e.key)
		}
		if s.waiters[e.signedKey] == e {
			delete(s.waiters, e.signedKey)
		}
		s.mu.Unlock()
		close(e.closed)
		s.logf("stopped waiting for token %s", e.id)
	})
}
