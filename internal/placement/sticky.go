package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Verdict says whether a VM's current placement still satisfies its
// request, and why.
type Verdict struct {
	// Keep is true when the VM stays where it is; Reasons then is empty.
	// When false, Reasons says each way the placement fails the request,
	// for the plan to show.
	Keep    bool
	Reasons []string
}

func (v Verdict) String() string {
	if v.Keep {
		return "the current placement satisfies the request"
	}
	return "the current placement no longer satisfies the request: " + strings.Join(v.Reasons, "; ")
}

// Sticky judges a VM's current placement cur against its (possibly
// changed) request r, on h, the host's capacity now, which counts the
// VM's own devices, memory and pinned CPUs as taken (nil when the host
// cannot be read: then only what cur itself shows is judged, and the VM
// is not moved for what cannot be seen).
//
// Placement is made once and kept: capacity elsewhere never moves a VM.
// It moves only when the request itself no longer fits where it is: the
// host left its hosts list, the GPU count, mode or mdev type changed, a
// GPU no longer matches the selector, NUMA-locality is asked of a VM that
// spans nodes, or what it grows by (memory, huge pages, pinned vCPUs) is
// not free where it is.
func Sticky(cur *Placement, r *Request, h *Host) Verdict {
	var why []string
	if !allowed(r, cur.Host) {
		why = append(why, fmt.Sprintf("it is on %s, which is no longer among hosts (%s)", cur.Host, strings.Join(r.Hosts, ", ")))
	}
	var sel Selector
	if r.GPU != nil {
		sel = r.GPU.Selector
	}
	n := r.gpuCount()
	switch {
	case sel.mdev() && len(cur.GPUs) > 0:
		why = append(why, fmt.Sprintf("it has %d whole GPU%s and the request asks for vGPUs", len(cur.GPUs), plural(len(cur.GPUs))))
	case !sel.mdev() && len(cur.Mdevs) > 0:
		why = append(why, fmt.Sprintf("it has %d vGPU%s and the request asks for whole GPUs", len(cur.Mdevs), plural(len(cur.Mdevs))))
	case sel.mdev() && len(cur.Mdevs) != n:
		why = append(why, fmt.Sprintf("it has %d vGPU%s and the request asks for %d", len(cur.Mdevs), plural(len(cur.Mdevs)), n))
	case !sel.mdev() && len(cur.GPUs) != n:
		why = append(why, fmt.Sprintf("it has %d GPU%s and the request asks for %d", len(cur.GPUs), plural(len(cur.GPUs)), n))
	}
	for _, m := range cur.Mdevs {
		if sel.mdev() && m.Type != sel.MdevType {
			why = append(why, fmt.Sprintf("its vGPU on %s is of type %s, not %s", m.Parent, m.Type, sel.MdevType))
		}
	}
	nodes := map[int]bool{}
	if h != nil {
		for _, a := range append(slices.Clone(cur.GPUs), mdevParents(cur)...) {
			i := slices.IndexFunc(h.GPUs, func(g GPU) bool { return g.Address == a })
			if i < 0 {
				why = append(why, fmt.Sprintf("its GPU %s is no longer on %s", a, cur.Host))
				continue
			}
			g := &h.GPUs[i]
			nodes[g.NUMANode] = true
			if n > 0 && !sel.Matches(g) {
				why = append(why, fmt.Sprintf("its GPU %s (%s, %d GiB) does not match %s", a, g.Model, g.MemoryGiB, sel))
			}
		}
	}
	if r.NUMALocal {
		for id := range cur.MemoryMiB {
			nodes[id] = true
		}
		if cur.NUMANode < 0 && len(nodes) > 1 {
			why = append(why, fmt.Sprintf("it spans NUMA nodes %s and the request asks for one", intList(slices.Sorted(maps.Keys(nodes)))))
		}
	}
	if h != nil {
		why = append(why, growth(cur, r, h)...)
	}
	return Verdict{Keep: len(why) == 0, Reasons: why}
}

func mdevParents(cur *Placement) []vfio.Address {
	var out []vfio.Address
	for _, m := range cur.Mdevs {
		if !slices.Contains(out, m.Parent) {
			out = append(out, m.Parent)
		}
	}
	return out
}

// growth says what r asks beyond cur that h cannot give where the VM is.
func growth(cur *Placement, r *Request, h *Host) []string {
	var why []string
	var have int64
	for _, m := range cur.MemoryMiB {
		have += m
	}
	if r.HugePageKiB != cur.HugePageKiB {
		have = 0 // all of it moves to the other kind of pages
	}
	if more := r.MemoryMiB - have; more > 0 {
		var free int64
		where := "the host"
		if cur.NUMANode >= 0 {
			where = fmt.Sprintf("NUMA node %d", cur.NUMANode)
			if nd := h.node(cur.NUMANode); nd != nil {
				free = nodeMemory(r, nd)
			}
		} else {
			for i := range h.Nodes {
				free += nodeMemory(r, &h.Nodes[i])
			}
		}
		if free < more {
			why = append(why, fmt.Sprintf("its memory grows by %s and %s has %s free", humanMiB(more), where, humanMiB(free)))
		}
	}
	if r.PinCPUs {
		if more := r.VCPUs - len(cur.CPUs); more > 0 {
			pinned := map[int]bool{}
			for _, c := range h.PinnedCPUs {
				pinned[c] = true
			}
			free := 0
			where := "the host"
			for i := range h.Nodes {
				if cur.NUMANode < 0 || h.Nodes[i].ID == cur.NUMANode {
					free += len(h.Nodes[i].pinnable(pinned))
				}
			}
			if cur.NUMANode >= 0 {
				where = fmt.Sprintf("NUMA node %d", cur.NUMANode)
			}
			if free < more {
				why = append(why, fmt.Sprintf("it needs %d more pinned CPU%s and %s has %d free to pin", more, plural(more), where, free))
			}
		}
	}
	return why
}

func intList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}
