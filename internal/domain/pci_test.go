package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParsePCIAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    PCIAddress
		wantStr string
		problem string // substring of the error; empty when the address is valid
	}{
		{in: "0000:01:00.0", want: PCIAddress{0, 1, 0, 0}, wantStr: "0000:01:00.0"},
		{in: "0000:41:00.1", want: PCIAddress{0, 0x41, 0, 1}, wantStr: "0000:41:00.1"},
		{in: "FFFF:FF:1F.7", want: PCIAddress{0xffff, 0xff, 0x1f, 7}, wantStr: "ffff:ff:1f.7"},
		{in: "000a:0B:1c.3", want: PCIAddress{0xa, 0xb, 0x1c, 3}, wantStr: "000a:0b:1c.3"},
		{in: "", problem: "empty"},
		{in: "01:00.0", problem: "did you mean 0000:01:00.0?"},
		{in: "0000:01:00", problem: "no '.'"},
		{in: "0000:01:00:0", problem: "no '.'"},
		{in: "0:0000:01:00.0", problem: "3 ':'-separated fields"},
		{in: "000:01:00.0", problem: `domain "000": want 4 hex digits`},
		{in: "0000:1:00.0", problem: `bus "1": want 2 hex digits`},
		{in: "0000:01:0.0", problem: `slot "0": want 2 hex digits`},
		{in: "0000:01:20.0", problem: `slot "20": at most 0x1f`},
		{in: "0000:01:00.8", problem: `function "8": at most 0x7`},
		{in: "0000:01:00.10", problem: `function "10": want 1 hex digits`},
		{in: "0000:0g:00.0", problem: `bus "0g": not hexadecimal`},
		{in: "0000:+1:00.0", problem: `bus "+1": not hexadecimal`},
		{in: "pci_0000_01_00_0", problem: "no '.'"},
		{in: " 0000:01:00.0", problem: "want 4 hex digits"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePCIAddress(tc.in)
			if tc.problem == "" {
				if err != nil || got != tc.want || got.String() != tc.wantStr {
					t.Fatalf("ParsePCIAddress(%q) = %v (%s), %v; want %v (%s)", tc.in, got, got, err, tc.want, tc.wantStr)
				}
				return
			}
			var pe *PCIAddressError
			if !errors.As(err, &pe) {
				t.Fatalf("ParsePCIAddress(%q) error = %v, want a *PCIAddressError", tc.in, err)
			}
			if pe.Input != tc.in || !strings.Contains(err.Error(), tc.problem) || !strings.Contains(err.Error(), "for example 0000:01:00.0") {
				t.Errorf("error %q: want input %q, %q and an example", err, tc.in, tc.problem)
			}
		})
	}
}

func TestPCIAddressCompare(t *testing.T) {
	t.Parallel()
	sorted := []PCIAddress{{0, 0, 0, 0}, {0, 0, 0, 7}, {0, 0, 1, 0}, {0, 1, 0, 0}, {0, 0xff, 0x1f, 7}, {1, 0, 0, 0}}
	shuffled := []PCIAddress{sorted[4], sorted[1], sorted[5], sorted[0], sorted[3], sorted[2]}
	slices.SortFunc(shuffled, PCIAddress.Compare)
	if !slices.Equal(shuffled, sorted) {
		t.Errorf("sorted = %v, want %v", shuffled, sorted)
	}
	if sorted[2].Compare(sorted[2]) != 0 {
		t.Error("an address does not compare equal to itself")
	}
}

func TestSortedHostdevs(t *testing.T) {
	t.Parallel()
	got := sortedHostdevs([]string{"0000:82:00.1", "bogus", "0000:03:00.0", "0000:82:00.0", "0000:0A:00.0"})
	want := []string{"0000:03:00.0", "0000:0a:00.0", "0000:82:00.0", "0000:82:00.1", "bogus"}
	if !slices.Equal(got, want) {
		t.Errorf("sortedHostdevs = %q, want %q", got, want)
	}
	if sortedHostdevs(nil) != nil {
		t.Error("sortedHostdevs(nil) is not nil")
	}
}
