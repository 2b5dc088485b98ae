package image

import (
	"strings"
	"testing"
)

func TestParseDigest(t *testing.T) {
	h64 := strings.Repeat("ab", 32)
	h128 := strings.Repeat("0f", 64)
	good := []struct {
		in   string
		want Digest
	}{
		{"sha256:" + h64, Digest{SHA256, h64}},
		{"SHA256:" + strings.ToUpper(h64), Digest{SHA256, h64}},
		{"  sha512:" + h128 + "\n", Digest{SHA512, h128}},
	}
	for _, c := range good {
		got, err := ParseDigest(c.in)
		if err != nil {
			t.Errorf("ParseDigest(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseDigest(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if got.String() != c.want.Algorithm+":"+c.want.Hex {
			t.Errorf("String() = %q", got.String())
		}
	}
	bad := []struct{ in, want string }{
		{h64, "checksum must look like sha256:<64 hex digits> or sha512:<128 hex digits>, got \"" + h64},
		{"md5:d41d8cd98f00b204e9800998ecf8427e", "checksum must look like sha256:<64 hex digits> or sha512"},
		{"sha256:abc", "checksum must look like sha256:<64 hex digits>, got \"sha256:abc\" (3 hex digits)"},
		{"sha512:" + h64, "checksum must look like sha512:<128 hex digits>, got"},
		{"sha256:" + strings.Repeat("zz", 32), "(not hexadecimal)"},
		{"", "checksum must look like"},
	}
	for _, c := range bad {
		_, err := ParseDigest(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseDigest(%q) error = %v, want it to contain %q", c.in, err, c.want)
		}
	}
	if (Digest{}).String() != "" {
		t.Error("zero Digest should print as empty")
	}
}

func TestDigestValidate(t *testing.T) {
	if err := (Digest{Algorithm: "md5", Hex: "00"}).validate(); err == nil {
		t.Error("md5 accepted")
	}
	if err := (Digest{Algorithm: SHA256, Hex: strings.Repeat("A", 64)}).validate(); err == nil {
		t.Error("uppercase hex accepted by validate (Fetch lowercases first)")
	}
	if err := (Digest{Algorithm: SHA256, Hex: strings.Repeat("a", 64)}).validate(); err != nil {
		t.Error(err)
	}
}
