package image

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

// Digest algorithms understood by this package.
const (
	// SHA256 is the "sha256" digest algorithm (64 hex digits).
	SHA256 = "sha256"
	// SHA512 is the "sha512" digest algorithm (128 hex digits).
	SHA512 = "sha512"
)

// Digest is a digest algorithm and the digest in lowercase hex, written
// "sha256:<64 hex>" or "sha512:<128 hex>".
type Digest struct {
	// Algorithm is SHA256 or SHA512.
	Algorithm string
	// Hex is the digest in lowercase hexadecimal.
	Hex string
}

// String returns the digest as "<algorithm>:<hex>", or "" for the zero Digest.
func (d Digest) String() string {
	if d.Algorithm == "" && d.Hex == "" {
		return ""
	}
	return d.Algorithm + ":" + d.Hex
}

// IsZero reports whether d is the zero Digest.
func (d Digest) IsZero() bool { return d == Digest{} }

// hexLen returns the number of hex digits of the algorithm, or 0 when the
// algorithm is unknown.
func hexLen(alg string) int {
	switch alg {
	case SHA256:
		return 2 * sha256.Size
	case SHA512:
		return 2 * sha512.Size
	}
	return 0
}

// newHash returns a fresh hash for the algorithm; unknown algorithms get
// SHA-256 (callers validate first).
func (d Digest) newHash() hash.Hash {
	if d.Algorithm == SHA512 {
		return sha512.New()
	}
	return sha256.New()
}

// key is the digest as used in cache entry names: "<algorithm>-<hex>".
func (d Digest) key() string { return d.Algorithm + "-" + d.Hex }

// validate checks that d is a well-formed digest.
func (d Digest) validate() error {
	n := hexLen(d.Algorithm)
	if n == 0 {
		return fmt.Errorf("unsupported checksum algorithm %q (use sha256 or sha512)", d.Algorithm)
	}
	if len(d.Hex) != n || !isLowerHex(d.Hex) {
		return fmt.Errorf("checksum must look like %s:<%d hex digits>, got %s", d.Algorithm, n, quoteShort(d.String()))
	}
	return nil
}

// ParseDigest parses "sha256:<64 hex digits>" or "sha512:<128 hex digits>".
// The algorithm name and hex digits may be in either case and surrounding
// space is ignored; the result holds them in lowercase.
func ParseDigest(s string) (Digest, error) {
	t := strings.TrimSpace(s)
	alg, hx, ok := strings.Cut(t, ":")
	alg = strings.ToLower(strings.TrimSpace(alg))
	hx = strings.ToLower(strings.TrimSpace(hx))
	if !ok || hexLen(alg) == 0 {
		return Digest{}, fmt.Errorf("checksum must look like sha256:<64 hex digits> or sha512:<128 hex digits>, got %s", quoteShort(s))
	}
	n := hexLen(alg)
	if !isLowerHex(hx) {
		return Digest{}, fmt.Errorf("checksum must look like %s:<%d hex digits>, got %s (not hexadecimal)", alg, n, quoteShort(s))
	}
	if len(hx) != n {
		return Digest{}, fmt.Errorf("checksum must look like %s:<%d hex digits>, got %s (%d hex digits)", alg, n, quoteShort(s), len(hx))
	}
	return Digest{Algorithm: alg, Hex: hx}, nil
}

// digestOf returns the digest held by h, a hash for alg.
func digestOf(alg string, h hash.Hash) Digest {
	return Digest{Algorithm: alg, Hex: hex.EncodeToString(h.Sum(nil))}
}

// isLowerHex reports whether s is non-empty and made of 0-9a-f only.
func isLowerHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// quoteShort quotes s for an error message, shortening very long values.
func quoteShort(s string) string {
	const maxLen = 160
	if len(s) > maxLen {
		return fmt.Sprintf("%q... (%d bytes)", s[:maxLen], len(s))
	}
	return fmt.Sprintf("%q", s)
}
