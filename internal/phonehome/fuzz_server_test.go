package phonehome

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzServeHTTP: the phone-home handler, fed any method, path, content type
// and body for a registered token (or none), never panics, answers only
// with its known statuses, accepts a request only when it is a POST to the
// token's own path with a body ParseReport accepts (and then wakes the
// waiter), and never writes the token to its log or to a response. The seed
// corpus is testdata/fuzz/FuzzServeHTTP.
func FuzzServeHTTP(f *testing.F) {
	var logs logBuffer
	s := newTestServer(f, Config{Logf: logs.Logf})
	tok := mustToken(f)
	w := register(f, s, tok)

	f.Add("POST", true, "", formType, []byte("instance_id=i-1&hostname=h&fqdn=h.example&pub_key_ed25519=ssh-ed25519+AAAAC3NzaC1lZDI1NTE5AAAAIE7qOna0cn70QLjLCzPAW5KHLr79LrAP3nfZwMy10H68+c"))
	f.Add("POST", true, "/", jsonType, []byte(`{"hostname":"h"}`))
	f.Add("GET", true, "", "", []byte(nil))
	f.Add("POST", false, "AAAA", jsonType, []byte(`{}`))
	f.Add("POST", true, "/../x", "text/plain", []byte("hello"))
	f.Add("PUT", true, "", formType, bytes.Repeat([]byte("a=b&"), MaxBodyBytes/4+1))

	known := []int{http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusRequestTimeout, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType}
	f.Fuzz(func(t *testing.T, method string, withToken bool, suffix, ctype string, body []byte) {
		if !validMethod(method) {
			return // net/http's server never hands the handler such a request
		}
		path := PathPrefix + suffix
		if withToken {
			path = PathPrefix + tok + suffix
		}
		req := httptest.NewRequest(http.MethodGet, "/", bytes.NewReader(body))
		req.Method = method
		req.URL.Path = path
		req.ContentLength = int64(len(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		rec := httptest.NewRecorder()
		s.serveHTTP(rec, req)

		code := rec.Code
		if !slices.Contains(known, code) {
			t.Fatalf("status %d is not one the handler documents", code)
		}
		if strings.Contains(rec.Body.String(), tok) || strings.Contains(logs.String(), tok) {
			t.Fatal("the token leaked into a response or the log")
		}
		if code != http.StatusOK {
			return
		}
		if method != http.MethodPost || !withToken || (suffix != "" && suffix != "/") {
			t.Fatalf("%s %q was accepted", method, suffix)
		}
		if _, err := ParseReport(ctype, body); err != nil {
			t.Fatalf("accepted a body ParseReport refuses: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if r, err := w.Wait(ctx); err != nil || r == nil {
			t.Fatalf("accepted, but the waiter has no report: %v", err)
		}
	})
}

// validMethod is what net/http accepts as a request method: an RFC 7230
// token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c > 0x7e || c <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}
