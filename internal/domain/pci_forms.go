package domain

import (
	"errors"
	"fmt"
	"strings"
)

// ParsePCIAddressForms parses a PCI function address in any of the forms a
// user meets: DDDD:BB:SS.F (lspci -D, sysfs, Kohaku's own form), BB:SS.F
// (lspci without -D; domain 0000) and libvirt's node device name
// pci_DDDD_BB_SS_F (virsh nodedev-list). Surrounding blanks are ignored and
// hex digits may be of either case. Every form is checked by ParsePCIAddress,
// so the fields' widths and limits are the same in all of them.
func ParsePCIAddressForms(s string) (PCIAddress, error) {
	fail := func(problem string) (PCIAddress, error) {
		return PCIAddress{}, fmt.Errorf("invalid PCI address %q: %s; want DDDD:BB:SS.F, BB:SS.F or "+
			"pci_DDDD_BB_SS_F in hex, for example 0000:41:00.0, 41:00.0 or pci_0000_41_00_0", s, problem)
	}
	text := strings.TrimSpace(s)
	canonical := text
	switch {
	case strings.HasPrefix(strings.ToLower(text), "pci_"):
		fields := strings.Split(text[len("pci_"):], "_")
		if len(fields) != 4 {
			return fail(fmt.Sprintf("a node device name has 4 '_'-separated fields after pci_, got %d", len(fields)))
		}
		canonical = fmt.Sprintf("%s:%s:%s.%s", fields[0], fields[1], fields[2], fields[3])
	case strings.Count(text, ":") == 1:
		canonical = "0000:" + text
	}
	a, err := ParsePCIAddress(canonical)
	if pe := (*PCIAddressError)(nil); errors.As(err, &pe) {
		return fail(pe.Problem)
	}
	return a, err
}
