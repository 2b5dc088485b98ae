package virt

import (
	"strings"
	"testing"
)

func TestUUIDRoundTrip(t *testing.T) {
	t.Parallel()
	const s = "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
	u, err := ParseUUID(strings.ToUpper(s))
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatUUID(u); got != s {
		t.Errorf("FormatUUID(ParseUUID(%q)) = %q", s, got)
	}
	for _, bad := range []string{"", "web-1", "6f1c2a8e3b4d4e5f8a9b0c1d2e3f4a5b", "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5g"} {
		if IsUUID(bad) {
			t.Errorf("IsUUID(%q) = true", bad)
		}
	}
}
