package phonehome

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// tokenBytes is the entropy of a token from NewToken: 256 bits.
const tokenBytes = 32

// Token length limits accepted by Register and the endpoint, in characters of
// the URL-safe base64 alphabet. 22 characters carry 132 bits.
const (
	minTokenLen = 22
	maxTokenLen = 128
)

// NewToken returns an unguessable token for one seed: 256 bits from
// crypto/rand, URL-safe base64 without padding (43 characters).
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("phonehome: reading random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// TokenID is a short, non-secret name for a token, safe to log: the first 8
// hex digits of its SHA-256.
func TokenID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:4])
}

// tokenKey is what waiters are indexed by. Looking a presented token up by its
// digest means the map comparison runs on bytes an attacker cannot steer
// towards a registered token, so its timing says nothing about the secret.
func tokenKey(token string) [sha256.Size]byte {
	return sha256.Sum256([]byte(token))
}

// validToken reports whether s has the shape of a token: 22 to 128 characters
// of the URL-safe base64 alphabet (so it needs no escaping in a URL path).
func validToken(s string) bool {
	if len(s) < minTokenLen || len(s) > maxTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
