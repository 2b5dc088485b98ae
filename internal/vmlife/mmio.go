package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// PassedFunctions lists the host functions a VM will pass through, whether
// or not they are on vfio-pci yet (a binding made in the same apply binds
// them later): every function of each gpus entry's IOMMU group except
// bridges, and each hostdev. Sorted, each once.
func PassedFunctions(ctx context.Context, read PCIDeviceReader, gpus, hostdevs []string) ([]vfio.Address, error) {
	var out []vfio.Address
	add := func(a vfio.Address) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, e := range gpus {
		_, raw := ParseGPUID(e)
		a, err := vfio.ParseAddress(raw)
		if err != nil {
			return nil, &GPUEntryError{Entry: e, Err: err}
		}
		dev, err := read(ctx, a)
		if errors.Is(err, hostapi.ErrNotFound) {
			return nil, &GPUEntryError{Entry: e, Err: fmt.Errorf("the host has no PCI function %s", a)}
		}
		if err != nil {
			return nil, fmt.Errorf("reading PCI function %s: %w", a, err)
		}
		members := dev.GroupMembers
		if !dev.HasIOMMU() {
			members = []vfio.Address{a}
		}
		for _, m := range members {
			md := dev
			if m != a {
				if md, err = read(ctx, m); err != nil {
					return nil, fmt.Errorf("reading %s, of IOMMU group %d of %s: %w", m, dev.Group, a, err)
				}
			}
			if !md.Bridge {
				add(m)
			}
		}
	}
	for _, h := range hostdevs {
		a, err := vfio.ParseAddress(h)
		if err != nil {
			return nil, fmt.Errorf("hostdevs entry %q: %w", h, err)
		}
		add(a)
	}
	slices.SortFunc(out, vfio.Address.Compare)
	return out, nil
}

// MMIOHost is what sizing a VM's 64-bit PCI window needs of its host.
type MMIOHost interface {
	NodeDeviceXML(ctx context.Context, name string) (string, error)
	vfio.HostFiles
}

// SizeMMIO reads the BARs of every function the VM passes through from the
// host's sysfs and sizes the guest's 64-bit PCI window for them. A function
// whose resource file the host does not have is an error: its BARs are
// unknown.
func SizeMMIO(ctx context.Context, h MMIOHost, gpus, hostdevs []string) (vfio.Window, error) {
	addrs, err := PassedFunctions(ctx, HostPCIReader(h), gpus, hostdevs)
	if err != nil || len(addrs) == 0 {
		return vfio.Window{}, err
	}
	fns, err := vfio.ReadFunctions(ctx, h, addrs)
	if err != nil {
		return vfio.Window{}, fmt.Errorf("reading the BARs of %s: %w", vfio.JoinAddresses(addrs), err)
	}
	bars := map[vfio.Address][]vfio.BAR{}
	for _, a := range addrs {
		f, ok := fns[a]
		if !ok {
			return vfio.Window{}, &AbsentFunctionError{Address: a}
		}
		bars[a] = f.BARs
	}
	return vfio.MMIOWindow(bars), nil
}

// AbsentFunctionError is SizeMMIO's answer when a function the VM passes
// through is not on the host: its BARs are unknown, and the domain cannot
// start with it until it is there.
type AbsentFunctionError struct{ Address vfio.Address }

func (e *AbsentFunctionError) Error() string {
	return fmt.Sprintf("the host has no %s, so the BARs of %s are unknown", vfio.ResourcePath(e.Address), e.Address)
}

// MMIOTooSmall says why an explicit window cannot hold the BARs; empty
// when it can (or nothing needs a 64-bit window).
func MMIOTooSmall(gib int, w vfio.Window) string {
	if w.NeedBytes == 0 || gib >= w.MinGiB {
		return ""
	}
	return fmt.Sprintf("%d GiB cannot hold the 64-bit prefetchable BARs passed through (%s): they need %s, "+
		"so at least %d GiB; set %d (a power of two, as the firmware aligns its window, with room "+
		"beside the BARs, which OVMF needs), or leave "+
		"pci_mmio64_gib unset and Kohaku sizes it", gib, w, vfio.HumanBytes(w.NeedBytes), w.MinGiB, w.GiB)
}
