package phonehome

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

func postSigned(t *testing.T, c *http.Client, u string, body []byte, sig string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set(SignatureHeader, sig)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestReplayedReportRefused: someone who saw a signed report go by (its URL,
// body and signature) posts their own host keys under it first. Only a body
// signed with the seed's token is taken.
func TestReplayedReportRefused(t *testing.T) {
	s := newTestServer(t, Config{})
	c := newClient(t)
	tok := mustToken(t)
	w := register(t, s, tok)
	u := SignedURL(endpoint(s, tok), tok)
	if strings.Contains(u, tok) {
		t.Fatalf("signed URL %s carries the token", u)
	}

	genuine := []byte(`{"instance_id":"i-1","hostname":"vm","host_keys":{"ssh-ed25519":"AAAAgenuine"}}`)
	forged := []byte(`{"instance_id":"i-1","hostname":"evil","host_keys":{"ssh-ed25519":"AAAAattacker"}}`)
	sig := Sign(tok, genuine)

	if code := postSigned(t, c, u, forged, sig); code != http.StatusUnauthorized {
		t.Errorf("replayed signature with another body: %d, want 401", code)
	}
	if code := postSigned(t, c, u, forged, ""); code != http.StatusUnauthorized {
		t.Errorf("unsigned body on the signed URL: %d, want 401", code)
	}
	if code := postSigned(t, c, u, forged, Sign(ReportID(tok), forged)); code != http.StatusUnauthorized {
		t.Errorf("body signed with the public report ID: %d, want 401", code)
	}
	notYet(t, w)

	if code := postSigned(t, c, u, genuine, sig); code != http.StatusOK {
		t.Fatalf("genuine signed report: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := w.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Hostname != "vm" {
		t.Errorf("accepted report has hostname %q", rep.Hostname)
	}

	// The signed URL is no channel token, and a wrong signature on the
	// token's own URL is refused too.
	if err := s.Deliver(ReportID(tok), &Report{}); err == nil {
		t.Error("Deliver accepted the report ID as a token")
	}
	tok2 := mustToken(t)
	register(t, s, tok2)
	if code := postSigned(t, c, endpoint(s, tok2), forged, sig); code != http.StatusUnauthorized {
		t.Errorf("wrong signature on the token URL: %d, want 401", code)
	}
}

func TestSignedURL(t *testing.T) {
	tok := "abcdefghijklmnopqrstuvwxyz012345"
	if got := SignedURL("http://10.0.0.1:8080"+PathPrefix+tok, tok); got != "http://10.0.0.1:8080"+PathPrefix+ReportID(tok) {
		t.Errorf("SignedURL = %s", got)
	}
	if got := SignedURL("http://x/elsewhere", tok); got != "http://x/elsewhere" {
		t.Errorf("SignedURL of a foreign URL = %s", got)
	}
	if !validToken(ReportID(tok)) {
		t.Error("report ID is not token-shaped")
	}
}
