package phonehome

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// benchBodies are a cloud-init form post and a reporter's JSON with a 25.x
// status: what a guest really sends.
func benchBodies(b *testing.B) []struct {
	name, ctype string
	body        []byte
} {
	return []struct {
		name, ctype string
		body        []byte
	}{
		{"form", formType, readFixture(b, "form/cloud-init-22.4-all.txt")},
		{"json", jsonType, jsonBody(b, readFixture(b, "cloudinit/25.1-status-degraded.json"))},
	}
}

// BenchmarkWakeLatency measures one kohaku_vm readiness cycle on loopback:
// register a token, a client POSTs the report, Wait returns. wake-ns/op is the
// time from the client starting the POST to Wait returning; ns/op is the
// whole cycle (token, Register, POST round trip, Close). Compare both with
// BenchmarkBaselinePOST in the same run.
func BenchmarkWakeLatency(b *testing.B) {
	for _, bc := range benchBodies(b) {
		b.Run(bc.name, func(b *testing.B) {
			s := newTestServer(b, Config{})
			c := newClient(b)
			ctx := context.Background()
			var wake time.Duration
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				tok, err := NewToken()
				if err != nil {
					b.Fatal(err)
				}
				w, err := s.Register(tok)
				if err != nil {
					b.Fatal(err)
				}
				woke := make(chan time.Time, 1)
				go func() {
					if _, err := w.Wait(ctx); err != nil {
						b.Error(err)
					}
					woke <- time.Now()
				}()
				start := time.Now()
				code, err := rawPost(ctx, c, endpoint(s, tok), bc.ctype, bc.body, false)
				if err != nil || code != http.StatusOK {
					b.Fatalf("POST: %d, %v", code, err)
				}
				wake += (<-woke).Sub(start)
				w.Close()
				n++
			}
			b.ReportMetric(float64(wake.Nanoseconds())/float64(n), "wake-ns/op")
		})
	}
}

// BenchmarkBaselinePOST is a bare net/http POST round trip on loopback to a
// handler that only drains the body, with the same client and bodies as
// BenchmarkWakeLatency.
func BenchmarkBaselinePOST(b *testing.B) {
	for _, bc := range benchBodies(b) {
		b.Run(bc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
			})}
			go func() { _ = srv.Serve(ln) }()
			b.Cleanup(func() { srv.Close() })
			c := newClient(b)
			ctx := context.Background()
			u := "http://" + ln.Addr().String() + PathPrefix + "x"
			b.ReportAllocs()
			for b.Loop() {
				code, err := rawPost(ctx, c, u, bc.ctype, bc.body, false)
				if err != nil || code != http.StatusOK {
					b.Fatalf("POST: %d, %v", code, err)
				}
			}
		})
	}
}

// BenchmarkParseReport is the parser alone.
func BenchmarkParseReport(b *testing.B) {
	for _, bc := range benchBodies(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if _, err := ParseReport(bc.ctype, bc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
