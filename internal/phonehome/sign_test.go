package phonehome

import (
	"bytes"
	"context"
	"errors"
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
	w.ExpectDomain(testDomainA)
	u := SignedURL(endpoint(s, tok), tok)
	if strings.Contains(u, tok) {
		t.Fatalf("signed URL %s carries the token", u)
	}

	genuine := []byte(`{"instance_id":"i-1","hostname":"vm","host_keys":{"ssh-ed25519":"AAAAgenuine"},"domain_uuid":"` + testDomainA + `"}`)
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

const (
	testDomainA = "0e3a9c52-5d7a-4c35-9a0b-1f2e3d4c5b6a"
	testDomainB = "7b1f0d44-2c9e-4e1a-8f3d-6a5b4c3d2e1f"
	testBoot1   = "11111111-2222-4333-8444-555555555555"
	testBoot2   = "66666666-7777-4888-9999-aaaaaaaaaaaa"
)

// signedReport is a reporter's signed report of domain and boot.
func signedReport(tok, domain, boot, hostname string) ([]byte, string) {
	body := []byte(`{"instance_id":"i-1","hostname":"` + hostname + `","domain_uuid":"` + domain + `","boot_id":"` + boot + `"}`)
	return body, Sign(tok, body)
}

// TestReplayAcrossVMReplacement: a signed report captured from a VM is
// refused for the VM that replaced it (same seed, same token, another
// domain), and a report is taken for one boot only once.
func TestReplayAcrossVMReplacement(t *testing.T) {
	s := newTestServer(t, Config{})
	c := newClient(t)
	tok := mustToken(t)
	u := SignedURL(endpoint(s, tok), tok)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// The old VM reports; someone on the path keeps its post.
	old := register(t, s, tok)
	oldBody, oldSig := signedReport(tok, testDomainA, testBoot1, "old-vm")
	if code := postSigned(t, c, u, oldBody, oldSig); code != http.StatusConflict {
		t.Errorf("signed report before the domain is known: %d, want 409", code)
	}
	old.ExpectDomain(testDomainA)
	if code := postSigned(t, c, u, oldBody, oldSig); code != http.StatusOK {
		t.Fatalf("old VM's report: %d", code)
	}
	if _, err := old.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	old.Close()

	// Its replacement boots from the same seed.
	w := register(t, s, tok)
	w.ExpectDomain(strings.ToUpper(testDomainB))
	if code := postSigned(t, c, u, oldBody, oldSig); code != http.StatusConflict {
		t.Errorf("old VM's report replayed for its replacement: %d, want 409", code)
	}
	unsignedOld := []byte(`{"instance_id":"i-1","hostname":"vm","host_keys":{"ssh-ed25519":"AAAAold"}}`)
	if code := postSigned(t, c, u, unsignedOld, Sign(tok, unsignedOld)); code != http.StatusConflict {
		t.Errorf("signed report naming no domain: %d, want 409", code)
	}
	notYet(t, w)
	newBody, newSig := signedReport(tok, testDomainB, testBoot2, "new-vm")
	if code := postSigned(t, c, u, newBody, newSig); code != http.StatusOK {
		t.Fatalf("new VM's report: %d", code)
	}
	rep, err := w.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Hostname != "new-vm" || rep.DomainUUID != testDomainB || rep.BootID != testBoot2 {
		t.Errorf("accepted %s's report of domain %s boot %s", rep.Hostname, rep.DomainUUID, rep.BootID)
	}
	w.Close()

	// A later wait on the same domain (it was restarted) takes no report
	// of a boot whose report was already taken.
	again := register(t, s, tok)
	again.ExpectDomain(testDomainB)
	if code := postSigned(t, c, u, newBody, newSig); code != http.StatusConflict {
		t.Errorf("report of an earlier boot of the same domain: %d, want 409", code)
	}
	notYet(t, again)
	if err := s.Deliver(tok, &Report{DomainUUID: testDomainB, BootID: testBoot2}); !errors.Is(err, ErrStale) {
		t.Errorf("the same boot's report over another transport: %v, want ErrStale", err)
	}
}
