package domain

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// PCIAddress is a host PCI function address, DDDD:BB:SS.F in hex.
type PCIAddress struct {
	Domain   uint16
	Bus      uint8
	Slot     uint8 // 0..0x1f
	Function uint8 // 0..7
}

// String returns the canonical lower-case form, e.g. 0000:01:00.0.
func (a PCIAddress) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Slot, a.Function)
}

// Compare orders addresses by domain, bus, slot, then function.
func (a PCIAddress) Compare(b PCIAddress) int {
	return cmp.Or(
		cmp.Compare(a.Domain, b.Domain),
		cmp.Compare(a.Bus, b.Bus),
		cmp.Compare(a.Slot, b.Slot),
		cmp.Compare(a.Function, b.Function),
	)
}

// PCIAddressError says why a PCI address did not parse.
type PCIAddressError struct {
	Input   string
	Problem string
}

func (e *PCIAddressError) Error() string {
	return fmt.Sprintf("invalid PCI address %q: %s; want DDDD:BB:SS.F in hex, for example 0000:01:00.0", e.Input, e.Problem)
}

// ParsePCIAddress parses DDDD:BB:SS.F (hex, either case): a 4-digit domain,
// 2-digit bus, 2-digit slot up to 1f and a function digit up to 7, as lspci -D
// and sysfs print them.
func ParsePCIAddress(s string) (PCIAddress, error) {
	fail := func(format string, args ...any) (PCIAddress, error) {
		return PCIAddress{}, &PCIAddressError{Input: s, Problem: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return fail("empty")
	}
	dev, fn, ok := strings.Cut(s, ".")
	if !ok {
		return fail("no '.' before the function number")
	}
	parts := strings.Split(dev, ":")
	switch len(parts) {
	case 3:
	case 2:
		return fail("the PCI domain is missing (did you mean 0000:%s?)", s)
	default:
		return fail("want 3 ':'-separated fields before the '.', got %d", len(parts))
	}
	domain, err := hexField(parts[0], 4, 0xffff)
	if err != nil {
		return fail("domain %q: %v", parts[0], err)
	}
	bus, err := hexField(parts[1], 2, 0xff)
	if err != nil {
		return fail("bus %q: %v", parts[1], err)
	}
	slot, err := hexField(parts[2], 2, 0x1f)
	if err != nil {
		return fail("slot %q: %v", parts[2], err)
	}
	function, err := hexField(fn, 1, 7)
	if err != nil {
		return fail("function %q: %v", fn, err)
	}
	return PCIAddress{
		Domain:   uint16(domain),
		Bus:      uint8(bus),
		Slot:     uint8(slot),
		Function: uint8(function),
	}, nil
}

func hexField(s string, digits int, maxValue uint64) (uint64, error) {
	if len(s) != digits {
		return 0, fmt.Errorf("want %d hex digits", digits)
	}
	v, err := strconv.ParseUint(s, 16, 16)
	if err != nil {
		return 0, fmt.Errorf("not hexadecimal")
	}
	if v > maxValue {
		return 0, fmt.Errorf("at most %#x", maxValue)
	}
	return v, nil
}
