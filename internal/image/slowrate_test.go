package image

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestFetchTooSlow: a server that sends a few bytes now and then never
// stalls, but falls below the minimum rate and is given up on within a
// couple of windows, not held until the create's timeout.
func TestFetchTooSlow(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 1<<20)
		rw.Flush()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for range 250 { // 10 bytes every 20 ms: 500 bytes/s, for 5 s
			select {
			case <-release:
				return
			case <-tick.C:
			}
			if _, err := rw.Write(make([]byte, 10)); err != nil || rw.Flush() != nil {
				return
			}
		}
	})
	dir := t.TempDir()
	url := srv.URL + "/trickle.raw"
	start := time.Now()
	_, err := fetch(t, &Cache{Dir: dir}, Request{Source: url, StallTimeout: 200 * time.Millisecond, MinRate: 1024})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("given up after %v", d)
	}
	errContains(t, err, "GET "+url, "too slow", "less than the minimum of 1024 bytes/s")
	assertEmptyCache(t, dir)

	// With no minimum, the same trickle is only bounded by the stall
	// timeout, which it never trips.
	srv2 := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 1<<20)
		rw.Flush()
		for range 30 {
			time.Sleep(20 * time.Millisecond)
			if _, err := rw.Write(make([]byte, 10)); err != nil || rw.Flush() != nil {
				return
			}
		}
	})
	_, err = fetch(t, &Cache{Dir: dir}, Request{Source: srv2.URL + "/x.raw", StallTimeout: 200 * time.Millisecond, MinRate: -1})
	if err == nil || strings.Contains(err.Error(), "too slow") {
		t.Errorf("without a minimum: %v, want the server's early end, not too slow", err)
	}
}
