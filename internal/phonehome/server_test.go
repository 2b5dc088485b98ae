package phonehome

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEndpoint drives every HTTP behaviour against a real listener. After a
// rejected request the waiter must still be waiting and still wake on a good
// POST.
func TestEndpoint(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	c := newClient(t)
	form := readFixture(t, "form/cloud-init-22.4-all.txt")
	oversized := []byte("hostname=" + strings.Repeat("a", 65<<10))
	// Exactly at the limit: accepted.
	pad := `{"hostname": "edge", "pad": "`
	atLimit := []byte(pad + strings.Repeat("p", MaxBodyBytes-len(pad)-2) + `"}`)

	type tcase struct {
		name    string
		method  string
		path    func(tok string) string // default: the waiter's URL path
		ctype   string
		body    func(tok string) []byte
		chunked bool
		code    int
		wake    bool
		check   func(t *testing.T, resp response, r *Report)
	}
	tests := []tcase{
		{name: "cloud-init form post", ctype: formType, body: func(string) []byte { return form }, code: 200, wake: true,
			check: func(t *testing.T, _ response, r *Report) {
				if r.Kind != KindForm || r.InstanceID != "iid-web-01" || r.Hostname != "web-01" || r.FQDN != "web-01.lab.example" ||
					len(r.HostKeys) != 3 || r.CloudInit != nil {
					t.Errorf("%+v", r)
				}
				if host, _, err := net.SplitHostPort(r.RemoteAddr); err != nil || host != "127.0.0.1" {
					t.Errorf("remote addr %q", r.RemoteAddr)
				}
				if time.Since(r.ReceivedAt) > time.Minute || r.ReceivedAt.IsZero() {
					t.Errorf("received at %v", r.ReceivedAt)
				}
			}},
		{name: "JSON with cloud-init 22.4 status", ctype: jsonType, body: func(string) []byte { return jsonBody(t, readFixture(t, "cloudinit/22.4-status-done.json")) }, code: 200, wake: true,
			check: func(t *testing.T, _ response, r *Report) {
				if r.Kind != KindJSON || r.CloudInit == nil || r.CloudInit.Status != "done" || r.CloudInit.Failed() || r.CloudInit.Degraded || len(r.GPUs) != 1 {
					t.Errorf("%+v %+v", r, r.CloudInit)
				}
			}},
		{name: "JSON with cloud-init 22.4 error", ctype: jsonType, body: func(string) []byte { return jsonBody(t, readFixture(t, "cloudinit/22.4-status-error.json")) }, code: 200, wake: true,
			check: func(t *testing.T, _ response, r *Report) {
				if r.CloudInit == nil || !r.CloudInit.Failed() || len(r.CloudInit.Errors) != 1 {
					t.Errorf("%+v", r.CloudInit)
				}
			}},
		{name: "JSON with cloud-init 25.1 degraded", ctype: jsonType, body: func(string) []byte { return jsonBody(t, readFixture(t, "cloudinit/25.1-status-degraded.json")) }, code: 200, wake: true,
			check: func(t *testing.T, _ response, r *Report) {
				if r.CloudInit == nil || r.CloudInit.Status != "done" || !r.CloudInit.Degraded || len(r.CloudInit.RecoverableErrors) != 2 {
					t.Errorf("%+v", r.CloudInit)
				}
			}},
		{name: "JSON with cloud-init 25.1 error", ctype: jsonType, body: func(string) []byte { return jsonBody(t, readFixture(t, "cloudinit/25.1-status-error.json")) }, code: 200, wake: true,
			check: func(t *testing.T, _ response, r *Report) {
				if r.CloudInit == nil || r.CloudInit.ExtendedStatus != "error - done" || !r.CloudInit.Failed() {
					t.Errorf("%+v", r.CloudInit)
				}
			}},
		{name: "JSON with result.json", ctype: jsonType, body: func(string) []byte { return jsonBody(t, readFixture(t, "cloudinit/25.1-result-done.json")) }, code: 200, wake: true,
			check: func(t *testing.T, _ response, r *Report) {
				if r.CloudInit == nil || r.CloudInit.Source != "result.json" || !r.CloudInit.Finished() {
					t.Errorf("%+v", r.CloudInit)
				}
			}},
		{name: "JSON naming its own token", ctype: jsonType, body: func(tok string) []byte { return []byte(`{"token": "` + tok + `", "hostname": "h"}`) }, code: 200, wake: true,
			check: func(t *testing.T, _ response, r *Report) {
				if r.Token != "" || r.Hostname != "h" {
					t.Errorf("token %q kept or hostname %q", r.Token, r.Hostname)
				}
			}},
		{name: "trailing slash", path: func(tok string) string { return PathPrefix + tok + "/" }, ctype: formType, body: func(string) []byte { return form }, code: 200, wake: true},
		{name: "body exactly at the limit", ctype: jsonType, body: func(string) []byte { return atLimit }, code: 200, wake: true},

		{name: "wrong token", path: func(string) string { return PathPrefix + mustToken(t) }, ctype: formType, body: func(string) []byte { return form }, code: 404},
		{name: "token one character off", path: func(tok string) string { return PathPrefix + tok[:len(tok)-1] + flip(tok[len(tok)-1]) }, ctype: formType, body: func(string) []byte { return form }, code: 404},
		{name: "token prefix", path: func(tok string) string { return PathPrefix + tok[:30] }, ctype: formType, body: func(string) []byte { return form }, code: 404},
		{name: "not a token", path: func(string) string { return PathPrefix + "short" }, ctype: formType, body: func(string) []byte { return form }, code: 404},
		{name: "token with a suffix path", path: func(tok string) string { return PathPrefix + tok + "/x" }, ctype: formType, body: func(string) []byte { return form }, code: 404},
		{name: "other path", path: func(tok string) string { return "/phone-home/" + tok }, ctype: formType, body: func(string) []byte { return form }, code: 404},
		{name: "GET", method: http.MethodGet, code: 405,
			check: func(t *testing.T, resp response, _ *Report) {
				if resp.header.Get("Allow") != "POST" {
					t.Errorf("Allow %q", resp.header.Get("Allow"))
				}
			}},
		{name: "PUT", method: http.MethodPut, ctype: formType, body: func(string) []byte { return form }, code: 405,
			check: func(t *testing.T, resp response, _ *Report) {
				if resp.header.Get("Allow") != "POST" {
					t.Errorf("Allow %q", resp.header.Get("Allow"))
				}
			}},
		{name: "65 KiB body", ctype: formType, body: func(string) []byte { return oversized }, code: 413},
		{name: "65 KiB body without a length", ctype: formType, body: func(string) []byte { return oversized }, chunked: true, code: 413},
		{name: "malformed JSON", ctype: jsonType, body: func(string) []byte { return []byte(`{"hostname": "h",`) }, code: 400},
		{name: "JSON of the wrong shape", ctype: jsonType, body: func(string) []byte { return []byte(`{"addresses": "10.0.2.15"}`) }, code: 400},
		{name: "malformed form", ctype: formType, body: func(string) []byte { return []byte("hostname=%zz") }, code: 400},
		{name: "empty body", ctype: formType, body: func(string) []byte { return []byte{} }, code: 400},
		{name: "token in body differs", ctype: jsonType, body: func(string) []byte { return []byte(`{"token": "` + mustToken(t) + `"}`) }, code: 400},
		{name: "text/plain", ctype: "text/plain", body: func(string) []byte { return []byte("ready") }, code: 415},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok := mustToken(t)
			w := register(t, s, tok)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			woke := waitAsync(ctx, w)

			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			path := PathPrefix + tok
			if tc.path != nil {
				path = tc.path(tok)
			}
			var body []byte
			if tc.body != nil {
				body = tc.body(tok)
			}
			resp := do(t, c, method, "http://"+s.Addr()+path, tc.ctype, body, tc.chunked)
			if resp.code != tc.code {
				t.Fatalf("status %d (%q), want %d", resp.code, resp.body, tc.code)
			}
			var r *Report
			if tc.wake {
				res := <-woke
				if res.err != nil {
					t.Fatalf("Wait: %v", res.err)
				}
				r = res.r
			} else {
				notYet(t, w)
				// Untouched: a good POST still wakes it.
				if resp := do(t, c, http.MethodPost, endpoint(s, tok), formType, form, false); resp.code != 200 {
					t.Fatalf("good POST after the rejected one: %d %q", resp.code, resp.body)
				}
				if res := <-woke; res.err != nil || res.r.InstanceID != "iid-web-01" {
					t.Fatalf("after the good POST: %+v, %v", res.r, res.err)
				}
			}
			if tc.check != nil {
				tc.check(t, resp, r)
			}
		})
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestPostBeforeWait(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	c := newClient(t)
	tok := mustToken(t)
	w := register(t, s, tok)
	if resp := do(t, c, http.MethodPost, endpoint(s, tok), formType, readFixture(t, "form/cloud-init-22.4-all.txt"), false); resp.code != 200 {
		t.Fatalf("POST: %d", resp.code)
	}
	// Even a context that is already done gets the report that is there.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := w.Wait(ctx)
	if err != nil || r.InstanceID != "iid-web-01" {
		t.Fatalf("Wait: %+v, %v", r, err)
	}
	// Waiting again gives the same report, as a separate copy.
	r2, err := w.Wait(context.Background())
	if err != nil || r2.InstanceID != r.InstanceID || r2 == r {
		t.Fatalf("second Wait: %p %p %v", r, r2, err)
	}
}

