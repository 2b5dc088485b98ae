package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// privateGPUGroups is the private-state key under which create and update
// record, per gpus entry, the host functions passed through for it, so that
// Read can attribute them to the entry without asking libvirt again.
const privateGPUGroups = "gpu_groups"

// gpuGroups maps the canonical PCI address of a gpus entry to the functions
// passed through for it, sorted by address, the entry's own included.
type gpuGroups map[string][]string

// pciDeviceReader reads one PCI function's node device; a function the host
// does not have yields an error wrapping virt.ErrNotFound.
type pciDeviceReader func(ctx context.Context, a vfio.Address) (*vfio.Device, error)

func clientPCIReader(c *virt.Client) pciDeviceReader {
	return func(ctx context.Context, a vfio.Address) (*vfio.Device, error) {
		return readPCIDevice(ctx, c, vfio.NodeDeviceName(a))
	}
}

// gpuEntryError is a gpus entry that cannot be passed through.
type gpuEntryError struct {
	Entry string // as written in gpus
	Err   error
}

func (e *gpuEntryError) Error() string { return fmt.Sprintf("gpus entry %q: %v", e.Entry, e.Err) }
func (e *gpuEntryError) Unwrap() error { return e.Err }

// expandGPUs turns each gpus entry (`<address>` or `<host>/<address>`) into
// the functions of its IOMMU group that are on vfio-pci: what a
// kohaku_gpu_binding moved there. PCI bridges stay out (a binding leaves them
// on their own driver), as do members on another driver, which are reported as
// warnings. The entry's own function must be on vfio-pci. Each function is read
// once: the entry's node device names the group, then one read per other member.
func expandGPUs(ctx context.Context, entries []string, read pciDeviceReader) (gpuGroups, []string, error) {
	groups := gpuGroups{}
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
		_, raw := parseGPUID(e)
		a, err := vfio.ParseAddress(raw)
		if err != nil {
			return nil, nil, &gpuEntryError{Entry: e, Err: err}
		}
		dev, err := get(a)
		switch {
		case errors.Is(err, virt.ErrNotFound):
			return nil, nil, &gpuEntryError{Entry: e, Err: fmt.Errorf("the host has no PCI function %s. gpus takes the id of a kohaku_gpu_binding, which binds the device and its IOMMU group to vfio-pci; list the host's devices with the kohaku_pci_devices data source", a)}
		case err != nil:
			return nil, nil, &gpuEntryError{Entry: e, Err: fmt.Errorf("reading PCI function %s: %w", a, err)}
		}
		if dev.Driver != vfio.DriverVFIO {
			return nil, nil, &gpuEntryError{Entry: e, Err: fmt.Errorf("%s is on %s, not vfio-pci. Bind it with kohaku_gpu_binding first and pass the binding's id: gpus = [kohaku_gpu_binding.<name>.id]", vfio.Describe(dev), driverOrNone(dev.Driver))}
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
					if errors.Is(err, virt.ErrNotFound) {
						return nil, nil, &gpuEntryError{Entry: e, Err: fmt.Errorf("IOMMU group %d of %s lists %s, which libvirt does not show as a PCI node device; check the host with `ls /sys/kernel/iommu_groups/%d/devices` and retry", dev.Group, a, m, dev.Group)}
					}
					return nil, nil, &gpuEntryError{Entry: e, Err: fmt.Errorf("reading %s, of IOMMU group %d of %s: %w", m, dev.Group, a, err)}
				}
			}
			switch {
			case md.Bridge:
				continue
			case md.Driver != vfio.DriverVFIO:
				if md.Driver != "" {
					warnings = append(warnings, fmt.Sprintf("%s is in IOMMU group %d of %s (gpus entry %q) but on %s, not vfio-pci, so it is not passed through; the VM cannot start until the whole group is on vfio-pci. Apply the kohaku_gpu_binding of %s again to bind it", vfio.Describe(md), dev.Group, a, e, md.Driver, a))
				}
				continue
			}
			fns = append(fns, m.String())
		}
		groups[a.String()] = fns
	}
	return groups, warnings, nil
}

