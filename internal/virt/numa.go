package virt

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// CPUSet writes CPU ids as ranges, e.g. [0 1 2 3 8] -> "0-3,8", the syntax
// of libvirt's cpuset attributes and of /sys/.../cpulist.
func CPUSet(cpus []int) string { return domain.FormatCPUSet(cpus) }

// NUMANodes reads the host's NUMA nodes: CPUs, memory and huge page pools
// from the capabilities, free memory and free huge pages per node (one
// capabilities call, then numaFree's). A host whose driver reports no cells
// yields none.
func (c *Client) NUMANodes(ctx context.Context) ([]NUMANode, error) {
	var doc string
	err := c.Call(ctx, "read host capabilities", func(l *libvirt.Libvirt) (err error) {
		doc, err = l.ConnectGetCapabilities()
		return err
	})
	if err != nil {
		return nil, err
	}
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(doc); err != nil {
		return nil, fmt.Errorf("parsing host capabilities: %w", err)
	}
	nodes, err := numaFromCapabilities(&caps)
	if err != nil {
		return nil, err
	}
	return nodes, c.numaFree(ctx, nodes)
}

// numaFromCapabilities reads the NUMA cells of a host's capabilities: CPUs,
// memory and the huge page pools (every page size but the smallest, which is
// the base page, e.g. 4 KiB on x86_64). Free amounts are left at zero for
// applyFreeMemory and applyFreePages. A host whose capabilities list no cells
// (libvirt built without NUMA support) yields none.
func numaFromCapabilities(caps *libvirtxml.Caps) ([]NUMANode, error) {
	if caps.Host.NUMA == nil || caps.Host.NUMA.Cells == nil {
		return nil, nil
	}
	var out []NUMANode
	for _, c := range caps.Host.NUMA.Cells.Cells {
		n := NUMANode{ID: c.ID, CPUs: []int{}, HugePages: []HugePages{}}
		if c.Memory != nil {
			n.MemoryMiB = int64(c.Memory.Size * capsUnitBytes(c.Memory.Unit) >> 20)
		}
		if c.CPUS != nil {
			for _, cpu := range c.CPUS.CPUs {
				n.CPUs = append(n.CPUs, cpu.ID)
			}
			slices.Sort(n.CPUs)
		}
		pages := make([]HugePages, 0, len(c.PageInfo))
		for _, p := range c.PageInfo {
			if p.Size <= 0 {
				return nil, fmt.Errorf("NUMA cell %d lists pages of size %d", c.ID, p.Size)
			}
			pages = append(pages, HugePages{SizeKiB: uint64(p.Size) * capsUnitBytes(p.Unit) >> 10, Total: p.Count})
		}
		slices.SortFunc(pages, func(a, b HugePages) int { return cmp.Compare(a.SizeKiB, b.SizeKiB) })
		if len(pages) > 1 {
			n.HugePages = pages[1:] // the smallest is the base page
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NUMANode) int { return a.ID - b.ID })
	return out, nil
}

// capsUnitBytes is the multiplier of a capabilities size unit; libvirt
// writes unit='KiB', which is also what an absent unit means there.
func capsUnitBytes(unit string) uint64 {
	if unit == "" {
		return 1 << 10
	}
	return unitBytes(unit)
}

// cellRuns groups node ids into runs of consecutive ids: libvirt's
// free-pages call covers a start cell and a count, and fails on a cell the
// host does not have. Hosts almost always number their cells 0..n-1: one run.
func cellRuns(nodes []NUMANode) [][2]int {
	var runs [][2]int
	for i, n := range nodes {
		if i > 0 && n.ID == nodes[i-1].ID+1 {
			runs[len(runs)-1][1]++
			continue
		}
		runs = append(runs, [2]int{n.ID, 1})
	}
	return runs
}

// applyFreeMemory sets each node's free memory from libvirt's answer to
// NodeGetCellsFreeMemory(first, ...): bytes, one entry per cell id from first.
func applyFreeMemory(nodes []NUMANode, first int, free []uint64) error {
	for i := range nodes {
		k := nodes[i].ID - first
		if k < 0 || k >= len(free) {
			return fmt.Errorf("libvirt reported free memory for %d cells from cell %d, not for cell %d", len(free), first, nodes[i].ID)
		}
		nodes[i].FreeMemoryMiB = int64(free[k] >> 20)
	}
	return nil
}

// hugePageSizes lists every huge page size of the nodes, in KiB, sorted.
func hugePageSizes(nodes []NUMANode) []uint32 {
	var sizes []uint32
	for _, n := range nodes {
		for _, p := range n.HugePages {
			sizes = append(sizes, uint32(p.SizeKiB))
		}
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// applyFreePages sets the free huge pages of the count nodes from cell start
// (consecutive ids) from libvirt's answer to NodeGetFreePages(sizes, start,
// count): for each cell in turn, one count per size.
func applyFreePages(nodes []NUMANode, start, count int, sizes []uint32, counts []uint64) error {
	if len(counts) != count*len(sizes) {
		return fmt.Errorf("libvirt reported %d free page counts for %d cells and %d page sizes", len(counts), count, len(sizes))
	}
	for i := range nodes {
		k := nodes[i].ID - start
		if k < 0 || k >= count {
			continue
		}
		for j := range nodes[i].HugePages {
			p := &nodes[i].HugePages[j]
			s := slices.Index(sizes, uint32(p.SizeKiB))
			if s < 0 {
				return fmt.Errorf("no free page count for %d KiB pages of cell %d", p.SizeKiB, nodes[i].ID)
			}
			p.Free = counts[k*len(sizes)+s]
		}
	}
	return nil
}

// numaFree fills in the free memory and free huge pages of nodes read from
// the capabilities: one NodeGetCellsFreeMemory call for every cell, and one
// NodeGetFreePages call per run of consecutive cell ids (one on hosts that
// number their cells 0..n-1), none when the host has no huge page sizes.
// A driver that does not report them leaves FreeKnown false rather than
// failing the read.
func (c *Client) numaFree(ctx context.Context, nodes []NUMANode) error {
	if len(nodes) == 0 {
		return nil
	}
	first, last := nodes[0].ID, nodes[len(nodes)-1].ID
	sizes := hugePageSizes(nodes)
	err := c.Call(ctx, "read free memory and huge pages per NUMA node", func(l *libvirt.Libvirt) error {
		free, err := l.NodeGetCellsFreeMemory(int32(first), int32(last-first+1))
		if err != nil {
			return err
		}
		if err := applyFreeMemory(nodes, first, free); err != nil {
			return err
		}
		if len(sizes) == 0 {
			return nil
		}
		for _, run := range cellRuns(nodes) {
			counts, err := l.NodeGetFreePages(sizes, int32(run[0]), uint32(run[1]), 0)
			if err != nil {
				return err
			}
			if err := applyFreePages(nodes, run[0], run[1], sizes, counts); err != nil {
				return err
			}
		}
		return nil
	})
	if Unsupported(err) {
		return nil
	}
	if err == nil {
		for i := range nodes {
			nodes[i].FreeKnown = true
		}
	}
	return err
}

// Unsupported reports whether libvirt refused a call as not supported by
// the host's driver (rather than failing it).
func Unsupported(err error) bool {
	return libvirtCode(err, libvirt.ErrNoSupport) || libvirtCode(err, libvirt.ErrOperationUnsupported)
}
