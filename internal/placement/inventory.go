package placement

import (
	"fmt"
	"slices"

	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// State is what a GPU is doing now, as placement sees it.
type State int

// The states of a GPU. Only a free GPU can be placed for whole-group
// passthrough; the others name their holder.
const (
	// Free: no claim, no domain and no host process has it.
	Free State = iota
	// Claimed: a Kohaku claim on the host names a VM that holds it (the
	// VM may still be being created).
	Claimed
	// InUse: a domain on the host has it as a hostdev (with or without a
	// claim: one given by hand, `virsh attach-device`, counts).
	InUse
	// HostHeld: a process on the host has it open (a CUDA job,
	// nvidia-persistenced, a display server).
	HostHeld
	// Quarantined: it could not be reset after its last VM and is held
	// back until an operator clears it.
	Quarantined
	// VGPUs: its SR-IOV virtual functions are enabled; its host driver
	// serves them as vGPUs, so it is not passed through whole.
	VGPUs
)

func (s State) String() string {
	switch s {
	case Free:
		return "free"
	case Claimed:
		return "claimed"
	case InUse:
		return "in use"
	case HostHeld:
		return "held by a host process"
	case Quarantined:
		return "quarantined"
	case VGPUs:
		return "shared as SR-IOV vGPUs"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// MdevType is one mediated device (vGPU) type a GPU offers.
type MdevType struct {
	ID        string // e.g. "nvidia-592"
	Name      string // the vendor's name, e.g. "NVIDIA H100-20C"
	Available int    // instances that can still be created
}

// GPU is one GPU of a host: its IOMMU group's lead function and what
// placement needs to know of it.
type GPU struct {
	Address vfio.Address
	// Group is the IOMMU group number and GroupMembers every function of
	// it (the GPU's audio function, say), sorted; whole-group passthrough
	// takes them all.
	Group        int
	GroupMembers []vfio.Address
	VendorID     uint16
	DeviceID     uint16
	// Model is the model name as the host reports it (libvirt's product
	// name, e.g. "GH100 [H100 SXM5 80GB]").
	Model string
	// MemoryGiB is the card's memory: as its driver reports it, or, when
	// no driver is loaded, its largest 64-bit prefetchable BAR (an upper
	// bound: an H100 80 GB shows a 128 GiB BAR). 0 when unknown.
	MemoryGiB int
	// NUMANode is the node the GPU is attached to, -1 when the host does
	// not say.
	NUMANode int
	State    State
	// Holder names who has it when it is not free: a VM ("vm-a
	// (2b1c...)"), a process ("process 4242 (python3)") or why it is
	// quarantined.
	Holder    string
	MdevTypes []MdevType
}

// Node is one NUMA node of a host as placement counts it.
type Node struct {
	ID int
	// CPUs are the host CPU ids of the node, sorted.
	CPUs          []int
	FreeMemoryMiB int64
	// FreeHugePages is the number of free huge pages by page size in KiB.
	FreeHugePages map[uint64]uint64
}

// Host is one host's capacity as read once per apply: a snapshot that the
// planner deducts from as it places VMs.
type Host struct {
	Name string
	// Schedulable is false for a host that cannot take VMs now (down,
	// unreachable, drained); Reason says why.
	Schedulable bool
	Reason      string
	Nodes       []Node
	GPUs        []GPU
	// PinnedCPUs are host CPUs that other VMs' vCPUs are pinned to.
	PinnedCPUs []int
	// SRIOV are the host's SR-IOV GPUs with their VFs and vGPU types,
	// read for the capacity data (kohaku_vgpu places vGPUs itself); nil
	// when the connection cannot read the host's files.
	SRIOV []sriov.GPU
	// VFUsers names the domain that passes each VF through.
	VFUsers map[vfio.Address]string
}

// Clone returns a deep copy, so that a planner can deduct from it without
// changing what its source returned.
func (h *Host) Clone() *Host {
	c := *h
	c.Nodes = make([]Node, len(h.Nodes))
	for i, n := range h.Nodes {
		n.CPUs = slices.Clone(n.CPUs)
		if n.FreeHugePages != nil {
			m := make(map[uint64]uint64, len(n.FreeHugePages))
			for k, v := range n.FreeHugePages {
				m[k] = v
			}
			n.FreeHugePages = m
		}
		c.Nodes[i] = n
	}
	c.GPUs = make([]GPU, len(h.GPUs))
	for i, g := range h.GPUs {
		g.GroupMembers = slices.Clone(g.GroupMembers)
		g.MdevTypes = slices.Clone(g.MdevTypes)
		c.GPUs[i] = g
	}
	c.PinnedCPUs = slices.Clone(h.PinnedCPUs)
	return &c
}

// node returns the host's node id, or nil.
func (h *Host) node(id int) *Node {
	for i := range h.Nodes {
		if h.Nodes[i].ID == id {
			return &h.Nodes[i]
		}
	}
	return nil
}

// freeMemoryMiB is the host's free memory over all its nodes.
func (h *Host) freeMemoryMiB() int64 {
	var t int64
	for _, n := range h.Nodes {
		t += n.FreeMemoryMiB
	}
	return t
}

// EmulatorCPU is the CPU of a node kept apart from every pinned vCPU: its
// highest-numbered CPU, which the emulator threads of every pinned VM on
// the node (and the host's own housekeeping) share. -1 for a node without
// CPUs.
func (n *Node) EmulatorCPU() int {
	if len(n.CPUs) == 0 {
		return -1
	}
	return slices.Max(n.CPUs)
}

// pinnable returns the node's CPUs that a vCPU can be pinned to: not
// pinned by another VM and not the emulator CPU, sorted.
func (n *Node) pinnable(pinned map[int]bool) []int {
	emu := n.EmulatorCPU()
	var out []int
	for _, c := range n.CPUs {
		if c != emu && !pinned[c] {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// GPUFromDevice makes a placement GPU from a PCI function as vfio reads it
// from libvirt's node-device XML, in state Free; memGiB is its memory when
// known (see MemoryGiBFromBARs).
func GPUFromDevice(d *vfio.Device, memGiB int) GPU {
	g := GPU{
		Address:      d.Address,
		Group:        d.Group,
		GroupMembers: slices.Clone(d.GroupMembers),
		VendorID:     d.VendorID,
		DeviceID:     d.ProductID,
		Model:        d.ProductName,
		MemoryGiB:    memGiB,
		NUMANode:     d.NUMANode,
	}
	if len(g.GroupMembers) == 0 {
		g.GroupMembers = []vfio.Address{d.Address}
	}
	return g
}

// GPUsFromInventory returns the host's GPUs (display-class functions that
// are not bridges) from a vfio inventory, sorted by address; bars gives each
// function's BARs when they were read (for MemoryGiBFromBARs), and may be nil.
func GPUsFromInventory(inv *vfio.Inventory, bars map[vfio.Address][]vfio.BAR) []GPU {
	var out []GPU
	for _, d := range inv.Devices() {
		if d.Bridge || !vfio.IsDisplay(d.Class) || d.IsVF() {
			continue // a VF is a vGPU (internal/sriov), not a GPU to place whole
		}
		out = append(out, GPUFromDevice(d, MemoryGiBFromBARs(bars[d.Address])))
	}
	return out
}

// MemoryGiBFromBARs estimates a GPU's memory from its BARs when its driver
// is not loaded to say: its largest 64-bit prefetchable memory BAR (the
// one that maps the card's memory), in whole GiB, rounded down; 0 when it
// has none of at least 1 GiB.
func MemoryGiBFromBARs(bars []vfio.BAR) int {
	var largest uint64
	for _, b := range bars {
		if !b.IO && b.Is64 && b.Prefetchable && b.Size > largest {
			largest = b.Size
		}
	}
	return int(largest >> 30)
}
