package vfio

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The flag bits of a sysfs resource line (include/linux/ioport.h).
const (
	ioresourceIO       = 0x00000100
	ioresourceMem      = 0x00000200
	ioresourcePrefetch = 0x00002000
	ioresourceMem64    = 0x00100000
)

// BAR is one base address register of a PCI function as the kernel lists it
// in the function's sysfs resource file, with the address the host assigned.
type BAR struct {
	// Index is the BAR's number, 0-5. A 64-bit BAR takes two registers;
	// the second one's line is empty, so a card's BARs are 0, 1 and 3, say.
	Index int
	// Start is the host address the region is mapped at.
	Start uint64
	// Size is the region's size in bytes (end - start + 1).
	Size uint64
	// IO is set for an I/O-port region; Is64 and Prefetchable for memory.
	IO           bool
	Is64         bool
	Prefetchable bool
}

// NumBARs is how many base address registers a PCI function has; the
// resource file's later lines are its expansion ROM, SR-IOV and bridge windows.
const NumBARs = 6

// ParseResource reads a function's sysfs resource file
// (/sys/bus/pci/devices/DDDD:BB:SS.F/resource: "start end flags" in hex, one
// line per resource) and returns its BARs that the host has sized, in order.
// Lines past the sixth (the ROM, SR-IOV and bridge windows) are ignored.
func ParseResource(data []byte) ([]BAR, error) {
	var out []BAR
	sc := bufio.NewScanner(bytes.NewReader(data))
	for i := 0; sc.Scan() && i < NumBARs; i++ {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("resource line %d: want \"start end flags\", got %q", i+1, sc.Text())
		}
		var v [3]uint64
		for j, s := range f {
			n, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("resource line %d: %q is not a hex number", i+1, s)
			}
			v[j] = n
		}
		start, end, flags := v[0], v[1], v[2]
		if flags&(ioresourceMem|ioresourceIO) == 0 || end < start || (start == 0 && end == 0) {
			continue // unused, or the upper half of a 64-bit BAR
		}
		out = append(out, BAR{
			Index:        i,
			Start:        start,
			Size:         end - start + 1,
			IO:           flags&ioresourceIO != 0,
			Is64:         flags&ioresourceMem64 != 0,
			Prefetchable: flags&ioresourcePrefetch != 0,
		})
	}
	return out, sc.Err()
}

// ParseResetMethod reads a function's sysfs reset_method file ("flr bus",
// one line): the ways the kernel can reset the function, in the order it
// tries them. Empty when it can reset it in none.
func ParseResetMethod(data []byte) []string { return strings.Fields(string(data)) }

// ResetFLR is the function-level reset, the one that resets a function alone
// and reliably; "pm" (D3hot to D0) and "bus" (the secondary bus of the
// bridge above) are weaker or reset its neighbours too.
const ResetFLR = "flr"

// Sysfs paths of a PCI function.
func sysfsDir(a Address) string { return "/sys/bus/pci/devices/" + a.String() }

// ResourcePath is the function's sysfs resource file.
func ResourcePath(a Address) string { return sysfsDir(a) + "/resource" }

// ResetMethodPath is the function's sysfs reset_method file (Linux 5.15 and
// later; absent when the kernel has no way to reset the function).
func ResetMethodPath(a Address) string { return sysfsDir(a) + "/reset_method" }

// HostFiles reads several small files of a host at once. Files that do not
// exist are left out of the result; an error means none could be read.
type HostFiles interface {
	ReadHostFiles(ctx context.Context, paths []string, limit int64) (map[string][]byte, error)
}

// Function is what a host's sysfs says of one PCI function beyond libvirt's
// node device: its BARs and how it can be reset.
type Function struct {
	BARs []BAR
	// ResetMethods is reset_method's list; empty when the function has none
	// (the file is absent: no reset method, or a kernel older than 5.15).
	ResetMethods []string
}

// HasFLR reports whether the kernel can reset the function on its own.
func (f Function) HasFLR() bool { return slices.Contains(f.ResetMethods, ResetFLR) }

// ReadFunctions reads the BARs and reset methods of the functions through
// one HostFiles call. A function whose resource file is missing is left out
// (it is gone from the host).
func ReadFunctions(ctx context.Context, h HostFiles, addrs []Address) (map[Address]Function, error) {
	paths := make([]string, 0, 2*len(addrs))
	for _, a := range addrs {
		paths = append(paths, ResourcePath(a), ResetMethodPath(a))
	}
	files, err := h.ReadHostFiles(ctx, paths, 4096)
	if err != nil {
		return nil, err
	}
	out := make(map[Address]Function, len(addrs))
	for _, a := range addrs {
		res, ok := files[ResourcePath(a)]
		if !ok {
			continue
		}
		bars, err := ParseResource(res)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ResourcePath(a), err)
		}
		out[a] = Function{BARs: bars, ResetMethods: ParseResetMethod(files[ResetMethodPath(a)])}
	}
	return out, nil
}
