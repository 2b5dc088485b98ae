package domain

import (
	"strings"
	"testing"
)

func TestParsePCIAddressForms(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0000:41:00.0":      "0000:41:00.0",
		"41:00.0":           "0000:41:00.0",
		"pci_0000_41_00_0":  "0000:41:00.0",
		"PCI_0000_AF_1F_7":  "0000:af:1f.7",
		"  0001:02:1f.7\n":  "0001:02:1f.7",
		"AF:00.1":           "0000:af:00.1",
		"pci_10de_01_00_0":  "10de:01:00.0",
		"0000:00:1f.3":      "0000:00:1f.3",
		"pci_0000_00_1f_3 ": "0000:00:1f.3",
	} {
		a, err := ParsePCIAddressForms(in)
		if err != nil {
			t.Errorf("ParsePCIAddressForms(%q): %v", in, err)
			continue
		}
		if a.String() != want {
			t.Errorf("ParsePCIAddressForms(%q) = %s, want %s", in, a, want)
		}
		// The result is Kohaku's form: the strict parser reads it back.
		if back, err := ParsePCIAddress(a.String()); err != nil || back != a {
			t.Errorf("ParsePCIAddress(%q) = %v, %v; want %v", a.String(), back, err, a)
		}
	}
}

func TestParsePCIAddressFormsRefuses(t *testing.T) {
	t.Parallel()
	for in, problem := range map[string]string{
		"":                   "empty",
		"pci_0000_41_00":     "4 '_'-separated fields",
		"pci_0000_41_00_0_1": "4 '_'-separated fields",
		"41:20.0":            "slot",
		"41:00.8":            "function",
		"1:00.0":             "bus",
		"pci_000_41_00_0":    "domain",
		"0000:41:00":         "no '.'",
		"zz:00.0":            "bus",
		"0:0:41:00.0":        "3 ':'-separated fields",
	} {
		_, err := ParsePCIAddressForms(in)
		if err == nil {
			t.Errorf("ParsePCIAddressForms(%q) accepted it", in)
			continue
		}
		for _, frag := range []string{problem, "pci_DDDD_BB_SS_F", "BB:SS.F"} {
			if !strings.Contains(err.Error(), frag) {
				t.Errorf("ParsePCIAddressForms(%q) error %q does not mention %q", in, err, frag)
			}
		}
	}
}
