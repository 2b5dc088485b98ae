package phonehome

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestConnectionLimit: connections past MaxConns wait unserved until one
// of those open ends, so idle connections cannot pile up without bound.
func TestConnectionLimit(t *testing.T) {
	s := newTestServer(t, Config{MaxConns: 2, ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute, IdleTimeout: time.Minute})
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	time.Sleep(100 * time.Millisecond) // let the server take both
	post := func(timeout time.Duration) error {
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Post(endpoint(s, mustToken(t)), "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := post(300 * time.Millisecond); err == nil {
		t.Fatal("a third connection was served while two were open with MaxConns 2")
	}
	idle[0].Close()
	if err := post(5 * time.Second); err != nil {
		t.Fatalf("after one connection closed: %v", err)
	}
}

// TestPortTakenSaysWho: a listen address whose port another process
// holds fails with a message saying that whoever holds it would get the
// reports.
func TestPortTakenSaysWho(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	s := NewServer(Config{ListenAddr: other.Addr().String()})
	defer s.Close()
	err = s.Start()
	if err == nil || !strings.Contains(err.Error(), "another process holds the port") {
		t.Fatalf("Start on a taken port: %v", err)
	}
}
