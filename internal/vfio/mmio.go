package vfio

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// DefaultMMIO64GiB is the 64-bit PCI window QEMU's q35 machine
// (pci-hole64-size) and OVMF open when nothing sizes them: 32 GiB.
const DefaultMMIO64GiB = 32

// HeadroomGiB is the least room the window Kohaku sets leaves beside the
// BARs it holds. OVMF places other 64-bit windows in the same aperture
// (the prefetchable reservations of the guest's hotplug root ports): with
// a 256 GiB BAR and nothing else 64-bit, OVMF 2022.11 left the BAR
// unassigned in a window of exactly 256 GiB and assigned it in 512 GiB,
// while SeaBIOS assigned it either way. Rounding up to a power of two
// already leaves room unless the span is within this of one.
const HeadroomGiB = 1

// bridgeGranule is the granularity of a PCI bridge's prefetchable window:
// what sits behind a bridge takes at least this much.
const bridgeGranule = 1 << 20

// Window is the 64-bit PCI MMIO window a guest needs for the functions
// passed through to it.
type Window struct {
	// NeedBytes is the span the firmware fills: each function's window,
	// aligned as the firmware aligns it, one after the other.
	NeedBytes uint64
	// MinGiB is NeedBytes in whole GiB, rounded up: the smallest window
	// that holds them.
	MinGiB int
	// GiB is the size Kohaku sets: MinGiB plus HeadroomGiB, rounded up to
	// a power of two, as the firmware aligns its aperture to one.
	GiB int
	// Functions are the functions with 64-bit prefetchable BARs, largest
	// alignment first, each with its window; empty when none has one.
	Functions []FunctionWindow
}

// FunctionWindow is the part of the guest's window one function takes.
type FunctionWindow struct {
	Address Address
	// Size is the function's 64-bit prefetchable BARs, each rounded up to a
	// power of two and packed largest first (so each is aligned to its size),
	// rounded up to the bridge window's 1 MiB granule.
	Size uint64
	// Align is its largest BAR: a bridge window is aligned to it.
	Align uint64
}

// Fits reports whether the firmware's default window holds the BARs.
func (w Window) Fits() bool { return w.GiB <= DefaultMMIO64GiB }

// String explains the sum, e.g. "0000:c1:00.0: 128 GiB + 32 MiB".
func (w Window) String() string {
	parts := make([]string, 0, len(w.Functions))
	for _, f := range w.Functions {
		parts = append(parts, fmt.Sprintf("%s: %s", f.Address, HumanBytes(f.Size)))
	}
	return strings.Join(parts, "; ")
}

// MMIOWindow sizes the guest's 64-bit window for the BARs of the functions
// passed through. Only 64-bit prefetchable BARs go there: in a guest every
// passed-through function sits behind a PCIe root port, whose
// non-prefetchable window is 32-bit, so the firmware places 64-bit
// non-prefetchable BARs below 4 GiB. Each function's BARs form one bridge
// window aligned to its largest BAR; the windows are placed largest
// alignment first, each aligned, and the span is the window needed.
func MMIOWindow(fns map[Address][]BAR) Window {
	var w Window
	for a, bars := range fns {
		var sizes []uint64
		for _, b := range bars {
			if b.Is64 && b.Prefetchable && !b.IO && b.Size > 0 {
				sizes = append(sizes, pow2(b.Size))
			}
		}
		if len(sizes) == 0 {
			continue
		}
		slices.Sort(sizes)
		slices.Reverse(sizes)
		var size uint64
		for _, s := range sizes {
			size += s // largest first: each is aligned to its own size
		}
		size = alignUp(size, bridgeGranule)
		w.Functions = append(w.Functions, FunctionWindow{Address: a, Size: size, Align: max(sizes[0], bridgeGranule)})
	}
	slices.SortFunc(w.Functions, func(x, y FunctionWindow) int {
		if x.Align != y.Align {
			if x.Align > y.Align {
				return -1
			}
			return 1
		}
		return x.Address.Compare(y.Address)
	})
	for _, f := range w.Functions {
		w.NeedBytes = alignUp(w.NeedBytes, f.Align) + f.Size
	}
	if w.NeedBytes > 0 {
		w.MinGiB = int((w.NeedBytes + 1<<30 - 1) >> 30)
		w.GiB = int(pow2(uint64(w.MinGiB + HeadroomGiB)))
	}
	return w
}

// pow2 rounds n up to a power of two.
func pow2(n uint64) uint64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(n-1)
}

func alignUp(n, align uint64) uint64 { return (n + align - 1) / align * align }

// HumanBytes writes a size as lspci does: "128 GiB", "32 MiB", "128 GiB + 32 MiB".
func HumanBytes(n uint64) string {
	units := []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}}
	var parts []string
	for _, u := range units {
		if q := n >> u.shift; q > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", q, u.name))
			n -= q << u.shift
		}
	}
	if n > 0 || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%d B", n))
	}
	return strings.Join(parts, " + ")
}
