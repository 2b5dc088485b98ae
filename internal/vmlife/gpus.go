package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// GPUGroups maps the canonical PCI address of a gpus entry to the functions
// passed through for it, sorted by address, the entry's own included.
type GPUGroups map[string][]string

// PCIDeviceReader reads one PCI function's node device; a function the host
// does not have yields an error wrapping hostapi.ErrNotFound.
type PCIDeviceReader func(ctx context.Context, a vfio.Address) (*vfio.Device, error)

// HostPCIReader reads PCI functions through a host's node devices.
func HostPCIReader(h interface {
	NodeDeviceXML(ctx context.Context, name string) (string, error)
}) PCIDeviceReader {
	return func(ctx context.Context, a vfio.Address) (*vfio.Device, error) {
		doc, err := h.NodeDeviceXML(ctx, vfio.NodeDeviceName(a))
		if err != nil {
			return nil, err
		}
		return vfio.ParseDevice(doc)
	}
}

// GPUEntryError is a gpus entry that cannot be passed through.
type GPUEntryError struct {
	Entry string // as written in gpus
	Err   error
}

func (e *GPUEntryError) Error() string { return fmt.Sprintf("gpus entry %q: %v", e.Entry, e.Err) }
func (e *GPUEntryError) Unwrap() error { return e.Err }

// ParseGPUID splits a kohaku_gpu_binding id, "<pci address>" or
// "<host>/<pci address>".
func ParseGPUID(id string) (host, address string) {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		return id[:i], id[i+1:]
	}
	return "", id
}

// CanonicalPCI returns the canonical form of an address, or s when it does
// not parse (validation reports it).
func CanonicalPCI(s string) string {
	if a, err := domain.ParsePCIAddress(s); err == nil {
		return a.String()
	}
	return s
}

func driverOrNone(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}

// ExpandGPUs turns each gpus entry (`<address>` or `<host>/<address>`) into
// the functions of its IOMMU group that are on vfio-pci: what a
// kohaku_gpu_binding moved there. PCI bridges stay out (a binding leaves them
// on their own driver), as do members on another driver, which are reported as
// warnings. The entry's own function must be on vfio-pci. Each function is read
// once: the entry's node device names the group, then one read per other member.
func ExpandGPUs(ctx context.Context, entries []string, read PCIDeviceReader) (GPUGroups, []string, error) {
	groups := GPUGroups{}
	var warnings []string
	seen := map[vfio.Address]*vfio.Device{}
	get := func(a vfio.Address) (*vfio.Device, error) {
		if d, ok := seen[a]; ok {
			return d, nil
		}
		d, err := read(ctx, a)
		if err != nil {
			return nil, err
		}
		seen[a] = d
		return d, nil
	}
	sorted := slices.Clone(entries)
	slices.Sort(sorted)
	for _, e := range sorted {
		_, raw := ParseGPUID(e)
		a, err := vfio.ParseAddress(raw)
		if err != nil {
			return nil, nil, &GPUEntryError{Entry: e, Err: err}
		}
		dev, err := get(a)
		switch {
		case errors.Is(err, hostapi.ErrNotFound):
			return nil, nil, &GPUEntryError{Entry: e, Err: fmt.Errorf("the host has no PCI function %s. gpus "+
				"takes the id of a kohaku_gpu_binding, which binds the device and its IOMMU group to vfio-pci; "+
				"list the host's devices with the kohaku_pci_devices data source", a)}
		case err != nil:
			return nil, nil, &GPUEntryError{Entry: e, Err: fmt.Errorf("reading PCI function %s: %w", a, err)}
		}
		if dev.Driver != vfio.DriverVFIO {
			return nil, nil, &GPUEntryError{Entry: e, Err: fmt.Errorf("%s is on %s, not vfio-pci. Bind it with "+
				"kohaku_gpu_binding first and pass the binding's id: gpus = [kohaku_gpu_binding.<name>.id]", vfio.Describe(dev), driverOrNone(dev.Driver))}
		}
		members := dev.GroupMembers
		if !dev.HasIOMMU() {
			members = []vfio.Address{a}
		}
		var fns []string
		for _, m := range members {
			md := dev
			if m != a {
				if md, err = get(m); err != nil {
					if errors.Is(err, hostapi.ErrNotFound) {
						return nil, nil, &GPUEntryError{Entry: e, Err: fmt.Errorf("IOMMU group %d of %s lists "+
							"%s, which libvirt does not show as a PCI node device; check the host with `ls "+
							"/sys/kernel/iommu_groups/%d/devices` and retry", dev.Group, a, m, dev.Group)}
					}
					return nil, nil, &GPUEntryError{Entry: e, Err: fmt.Errorf("reading %s, of IOMMU group %d of %s: %w", m, dev.Group, a, err)}
				}
			}
			switch {
			case md.Bridge:
				continue
			case md.Driver != vfio.DriverVFIO:
				if md.Driver != "" {
					warnings = append(warnings, fmt.Sprintf("%s is in IOMMU group %d of %s (gpus entry %q) but "+
						"on %s, not vfio-pci, so it is not passed through; the VM cannot start until the whole "+
						"group is on vfio-pci. Apply the kohaku_gpu_binding of %s again to bind it", vfio.Describe(md), dev.Group, a, e, md.Driver, a))
				}
				continue
			}
			fns = append(fns, m.String())
		}
		groups[a.String()] = fns
	}
	return groups, warnings, nil
}

// Hostdevs returns base with every function of the groups added, each
// address once, in address order (the order the domain lists them).
func (g GPUGroups) Hostdevs(base []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(h string) {
		k := CanonicalPCI(h)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, h := range base {
		add(h)
	}
	for _, fns := range g {
		for _, h := range fns {
			add(h)
		}
	}
	return sortPCI(out)
}

func sortPCI(addrs []string) []string {
	slices.SortStableFunc(addrs, func(x, y string) int {
		a, errA := domain.ParsePCIAddress(x)
		b, errB := domain.ParsePCIAddress(y)
		if errA != nil || errB != nil {
			return strings.Compare(x, y)
		}
		return a.Compare(b)
	})
	return addrs
}

// Members returns the functions recorded for a gpus entry; without a record
// (state from before expansion, a lost private state) the entry's own function.
func (g GPUGroups) Members(entry string) []string {
	_, raw := ParseGPUID(entry)
	addr := CanonicalPCI(raw)
	fns := g[addr]
	if !slices.Contains(fns, addr) {
		fns = append(slices.Clone(fns), addr)
	}
	return fns
}

// Merged returns g with the entries of newer replacing its own.
func (g GPUGroups) Merged(newer GPUGroups) GPUGroups {
	out := GPUGroups{}
	for k, v := range g {
		out[k] = v
	}
	for k, v := range newer {
		out[k] = v
	}
	return out
}
