package phonehome

import (
	"encoding/base64"
	"testing"
)

func TestNewToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		tok := mustToken(t)
		if len(tok) != 43 || !validToken(tok) {
			t.Fatalf("token %q: length %d or alphabet wrong", tok, len(tok))
		}
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) != 32 {
			t.Fatalf("token %q does not decode to 32 bytes: %v", tok, err)
		}
		if seen[tok] {
			t.Fatalf("token %q drawn twice", tok)
		}
		seen[tok] = true
	}
}

func TestValidToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tok  string
		want bool
	}{
		{"AAAAAAAAAAAAAAAAAAAAAA", true},   // 22: the shortest accepted
		{"AAAAAAAAAAAAAAAAAAAAA", false},   // 21
		{"abc-DEF_0123456789xyzXYZ", true}, // the URL-safe alphabet
		{"AAAAAAAAAAAAAAAAAAAAAA=", false}, // padding
		{"AAAAAAAAAAAAAAAAAAAAA+", false},  // standard alphabet
		{"AAAAAAAAAAAAAAAAAAAAA/", false},
		{"AAAAAAAAAAAAAAAAAAAAA%2F", false},
		{string(make([]byte, 129)), false},
		{"", false},
	}
	for _, tc := range tests {
		if got := validToken(tc.tok); got != tc.want {
			t.Errorf("validToken(%q) = %v, want %v", tc.tok, got, tc.want)
		}
	}
	long := make([]byte, maxTokenLen)
	for i := range long {
		long[i] = 'a'
	}
	if !validToken(string(long)) || validToken(string(long)+"a") {
		t.Error("length limit is not maxTokenLen")
	}
}

func TestTokenID(t *testing.T) {
	t.Parallel()
	a, b := mustToken(t), mustToken(t)
	id := TokenID(a)
	if len(id) != 8 || TokenID(a) != id || id == TokenID(b) {
		t.Errorf("TokenID: %q %q", TokenID(a), TokenID(b))
	}
}
