package phonehome

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// SignatureHeader carries a signed report's HMAC: "sha256=" and the hex
// HMAC-SHA256 of the request body under the seed's token.
const SignatureHeader = "X-Kohaku-Signature"

// ReportID is the public name under which a signed report is posted (the
// last step of its URL): a one-way digest of the token, shaped like one.
// The token itself never travels, so someone who sees the traffic learns
// nothing that lets them sign a report of their own, and a body that is
// not the guest's fails the signature check.
func ReportID(token string) string {
	sum := sha256.Sum256([]byte("kohaku-report-id\x00" + token))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// SignedURL is the URL a reporter posts signed reports to: url with its
// trailing token replaced by ReportID(token). A url that does not end in
// the token is returned unchanged.
func SignedURL(url, token string) string {
	if token == "" || !strings.HasSuffix(url, "/"+token) {
		return url
	}
	return strings.TrimSuffix(url, token) + ReportID(token)
}

// Sign returns the SignatureHeader value for body under token.
func Sign(token string, body []byte) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// validSignature reports whether sig is body's signature under token.
func validSignature(token string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(token, body)), []byte(strings.TrimSpace(sig)))
}
