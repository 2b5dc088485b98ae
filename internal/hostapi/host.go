package hostapi

import (
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// HostInfo is what a libvirt host says about itself.
type HostInfo struct {
	UUID              string
	Hostname          string
	LibvirtVersion    string
	HypervisorType    string
	HypervisorVersion string
	Arch              string
	CPUModel          string
	CPUs              int64
	MemoryMiB         int64
	// DomainTypes are the domain types libvirt offers for the host's own
	// architecture, e.g. ["qemu"] or ["kvm", "qemu"].
	DomainTypes []string
	// NUMANodes are the host's NUMA cells, by id, with free memory and free
	// huge pages read at the same time.
	NUMANodes []NUMANode
	Pools     []PoolInfo
	Networks  []NetworkInfo
}

// KVM reports whether libvirt offers kvm domains on this host.
func (h *HostInfo) KVM() bool {
	for _, t := range h.DomainTypes {
		if t == "kvm" {
			return true
		}
	}
	return false
}

// PoolInfo describes one storage pool.
type PoolInfo struct {
	Name            string
	Type            string
	Path            string
	Active          bool
	CapacityBytes   int64
	AllocationBytes int64
	AvailableBytes  int64
}

// NetworkInfo describes one libvirt network.
type NetworkInfo struct {
	Name    string
	Bridge  string
	Forward string
	Active  bool
}

// NUMANode is one NUMA cell of a host: its CPUs, its memory and its huge
// pages, as the host's capabilities and libvirt's free-memory and free-pages
// calls report them.
type NUMANode struct {
	ID int
	// CPUs are the host CPU ids of the node, sorted.
	CPUs []int
	// MemoryMiB is the node's memory; FreeMemoryMiB what the kernel has free
	// on it now (huge pages reserved but unused do not count as free).
	MemoryMiB     int64
	FreeMemoryMiB int64
	// FreeKnown says FreeMemoryMiB and the pools' Free were read; false
	// when the host's driver does not report them.
	FreeKnown bool
	// HugePages lists the node's huge page pools by size, smallest first.
	HugePages []HugePages
}

// HugePages is one huge page pool of a NUMA node.
type HugePages struct {
	SizeKiB uint64
	// Total is the number of pages reserved on the node; Free those not in use.
	Total uint64
	Free  uint64
}

// CPUSet is the node's CPUs in libvirt's cpuset syntax, e.g. "0-7,16-23".
func (n *NUMANode) CPUSet() string { return domain.FormatCPUSet(n.CPUs) }

// NodeDeviceState is whether a node device is active, persistent and
// autostarted.
type NodeDeviceState struct {
	Active, Persistent, Autostart bool
}

// Definition is a libvirt network's or storage pool's XML as the host
// reports it, with whether it runs and starts with the host.
type Definition struct {
	XML       string
	Active    bool
	Autostart bool
}

// AgentExecResult is a command run in a guest through the guest agent.
type AgentExecResult struct {
	ExitCode int
	Output   string // stdout then stderr, as the agent captured them
}
