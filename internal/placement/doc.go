// Package placement decides where a VM that asks for capacity goes: which
// host of the fleet, which GPUs (or vGPUs) there, which NUMA node and, when
// asked, which host CPUs its vCPUs are pinned to. It is pure: it reads a
// host's capacity through the Source interface and changes nothing; the
// claims that make a choice hold across applies are package claim's.
//
// # Inventory
//
// A Host is one host's capacity, read once per apply: its NUMA nodes (CPUs,
// free memory, free huge pages by size), its GPUs (lead PCI function and
// IOMMU group, vendor and device id, model name, memory, NUMA node, state
// and holder, mdev types with instances left) and the CPUs other VMs have
// pinned. GPUsFromInventory and GPUFromDevice build GPUs from vfio's
// reading of libvirt's node devices; MemoryGiBFromBARs sizes a GPU whose
// driver is not loaded from its largest 64-bit prefetchable BAR. A GPU's
// State comes from claim.DeviceStates: free, claimed (by a Kohaku claim),
// in use (a domain has it as a hostdev, claimed or given by hand), held by
// a host process, or quarantined; only free GPUs are placed whole.
//
// # Policy and tie-break
//
// Pack (the default) puts a VM on the host with the fewest free GPUs
// matching its selector that still fits it, then the one with the least
// free memory: hosts fill one at a time and whole hosts stay free for VMs
// that need a whole host. A VM without GPUs counts free GPUs of any kind,
// so it packs onto hosts without GPUs first. Spread takes the most of both,
// so VMs land apart. Within a host the NUMA node is chosen the same way
// (pack: the node with the fewest free matching GPUs, then least free
// memory). Every tie goes to the host whose name sorts first, then the
// lowest node id, and the GPUs taken are the lowest PCI addresses of the
// node: the same fleet and the same requests in the same order always give
// the same placement, whatever order the hosts are listed in.
//
// # Fit
//
// A host is a candidate when it is schedulable, has enough eligible GPUs
// and, when the request is NUMA-local, one node holds all of them together
// with the VM's memory (in huge pages of the asked size, when asked) and
// vCPUs (as many CPUs as vCPUs, or as many CPUs free to pin). Without
// NUMA-locality the GPUs still go on one node where one has enough, and
// memory and pinned CPUs come from the GPUs' nodes first. When no host
// fits, Place returns a *NoFitError that says, host by host in name order,
// what is missing: "gpu1: 1 free GPU matching model ~ "H100" of 2 asked
// (claimed: 0000:9a:00.0 by vm-b); gpu2: no NUMA node holds it all: node 0
// has 30 GiB free of 64 GiB asked; gpu3: down (connection refused)".
//
// # CPU pinning
//
// A pinned VM's vCPUs each get a host CPU of its node that no other VM has
// pinned, lowest ids first. The highest-numbered CPU of every node is never
// given to a vCPU: it is kept for the emulator threads (emulatorpin) of
// every pinned VM on the node, and for the host's own housekeeping, so a
// node of 56 CPUs pins at most 55 vCPUs. One CPU shared per node rather
// than one per VM keeps a full HGX node's capacity for vCPUs; QEMU's
// emulator threads do little once a VM with passthrough runs. Hyperthread
// siblings are not told apart: the CPUs libvirt lists for a node are the
// unit.
//
// # One read per host per apply
//
// A Planner places all the VMs of one apply against one snapshot per host:
// it reads a host through its Source the first time a request could go
// there and deducts each placement (GPUs claimed, instances used, memory,
// huge pages, pinned CPUs) from its copy, so the next request sees what is
// left and a fleet of 8 hosts costs 8 reads for 50 VMs (BenchmarkPlace50
// reports host-reads/apply). A host that cannot be read is counted as down.
// capacity.Reader is the Source over libvirt connections: one read of a
// host is its NUMA nodes, its PCI node devices (GPUs and mdev types), its
// claims, its domains (hostdevs and pinned CPUs) and, where the connection
// can read the host's files, its GPUs' BARs.
//
// # Sticky placement
//
// Placement is made once, at create. Sticky judges a VM's recorded
// placement against its request as it is now: the VM moves only when that
// placement no longer satisfies the request (its host left the hosts list,
// the GPU count, mode or mdev type changed, a GPU no longer matches the
// selector, NUMA-locality is asked of a VM that spans nodes, or what it
// grows by is not free where it is). Capacity elsewhere never moves it, and
// a host that cannot be read moves nothing.
//
// # Claims
//
// Placement chooses; package claim takes. A claim on a GPU is a libvirt
// storage volume named after its PCI address in the host's kohaku-claims
// pool, created through the same libvirt connection: creation fails when
// the name exists, so of two applies racing for the last GPU exactly one
// creates the claim and the other fails naming the holder, before it has
// made anything. Claim's package documentation gives the protocol and its
// failure modes: a crash between claim and domain define, stale claims of
// VMs deleted by hand and how they are taken over, and devices given to a
// domain by hand.
package placement
