// Package capacity reads a host's capacity for placement: its NUMA nodes,
// its GPUs with what holds each (claims, domains' hostdevs, host
// processes, quarantine) and the CPUs other VMs have pinned, through a
// small host interface that internal/virt's Client satisfies. A Reader is
// the placement.Source a planner reads each host through once per apply.
package capacity

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/mdev"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Host is what reading one host's capacity needs of its connection.
type Host interface {
	claim.Host
	NUMANodes(ctx context.Context) ([]hostapi.NUMANode, error)
	// PCINodeDevices returns libvirt's XML of every PCI node device.
	PCINodeDevices(ctx context.Context) ([]string, error)
}

// Reader reads hosts' capacity by name.
type Reader struct {
	// Host returns the connection of a host of the fleet.
	Host func(name string) (Host, error)
	// Files, when set, reads a host's sysfs files, for the BARs that size
	// its GPUs' memory; nil or a failure leaves the memory unknown (0).
	Files func(name string) vfio.HostFiles
	// Held, when set, lists the processes on the host that hold any of
	// fns: every function of the GPUs' IOMMU groups that is on a host
	// driver (not vfio-pci), with that driver. nil counts none.
	Held func(ctx context.Context, name string, fns []holders.Function) ([]holders.Holder, error)
	// Quarantined, when set, names the GPUs held back until an operator
	// clears them, with why.
	Quarantined func(ctx context.Context, name string) (map[vfio.Address]string, error)
	// StaleAfter is the claims' stale limit (claim.DefaultStaleAfter when 0).
	StaleAfter time.Duration
}

var (
	_ placement.Source = (*Reader)(nil)
)

// ReadHost reads one host: NUMA nodes, PCI node devices (GPUs and the mdev
// types they offer, from the same XML), claims, and domains (hostdevs and
// one-to-one pinned CPUs), then the optional BARs, holders and quarantine.
// A node whose driver does not report free memory counts all its memory as
// free: libvirt will refuse at start what does not fit.
func (r *Reader) ReadHost(ctx context.Context, name string) (*placement.Host, error) {
	h, err := r.Host(name)
	if err != nil {
		return nil, err
	}
	nodes, err := h.NUMANodes(ctx)
	if err != nil && !hostapi.Unsupported(err) {
		return nil, fmt.Errorf("reading NUMA nodes: %w", err)
	}
	docs, err := h.PCINodeDevices(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	inv, err := vfio.ParseInventory(docs)
	if err != nil {
		return nil, err
	}
	cl := &claim.Claimer{Host: h, StaleAfter: r.StaleAfter}
	claims, err := cl.List(ctx)
	if err != nil {
		return nil, err
	}
	doms, err := h.Domains(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing domains: %w", err)
	}
	var bars map[vfio.Address][]vfio.BAR
	gpus := placement.GPUsFromInventory(inv, nil)
	if r.Files != nil && len(gpus) > 0 {
		if files := r.Files(name); files != nil {
			addrs := make([]vfio.Address, len(gpus))
			for i, g := range gpus {
				addrs[i] = g.Address
			}
			fns, err := vfio.ReadFunctions(ctx, files, addrs)
			if err != nil && !errors.Is(err, hostapi.ErrHostFilesUnsupported) {
				return nil, fmt.Errorf("reading the GPUs' BARs: %w", err)
			}
			bars = map[vfio.Address][]vfio.BAR{}
			for a, f := range fns {
				bars[a] = f.BARs
			}
			gpus = placement.GPUsFromInventory(inv, bars)
		}
	}
	if err := mdevTypes(gpus, docs); err != nil {
		return nil, err
	}
	var held []holders.Holder
	if fns := hostDriven(inv, gpus); r.Held != nil && len(fns) > 0 {
		if held, err = r.Held(ctx, name, fns); err != nil {
			return nil, fmt.Errorf("listing the processes that hold GPUs: %w", err)
		}
	}
	var quarantined map[vfio.Address]string
	if r.Quarantined != nil {
		if quarantined, err = r.Quarantined(ctx, name); err != nil {
			return nil, fmt.Errorf("reading quarantined GPUs: %w", err)
		}
	}
	cl.Annotate(gpus, claims, doms, held, quarantined)
	out := &placement.Host{Name: name, Schedulable: true, GPUs: gpus}
	if err := r.readSRIOV(ctx, name, inv, doms, out); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, Node(n))
	}
	for _, d := range doms {
		out.PinnedCPUs = append(out.PinnedCPUs, d.PinnedCPUs...)
	}
	return out, nil
}