func TestSecondPostIsIdempotent(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	c := newClient(t)
	tok := mustToken(t)
	w := register(t, s, tok)
	if resp := do(t, c, http.MethodPost, endpoint(s, tok), jsonType, []byte(`{"hostname": "first"}`), false); resp.code != 200 {
		t.Fatalf("first POST: %d", resp.code)
	}
	if resp := do(t, c, http.MethodPost, endpoint(s, tok), jsonType, []byte(`{"hostname": "second"}`), false); resp.code != 200 {
		t.Fatalf("second POST: %d", resp.code)
	}
	r, err := w.Wait(context.Background())
	if err != nil || r.Hostname != "first" {
		t.Fatalf("Wait: %+v, %v; the first report wins", r, err)
	}
}

func TestCloseUnregisters(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	c := newClient(t)
	tok := mustToken(t)
	w := register(t, s, tok)
	woke := waitAsync(context.Background(), w)
	w.Close()
	w.Close() // twice is fine
	if res := <-woke; !errors.Is(res.err, ErrWaiterClosed) {
		t.Fatalf("pending Wait after Close: %+v, %v", res.r, res.err)
	}
	if resp := do(t, c, http.MethodPost, endpoint(s, tok), formType, readFixture(t, "form/cloud-init-22.4-all.txt"), false); resp.code != 404 {
		t.Fatalf("POST after Close: %d, want 404", resp.code)
	}
	if _, err := w.Wait(context.Background()); !errors.Is(err, ErrWaiterClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	// The token can be registered again.
	w2 := register(t, s, tok)
	if resp := do(t, c, http.MethodPost, endpoint(s, tok), formType, readFixture(t, "form/cloud-init-22.4-all.txt"), false); resp.code != 200 {
		t.Fatalf("POST after re-register: %d", resp.code)
	}
	if _, err := w2.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWaitContext(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	w := register(t, s, mustToken(t))
	const d = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	r, err := w.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || r != nil {
		t.Fatalf("Wait: %v, %v; want DeadlineExceeded", r, err)
	}
	if el := time.Since(start); el < d || el > 5*time.Second {
		t.Fatalf("Wait returned after %v, want about %v", el, d)
	}
	ctx, cancel = context.WithCancel(context.Background())
	woke := waitAsync(ctx, w)
	cancel()
	if res := <-woke; !errors.Is(res.err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v", res.err)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	s := NewServer(Config{ListenAddr: "127.0.0.1:0"})
	t.Cleanup(func() { s.Close() })
	if s.Addr() != "" {
		t.Fatalf("listening before the first Register: %s", s.Addr())
	}
	if _, err := s.Register("not-a-token"); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("invalid token: %v", err)
	}
	tok := mustToken(t)
	w := register(t, s, tok)
	if s.Addr() == "" {
		t.Fatal("Register did not start the listener")
	}
	if _, err := s.Register(tok); !errors.Is(err, ErrTokenInUse) {
		t.Fatalf("second Register: %v", err)
	}
	woke := waitAsync(context.Background(), w)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if res := <-woke; !errors.Is(res.err, ErrServerClosed) {
		t.Fatalf("Wait across server Close: %v", res.err)
	}
	if _, err := s.Register(mustToken(t)); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
	if err := s.Start(); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The port is released.
	ln, err := net.Listen("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatalf("port still held after Close: %v", err)
	}
	ln.Close()
}

func TestStartError(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{ListenAddr: busy.Addr().String()})
	t.Cleanup(func() { s.Close() })
	var op *net.OpError
	if _, err := s.Register(mustToken(t)); !errors.As(err, &op) {
		t.Fatalf("Register on a busy port: %v; want a wrapped *net.OpError", err)
	}
	busy.Close()
	// A failed start can be retried.
	if _, err := s.Register(mustToken(t)); err != nil {
		t.Fatalf("Register once the port is free: %v", err)
	}
}

func TestURLs(t *testing.T) {
	t.Parallel()
	tok := mustToken(t)
	s := NewServer(Config{ListenAddr: "127.0.0.1:0", BaseURL: "http://10.0.2.2:8787/"})
	t.Cleanup(func() { s.Close() })
	u, err := s.URL(tok)
	if err != nil || u != "http://10.0.2.2:8787/v1/phone-home/"+tok {
		t.Fatalf("URL with BaseURL: %q, %v", u, err)
	}
	if _, err := s.URL("bad"); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("URL(bad): %v", err)
	}

	s2 := NewServer(Config{ListenAddr: "127.0.0.1:0"})
	t.Cleanup(func() { s2.Close() })
	u, err = s2.URL(tok)
	if err != nil || u != "http://"+s2.Addr()+"/v1/phone-home/"+tok {
		t.Fatalf("URL without BaseURL: %q, %v (addr %s)", u, err, s2.Addr())
	}

	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8787}, "http://127.0.0.1:8787"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 8787}, "http://[::1]:8787"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8787}, ""},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8787}, ""},
	} {
		got, err := baseURLFor(tc.addr)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("baseURLFor(%v) = %q, %v; want %q", tc.addr, got, err, tc.want)
		}
	}
}

