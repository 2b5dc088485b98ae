package seed

import "testing"

func TestDeriveMAC(t *testing.T) {
	t.Parallel()
	// Expected values from Python, as KohakuRiver computes them:
	// h = hashlib.sha3_224(str(x).encode()).digest()
	// f"52:54:00:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}"
	for in, want := range map[string]string{
		"12345":           "52:54:00:94:cc:69",
		"kohaku-vm-12345": "52:54:00:09:0d:c7",
		"":                "52:54:00:6b:4e:03",
		"gpu-vm-1":        "52:54:00:88:88:57",
		"gpu-vm-1/1":      "52:54:00:84:1c:66",
		"typical":         "52:54:00:7e:64:f6",
	} {
		if got := DeriveMAC(in); got != want {
			t.Errorf("DeriveMAC(%q) = %s, want %s", in, got, want)
		}
	}
	if DefaultMAC("gpu-vm-1", 0) != DeriveMAC("gpu-vm-1") || DefaultMAC("gpu-vm-1", 1) != DeriveMAC("gpu-vm-1/1") {
		t.Error("DefaultMAC does not follow DeriveMAC(name) / DeriveMAC(name/index)")
	}
}

func TestNormalizeMAC(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"52:54:00:AB:cd:EF", "52:54:00:ab:cd:ef", true},
		{"52-54-00-ab-cd-ef", "52:54:00:ab:cd:ef", true},
		{"02:00:00:00:00:01", "02:00:00:00:00:01", true},
		{"5254.00ab.cdef", "", false},
		{"52:54:00:ab:cd", "", false},
		{"52:54:00:ab:cd:ef:01", "", false},
		{"52:54:00:ab:cd:eg", "", false},
		{"01:00:5e:00:00:01", "", false},
		{"ff:ff:ff:ff:ff:ff", "", false},
		{"00:00:00:00:00:00", "", false},
		{"52:54:00:ab:cd:e", "", false},
	}
	for _, tc := range cases {
		got, err := normalizeMAC(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("normalizeMAC(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
