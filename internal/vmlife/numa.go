package vmlife

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// NUMA placement modes (Want.NUMAPlacement).
const (
	// PlacementAuto binds a VM with GPUs to the NUMA nodes of its GPUs, on
	// a host with more than one node. It is the default.
	PlacementAuto = "auto"
	// PlacementNone leaves vCPUs and memory to the host's scheduler.
	PlacementNone = "none"
)

// StepPlace is the step that binds a VM to NUMA nodes and checks its huge
// pages against the host.
const StepPlace = "place the VM on the host's NUMA nodes"

// PlacementError is a placement or huge page request the host cannot
// satisfy; Attribute names what the user can change.
type PlacementError struct {
	Attribute string
	Err       error
}

func (e *PlacementError) Error() string { return e.Attribute + ": " + e.Err.Error() }
func (e *PlacementError) Unwrap() error { return e.Err }

// Place fills spec.NUMA from the host and checks the request against it:
//
//   - with mode auto and gpus, the VM is bound to the NUMA nodes of its
//     GPUs (read from their node devices), one guest cell per node, when
//     the host has more than one node and knows the GPUs' nodes; vCPUs
//     beyond the CPUs of those nodes are refused;
//   - with mode auto, no gpus and nodes (the node a placement chose for a
//     NUMA-local VM without GPUs), the VM is bound to those nodes alike;
//   - with huge pages, the host (the bound nodes, when bound) must offer
//     pages of that size and, when creating, have enough of them free:
//     per node when bound, in all otherwise.
//
// It changes nothing on the host. A VM with neither gpus nor huge pages
// costs no call.
func Place(ctx context.Context, h Host, spec *domain.Spec, mode string, gpus []string, nodeIDs []int, creating bool) error {
	spec.NUMA = nil
	bind := mode != PlacementNone && (len(gpus) > 0 || len(nodeIDs) > 0)
	where := "where the VM's GPUs are"
	if len(gpus) == 0 {
		where = "where placement put the VM"
	}
	if !bind && spec.HugePageKiB == 0 {
		return nil
	}
	nodes, err := h.NUMANodes(ctx)
	if err != nil && !hostapi.Unsupported(err) {
		return err
	}
	var bound []hostapi.NUMANode
	if bind && len(nodes) > 1 {
		ids := nodeIDs
		if len(gpus) > 0 {
			var err error
			if ids, err = gpuNodes(ctx, h, gpus); err != nil {
				return err
			}
		}
		for _, id := range ids {
			i := slices.IndexFunc(nodes, func(n hostapi.NUMANode) bool { return n.ID == id })
			if i < 0 {
				if len(gpus) == 0 {
					return fmt.Errorf("placement put the VM on NUMA node %d, which the host's capabilities do not list (nodes %s)", id, nodeList(nodes))
				}
				return fmt.Errorf("a GPU is on NUMA node %d, which the host's capabilities do not list (nodes %s)", id, nodeList(nodes))
			}
			bound = append(bound, nodes[i])
		}
		if len(bound) == 0 {
			bind = false // the host does not tell where the GPUs are
		}
		cpus := 0
		for _, n := range bound {
			cpus += len(n.CPUs)
			spec.NUMA = append(spec.NUMA, domain.NUMACell{HostNode: n.ID, CPUs: n.CPUSet()})
		}
		if bind && spec.VCPU > cpus {
			return &PlacementError{Attribute: "vcpu", Err: fmt.Errorf(
				"%d vCPUs exceed the %d CPUs of %s, %s. Lower vcpu to %d or less, or set numa_placement = \"none\" to let the vCPUs run on any node (at a cost in GPU bandwidth)",
				spec.VCPU, cpus, nodeList(bound), where, cpus)}
		}
		if bind && len(bound) > spec.VCPU {
			return &PlacementError{Attribute: "vcpu", Err: fmt.Errorf(
				"the VM is bound to %s, %s: it needs at least one vCPU per node (vcpu = %d), or numa_placement = \"none\"", nodeList(bound), where, len(bound))}
		}
	}
	if spec.HugePageKiB > 0 {
		if err := checkHugePages(spec, nodes, bound, creating); err != nil {
			return err
		}
	}
	return nil
}