func TestDeliver(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	tok := mustToken(t)
	w := register(t, s, tok)
	line := `{"token": "` + tok + `", "hostname": "serial-guest"}`
	r, err := ParseReport(jsonType, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if r.Token != tok {
		t.Fatalf("token not carried for the serial transport")
	}
	if err := s.Deliver(r.Token, r); err != nil {
		t.Fatal(err)
	}
	got, err := w.Wait(context.Background())
	if err != nil || got.Hostname != "serial-guest" || got.Token != "" || got.RemoteAddr != "" || got.ReceivedAt.IsZero() {
		t.Fatalf("Wait: %+v, %v", got, err)
	}
	if err := s.Deliver(mustToken(t), r); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("Deliver to an unknown token: %v", err)
	}
	if err := s.Deliver("x", r); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("Deliver to a malformed token: %v", err)
	}
	w.Close()
	if err := s.Deliver(tok, r); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("Deliver after Close: %v", err)
	}
}

// TestSlowClients: a client that sends half a header, or half a body, is cut
// off within the configured timeouts, and meanwhile a real POST gets through
// at once.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	const (
		headerTimeout = 300 * time.Millisecond
		readTimeout   = 600 * time.Millisecond
		slack         = 1500 * time.Millisecond
	)
	s := newTestServer(t, Config{ReadHeaderTimeout: headerTimeout, ReadTimeout: readTimeout})
	c := newClient(t)
	tok := mustToken(t)
	w := register(t, s, tok)

	tests := []struct {
		name    string
		partial string
		limit   time.Duration
	}{
		{"half a header", "POST " + PathPrefix + tok + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty", headerTimeout},
		{"half a body", "POST " + PathPrefix + tok + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + jsonType +
			"\r\nContent-Length: 200\r\n\r\n{\"hostname\": ", readTimeout},
	}
	type cut struct {
		name    string
		elapsed time.Duration
		resp    string
		err     error
	}
	cuts := make(chan cut, len(tests))
	for _, tc := range tests {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		start := time.Now()
		if _, err := io.WriteString(conn, tc.partial); err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := conn.SetReadDeadline(time.Now().Add(tc.limit + slack)); err != nil {
				t.Error(err)
			}
			b, err := io.ReadAll(conn) // returns when the server hangs up
			cuts <- cut{tc.name, time.Since(start), string(b), err}
		}()
	}

	// The slow clients are connected; a real POST is not held up by them.
	start := time.Now()
	woke := waitAsync(context.Background(), w)
	if resp := do(t, c, http.MethodPost, endpoint(s, tok), formType, readFixture(t, "form/cloud-init-22.4-all.txt"), false); resp.code != 200 {
		t.Fatalf("real POST: %d", resp.code)
	}
	res := <-woke
	if res.err != nil {
		t.Fatal(res.err)
	}
	if el := res.at.Sub(start); el >= headerTimeout {
		t.Errorf("real POST woke the waiter after %v, behind the slow clients", el)
	}

	for range tests {
		ct := <-cuts
		if ct.err != nil {
			t.Errorf("%s: not cut off by the server (%v after %v)", ct.name, ct.err, ct.elapsed)
			continue
		}
		limit := headerTimeout
		if ct.name == "half a body" {
			limit = readTimeout
		}
		if ct.elapsed < limit-50*time.Millisecond || ct.elapsed > limit+slack {
			t.Errorf("%s: cut off after %v, want about %v", ct.name, ct.elapsed, limit)
		}
		t.Logf("%s: cut off after %v, answer %q", ct.name, ct.elapsed, firstLine(ct.resp))
		if ct.name == "half a body" && ct.resp != "" && !strings.HasPrefix(ct.resp, "HTTP/1.1 408") {
			t.Errorf("%s: answer %q", ct.name, firstLine(ct.resp))
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// TestLogsKeepSecrets captures the log of a full exchange, rejections
// included, and checks that no token, path or body value appears in it.
func TestLogsKeepSecrets(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	s := newTestServer(t, Config{Logf: logs.Logf})
	c := newClient(t)
	tok, wrong := mustToken(t), mustToken(t)
	if _, err := s.URL(tok); err != nil {
		t.Fatal(err)
	}
	w := register(t, s, tok)
	keys := fixtureKeys(t)

	secrets := []string{tok, wrong, PathPrefix, "iid-web-01", "web-01.lab.example", "gpu-01.lab.example", "iid-gpu-01",
		"NVIDIA A10", "550.54.14", "52:54:00:12:34:56", "10.0.2.15", "MALFORMED-MARKER", "UNPARSABLE-MARKER", "Runparts", "scripts_user"}
	for _, k := range keys {
		f := strings.Fields(k)
		secrets = append(secrets, f[1][20:60]) // a piece of each key blob
	}

	u := endpoint(s, tok)
	do(t, c, http.MethodPost, endpoint(s, wrong), formType, readFixture(t, "form/cloud-init-22.4-all.txt"), false)
	do(t, c, http.MethodGet, u, "", nil, false)
	do(t, c, http.MethodPost, u, jsonType, []byte(`{"hostname": "MALFORMED-MARKER`), false)
	do(t, c, http.MethodPost, u, formType, []byte("UNPARSABLE-MARKER=%zz"), false)
	do(t, c, http.MethodPost, u, formType, []byte("hostname="+strings.Repeat("x", 70<<10)), false)
	do(t, c, http.MethodPost, u, "text/plain", []byte("MALFORMED-MARKER"), false)
	if resp := do(t, c, http.MethodPost, u, jsonType, jsonBody(t, readFixture(t, "cloudinit/25.1-status-error.json")), false); resp.code != 200 {
		t.Fatalf("JSON POST: %d", resp.code)
	}
	do(t, c, http.MethodPost, u, formType, readFixture(t, "form/cloud-init-22.4-all.txt"), false)
	if _, err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	out := logs.String()
	t.Logf("log of the exchange:\n%s", out)
	for _, sec := range secrets {
		if strings.Contains(out, sec) {
			t.Errorf("log contains %q:\n%s", sec, out)
		}
	}
	// The log is not empty: it names the token by its ID and each outcome.
	for _, want := range []string{TokenID(tok), TokenID(wrong), "accepted", "repeated", "rejected 404", "rejected 405",
		"rejected 400", "rejected 413", "rejected 415", "listening on", "closed"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestBurst: while one waiter waits, bounded bursts of wrong-token,
// oversized, malformed and slow requests hit the listener from a few
// goroutines on loopback; none of them wakes the waiter, and the real POST
// afterwards still wakes it promptly.
func TestBurst(t *testing.T) {
	t.Parallel()
	const (
		workers       = 4
		perWorker     = 50 // 200 requests in all
		headerTimeout = 500 * time.Millisecond
	)
	s := newTestServer(t, Config{ReadHeaderTimeout: headerTimeout, ReadTimeout: time.Second})
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	tok := mustToken(t)
	w := register(t, s, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	woke := waitAsync(ctx, w)
	u := endpoint(s, tok)
	oversized := []byte("hostname=" + strings.Repeat("a", 70<<10))

	type outcome struct {
		kind string
		code int
		err  error
	}
	results := make(chan outcome, workers*perWorker)
	var slow []net.Conn
	slowConns := make(chan net.Conn, workers*perWorker)
	burstStart := time.Now()
	done := make(chan struct{})
	for g := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range perWorker {
				var o outcome
				switch (g + i) % 5 {
				case 0:
					o.kind = "wrong-token"
					o.code, o.err = rawPost(ctx, c, endpoint(s, fmt.Sprintf("%043d", g*perWorker+i)), formType, []byte("hostname=x"), false)
				case 1:
					o.kind = "oversized"
					o.code, o.err = rawPost(ctx, c, u, formType, oversized, false)
				case 2:
					o.kind = "oversized-chunked"
					o.code, o.err = rawPost(ctx, c, u, formType, oversized, true)
				case 3:
					o.kind = "malformed"
					o.code, o.err = rawPost(ctx, c, u, jsonType, []byte(`{"hostname": [`), false)
				case 4:
					o.kind = "slow"
					conn, err := net.Dial("tcp", s.Addr())
					if err == nil {
						_, err = io.WriteString(conn, "POST "+PathPrefix+tok+" HTTP/1.1\r\nHost: x\r\n")
						slowConns <- conn
					}
					o.err = err
				}
				results <- o
			}
		}()
	}
	for range workers {
		<-done
	}
	close(results)
	close(slowConns)
	for conn := range slowConns {
		slow = append(slow, conn)
	}
	t.Cleanup(func() {
		for _, conn := range slow {
			conn.Close()
		}
	})
	burst := time.Since(burstStart)

	counts := map[string]map[int]int{}
	for o := range results {
		if counts[o.kind] == nil {
			counts[o.kind] = map[int]int{}
		}
		if o.err != nil {
			// A client may see the server hang up on an oversized body
			// before it reads the 413; anything else is a failure.
			if !strings.HasPrefix(o.kind, "oversized") {
				t.Errorf("%s: %v", o.kind, o.err)
			}
			counts[o.kind][-1]++
			continue
		}
		counts[o.kind][o.code]++
	}
	want := map[string]int{"wrong-token": 404, "oversized": 413, "oversized-chunked": 413, "malformed": 400, "slow": 0}
	for kind, code := range want {
		for got, n := range counts[kind] {
			if got != code && got != -1 {
				t.Errorf("%s: %d answered %d, want %d", kind, n, got, code)
			}
		}
		if counts[kind][code] == 0 {
			t.Errorf("%s: no request answered %d (%v)", kind, code, counts[kind])
		}
	}
	t.Logf("burst of %d requests took %v: %v; %d slow connections held open", workers*perWorker, burst, counts, len(slow))

	notYet(t, w)
	start := time.Now()
	code, err := rawPost(ctx, c, u, formType, readFixture(t, "form/cloud-init-22.4-all.txt"), false)
	if err != nil || code != 200 {
		t.Fatalf("real POST: %d, %v", code, err)
	}
	res := <-woke
	if res.err != nil || res.r.InstanceID != "iid-web-01" {
		t.Fatalf("Wait: %+v, %v", res.r, res.err)
	}
	lat := res.at.Sub(start)
	t.Logf("real POST woke the waiter %v after it started", lat)
	if lat > headerTimeout {
		t.Errorf("waking took %v under the burst, want well under %v", lat, headerTimeout)
	}
}

// rawPost is do without t, for goroutines.
func rawPost(ctx context.Context, c *http.Client, u, ctype string, body []byte, chunked bool) (int, error) {
	var rd io.Reader = strings.NewReader(string(body))
	if chunked {
		rd = bufio.NewReader(rd)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// A posted report keeps the guest's sent_at and is marked as come through
// phone home, with the host's clock when it arrived.
func TestPostKeepsSentAt(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	c := newClient(t)
	tok := mustToken(t)
	w := register(t, s, tok)
	before := time.Now()
	body := []byte(`{"token":"` + tok + `","hostname":"web-1","sent_at":"2026-11-25T12:00:01.123456Z","cloud_init":{"status":"error","errors":["('scripts_user', RuntimeError('x'))"]}}`)
	if resp := do(t, c, http.MethodPost, endpoint(s, tok), jsonType, body, false); resp.code != 200 {
		t.Fatalf("POST: %d %s", resp.code, resp.body)
	}
	r, err := w.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Via != ViaPhoneHome || r.ReceivedAt.Before(before) || !r.SentAt.Equal(time.Date(2026, 11, 25, 12, 0, 1, 123456000, time.UTC)) || !r.CloudInit.Failed() {
		t.Errorf("via %q, received %v, sent %v, cloud-init %+v", r.Via, r.ReceivedAt, r.SentAt, r.CloudInit)
	}
}