// hostdevs returns base with every function of the groups added, each
// address once, in address order (the order the domain lists them).
func (g gpuGroups) hostdevs(base []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(h string) {
		k := canonicalPCI(h)
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

// members returns the functions recorded for a gpus entry; without a record
// (state from before expansion, a lost private state) the entry's own function.
func (g gpuGroups) members(entry string) []string {
	_, raw := parseGPUID(entry)
	addr := canonicalPCI(raw)
	fns := g[addr]
	if !slices.Contains(fns, addr) {
		fns = append(slices.Clone(fns), addr)
	}
	return fns
}

// attributeHostdevs splits a domain's hostdevs between gpus and hostdevs, as
// Read reports them: a prior gpus entry stays when all the functions recorded
// for it are in the domain (a missing one shows as a change, which apply
// restores), and those functions are not reported again as hostdevs unless
// hostdevs names them too. Everything else is a hostdev, in the prior
// spelling when the prior hostdevs name it.
func attributeHostdevs(observed, priorGPUs, priorRaw []string, groups gpuGroups) (gpus, raw []string) {
	have := map[string]bool{}
	for _, h := range observed {
		have[canonicalPCI(h)] = true
	}
	claimed := map[string]bool{}
	for _, g := range priorGPUs {
		fns := groups.members(g)
		all := true
		for _, f := range fns {
			all = all && have[f]
		}
		if !all {
			continue
		}
		gpus = append(gpus, g)
		for _, f := range fns {
			claimed[f] = true
		}
	}
	rawByAddr := map[string]string{}
	for _, h := range priorRaw {
		rawByAddr[canonicalPCI(h)] = h
	}
	done := map[string]bool{}
	for _, h := range observed {
		k := canonicalPCI(h)
		if done[k] {
			continue
		}
		done[k] = true
		switch {
		case rawByAddr[k] != "":
			raw = append(raw, rawByAddr[k])
		case !claimed[k]:
			raw = append(raw, h)
		}
	}
	return gpus, raw
}

// gpuGroupsFromPrivate reads the record create and update leave.
func gpuGroupsFromPrivate(b []byte) gpuGroups {
	g := gpuGroups{}
	if len(b) > 0 {
		_ = json.Unmarshal(b, &g) // a record that does not parse is no record
	}
	return g
}

// privateBytes is the record to store; nil (which removes the key) when empty.
func (g gpuGroups) privateBytes() []byte {
	if len(g) == 0 {
		return nil
	}
	b, _ := json.Marshal(g)
	return b
}

// merged returns g with the entries of newer replacing its own.
func (g gpuGroups) merged(newer gpuGroups) gpuGroups {
	out := gpuGroups{}
	for k, v := range g {
		out[k] = v
	}
	for k, v := range newer {
		out[k] = v
	}
	return out
}

// expandPlanGPUs reads the plan's gpus entries' groups from the host and
// reports a refusal on the entry it is about. ok is false after an error.
func expandPlanGPUs(ctx context.Context, c *virt.Client, m *vmModel, summary, nothing string, diags *diag.Diagnostics) (gpuGroups, bool) {
	entries, _ := stringSet(m.GPUs)
	if len(entries) == 0 {
		return gpuGroups{}, true
	}
	groups, warnings, err := expandGPUs(ctx, entries, clientPCIReader(c))
	for _, w := range warnings {
		diags.AddAttributeWarning(path.Root("gpus"), summary+": part of an IOMMU group is not on vfio-pci", w+".")
	}
	if err != nil {
		var ee *gpuEntryError
		p := path.Root("gpus")
		if errors.As(err, &ee) {
			p = p.AtSetValue(types.StringValue(ee.Entry))
		}
		diags.AddAttributeError(p, summary+" failed at step \"read the GPUs' IOMMU groups\"", err.Error()+"\n\n"+nothing)
		return nil, false
	}
	return groups, true
}