// gpuNodes returns the distinct NUMA nodes of the gpus entries' functions,
// sorted; functions whose node the host does not report are left out.
func gpuNodes(ctx context.Context, h Host, gpus []string) ([]int, error) {
	read := HostPCIReader(h)
	var ids []int
	for _, e := range gpus {
		_, raw := ParseGPUID(e)
		a, err := vfio.ParseAddress(raw)
		if err != nil {
			return nil, &GPUEntryError{Entry: e, Err: err}
		}
		d, err := read(ctx, a)
		if err != nil {
			return nil, &GPUEntryError{Entry: e, Err: fmt.Errorf("reading its NUMA node: %w", err)}
		}
		if d.NUMANode >= 0 {
			ids = append(ids, d.NUMANode)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// checkHugePages checks that the host offers spec's huge page size on the
// nodes that will back the VM and, when creating, that enough are free.
func checkHugePages(spec *domain.Spec, all, bound []hostapi.NUMANode, creating bool) error {
	if len(all) == 0 {
		return nil // the host reports no NUMA cells: libvirt will tell at start
	}
	size := uint64(spec.HugePageKiB)
	pool := func(n hostapi.NUMANode) (hostapi.HugePages, bool) {
		i := slices.IndexFunc(n.HugePages, func(p hostapi.HugePages) bool { return p.SizeKiB == size })
		if i < 0 {
			return hostapi.HugePages{}, false
		}
		return n.HugePages[i], true
	}
	label := humanPage(size)
	kernel := "2M"
	if size == domain.HugePage1GiB {
		kernel = "1G"
	}
	hint := fmt.Sprintf("reserve them on the host first: echo N > "+
		"/sys/devices/system/node/node<id>/hugepages/hugepages-%dkB/nr_hugepages, or hugepagesz=%s hugepages=N "+
		"on its kernel command line", size, kernel)
	if len(bound) > 0 {
		var total uint64
		for i, n := range bound {
			p, ok := pool(n)
			_, _, mib := domain.CellSplit(spec.VCPU, spec.MemoryMiB, i, len(bound))
			need := uint64(mib) << 10 / size
			total += need
			switch {
			case !ok || p.Total == 0:
				return &PlacementError{Attribute: "hugepages", Err: fmt.Errorf("NUMA node %d, where the VM's GPUs are, has no %s huge pages; %s", n.ID, label, hint)}
			case creating && n.FreeKnown && p.Free < need:
				return &PlacementError{Attribute: "hugepages", Err: fmt.Errorf("NUMA node %d has %d free %s "+
					"huge pages; the VM's %d MiB there need %d. Free or reserve more on that node (%s), lower "+
					"memory_mib, or set numa_placement = \"none\"", n.ID, p.Free, label, mib, need, hint)}
			}
		}
		return nil
	}
	var free, reserved uint64
	known := true
	for _, n := range all {
		if p, ok := pool(n); ok {
			free += p.Free
			reserved += p.Total
		}
		known = known && n.FreeKnown
	}
	need := uint64(spec.MemoryMiB) << 10 / size
	switch {
	case reserved == 0:
		return &PlacementError{Attribute: "hugepages", Err: fmt.Errorf("the host has no %s huge pages; %s", label, hint)}
	case creating && known && free < need:
		return &PlacementError{Attribute: "hugepages", Err: fmt.Errorf("the host has %d free %s huge pages; the "+
			"VM's %d MiB need %d. Free or reserve more (%s), or lower memory_mib", free, label, spec.MemoryMiB, need, hint)}
	}
	return nil
}

func humanPage(kib uint64) string {
	if kib >= 1<<20 {
		return fmt.Sprintf("%d GiB", kib>>20)
	}
	return fmt.Sprintf("%d MiB", kib>>10)
}

func nodeList(nodes []hostapi.NUMANode) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = fmt.Sprint(n.ID)
	}
	if len(ids) == 1 {
		return "NUMA node " + ids[0]
	}
	return "NUMA nodes " + strings.Join(ids, ", ")
}