// readSRIOV reads the host's SR-IOV GPUs where its files can be read, and
// holds back from whole-GPU placement a GPU whose VFs are enabled: its
// host driver serves their vGPUs, and passing it through would take them
// all away.
func (r *Reader) readSRIOV(ctx context.Context, name string, inv *vfio.Inventory, doms []claim.Domain, out *placement.Host) error {
	for i := range out.GPUs {
		g := &out.GPUs[i]
		if d := inv.Lookup(g.Address); d != nil && len(d.VFs) > 0 && g.State == placement.Free {
			g.State = placement.VGPUs
			g.Holder = fmt.Sprintf("its %d SR-IOV virtual functions (kohaku_gpu_sriov; vGPUs are kohaku_vgpu's)", len(d.VFs))
		}
	}
	if r.Files == nil {
		return nil
	}
	files := r.Files(name)
	if files == nil {
		return nil
	}
	gpus, err := sriov.Read(ctx, inv, files)
	if err != nil && !errors.Is(err, hostapi.ErrHostFilesUnsupported) {
		return fmt.Errorf("reading the SR-IOV GPUs: %w", err)
	}
	out.SRIOV = gpus
	out.VFUsers = map[vfio.Address]string{}
	for _, g := range gpus {
		for _, vf := range g.VFs {
			for _, d := range doms {
				if slices.Contains(d.Hostdevs, vf.Address) {
					out.VFUsers[vf.Address] = d.Name
				}
			}
		}
	}
	return nil
}

// Node converts a NUMA node as virt reads it.
func Node(n hostapi.NUMANode) placement.Node {
	out := placement.Node{ID: n.ID, CPUs: n.CPUs, FreeMemoryMiB: n.FreeMemoryMiB, FreeHugePages: map[uint64]uint64{}}
	if !n.FreeKnown {
		out.FreeMemoryMiB = n.MemoryMiB
	}
	for _, p := range n.HugePages {
		out.FreeHugePages[p.SizeKiB] = p.Free
		if !n.FreeKnown {
			out.FreeHugePages[p.SizeKiB] = p.Total
		}
	}
	return out
}

// hostDriven returns the functions of the GPUs' IOMMU groups that are on a
// host driver, which a host process can hold; those on vfio-pci are a VM's
// (the domains say which) or no one's.
func hostDriven(inv *vfio.Inventory, gpus []placement.GPU) []holders.Function {
	var out []holders.Function
	for _, g := range gpus {
		for _, a := range g.GroupMembers {
			d := inv.Lookup(a)
			if d == nil || d.Driver == "" || d.Driver == vfio.DriverVFIO {
				continue
			}
			out = append(out, holders.Function{Address: a, Driver: d.Driver, NVIDIAMinor: -1})
		}
	}
	return out
}

// mdevTypes sets the mdev types each GPU offers, from its node device's XML.
func mdevTypes(gpus []placement.GPU, docs []string) error {
	byName := map[string]*placement.GPU{}
	for i := range gpus {
		byName[vfio.NodeDeviceName(gpus[i].Address)] = &gpus[i]
	}
	for _, doc := range docs {
		p, err := mdev.ParseParent(doc)
		if err != nil {
			return err
		}
		g := byName[p.Name]
		if g == nil {
			continue
		}
		for _, t := range p.Types {
			g.MdevTypes = append(g.MdevTypes, placement.MdevType{ID: t.ID, Name: t.Name, Available: int(t.Available)})
		}
	}
	return nil
}
