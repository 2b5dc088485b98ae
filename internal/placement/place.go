package placement

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// MdevPick is one mediated device a placement makes: its parent GPU and type.
type MdevPick struct {
	Parent vfio.Address
	Type   string
}

// Placement is where a request goes: a host, the GPUs (or vGPUs) it gets,
// and, when asked, the host CPUs its vCPUs are pinned to.
type Placement struct {
	Host string
	// NUMANode is the node of a NUMA-local placement; -1 otherwise.
	NUMANode int
	// GPUs are the lead functions of the GPUs passed through, sorted; each
	// takes its whole IOMMU group.
	GPUs []vfio.Address
	// Mdevs are the vGPUs to make, for a request in mode mdev.
	Mdevs []MdevPick
	// CPUs are the host CPUs vCPU 0, 1, ... are pinned to; nil unless the
	// request pins. EmulatorCPUs are where the VM's emulator threads run:
	// the emulator CPU (Node.EmulatorCPU) of each node its vCPUs are on.
	CPUs         []int
	EmulatorCPUs []int
	// MemoryMiB is how much of the VM's memory each node gives, in huge
	// pages of HugePageKiB when that is not 0.
	MemoryMiB   map[int]int64
	HugePageKiB uint64
}

// HostMiss is why one host cannot take a request.
type HostMiss struct {
	Host   string
	Reason string
}

// NoFitError is a request that no allowed host can take; it says what is
// missing on each of them.
type NoFitError struct {
	Request string
	Misses  []HostMiss
}

func (e *NoFitError) Error() string {
	parts := make([]string, len(e.Misses))
	for i, m := range e.Misses {
		parts[i] = m.Host + ": " + m.Reason
	}
	if len(parts) == 0 {
		return fmt.Sprintf("no host can take %s: the request allows no host of the fleet", e.Request)
	}
	return fmt.Sprintf("no host can take %s: %s", e.Request, strings.Join(parts, "; "))
}

// candidate is one way a host can take a request, with the keys the policy
// ranks it by.
type candidate struct {
	p *Placement
	// free is the host's free matching GPUs (vGPU instances for mdev, and
	// free GPUs of any kind for a VM without GPUs); mem its free memory.
	free int
	mem  int64
}

// Place chooses a host for r among hosts by policy, and the devices and
// CPUs there. It changes nothing: the planner deducts what it chose. When
// no allowed host fits, the error is a *NoFitError naming what each lacks.
//
// Ranking: Pack takes the host with the fewest free matching GPUs that
// still fits, then the least free memory; Spread the most of both. Ties go
// to the host whose name sorts first, so the same fleet and request always
// give the same answer.
func Place(r *Request, hosts []*Host, policy Policy) (*Placement, error) {
	if err := ValidateRequest(r); err != nil {
		return nil, err
	}
	sorted := slices.Clone(hosts)
	slices.SortFunc(sorted, func(a, b *Host) int { return cmp.Compare(a.Name, b.Name) })
	var best *candidate
	miss := &NoFitError{Request: r.Name + " (" + r.String() + ")"}
	if r.Name == "" {
		miss.Request = r.String()
	}
	for _, h := range sorted {
		if !allowed(r, h.Name) {
			continue
		}
		if c, _ := fitHost(r, h, policy, false); c != nil && (best == nil || better(policy, c, best)) {
			best = c
		}
	}
	if best != nil {
		return best.p, nil
	}
	// Only a request that fits nowhere pays for the words of why.
	for _, h := range sorted {
		if allowed(r, h.Name) {
			_, why := fitHost(r, h, policy, true)
			miss.Misses = append(miss.Misses, HostMiss{Host: h.Name, Reason: why})
		}
	}
	return nil, miss
}

// better reports whether a ranks before b under the policy; equal keys
// keep b, the host whose name sorts first.
func better(policy Policy, a, b *candidate) bool {
	c := cmp.Compare(a.free, b.free)
	if c == 0 {
		c = cmp.Compare(a.mem, b.mem)
	}
	if policy == Spread {
		c = -c
	}
	return c < 0
}

// eligible reports whether g can be given for the selector now.
func eligible(g *GPU, sel Selector) bool {
	if !sel.Matches(g) {
		return false
	}
	if sel.mdev() {
		// vGPUs share a parent that its host driver (and other VMs'
		// vGPUs) keep busy; only a GPU passed through whole, claimed or
		// quarantined is out.
		if g.State == Claimed || g.State == InUse || g.State == Quarantined {
			return false
		}
		return g.mdevType(sel.MdevType).Available > 0
	}
	return g.State == Free
}

// units is what g offers toward the request: 1 for a free GPU, its free
// instances of the type in mdev mode.
func units(g *GPU, sel Selector) int {
	if sel.mdev() {
		return g.mdevType(sel.MdevType).Available
	}
	return 1
}

// fitHost finds how h can take r: nil and, when explain is set, why not
// when it cannot (without explain the reason is only non-empty).
func fitHost(r *Request, h *Host, policy Policy, explain bool) (*candidate, string) {
	if !h.Schedulable {
		if h.Reason == "" {
			return nil, "down"
		}
		return nil, "down (" + h.Reason + ")"
	}
	if len(h.Nodes) == 0 {
		return nil, "reports no NUMA nodes, so its free memory is unknown"
	}
	n := r.gpuCount()
	var sel Selector
	if n > 0 {
		sel = r.GPU.Selector
	}
	// The GPUs the request can take, sorted by node then address, and
	// what each node offers.
	var elig []*GPU
	perNode := map[int]int{}
	total := 0
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if n > 0 && eligible(g, sel) {
			elig = append(elig, g)
			perNode[g.NUMANode] += units(g, sel)
			total += units(g, sel)
		}
	}
	slices.SortFunc(elig, func(a, b *GPU) int {
		if c := cmp.Compare(a.NUMANode, b.NUMANode); c != 0 {
			return c
		}
		return a.Address.Compare(b.Address)
	})
	free := total
	if n == 0 {
		for i := range h.GPUs {
			if h.GPUs[i].State == Free {
				free++
			}
		}
	}
	if total < n {
		if !explain {
			return nil, "-"
		}
		return nil, gpuShortfall(h, r, total)
	}
	pinned := map[int]bool{}
	for _, c := range h.PinnedCPUs {
		pinned[c] = true
	}
	nodes := slices.Clone(h.Nodes)
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	// rank orders nodes by the policy: pack fills the node with the fewest
	// free matching GPUs, then the least free memory; spread the most.
	rank := func(ids []*Node) {
		sort.SliceStable(ids, func(i, j int) bool {
			a, b := ids[i], ids[j]
			c := cmp.Compare(perNode[a.ID], perNode[b.ID])
			if c == 0 {
				c = cmp.Compare(a.FreeMemoryMiB, b.FreeMemoryMiB)
			}
			if policy == Spread {
				c = -c
			}
			if c == 0 {
				c = cmp.Compare(a.ID, b.ID)
			}
			return c < 0
		})
	}
	if r.NUMALocal {
		var fits []*Node
		var why []string
		for i := range nodes {
			nd := &nodes[i]
			if reason := nodeShortfall(r, nd, perNode[nd.ID], pinned, explain); reason != "" {
				if explain {
					why = append(why, fmt.Sprintf("node %d %s", nd.ID, reason))
				}
				continue
			}
			fits = append(fits, nd)
		}
		if len(fits) == 0 {
			return nil, "no NUMA node holds it all: " + strings.Join(why, ", ")
		}
		rank(fits)
		nd := fits[0]
		p := &Placement{Host: h.Name, NUMANode: nd.ID, MemoryMiB: map[int]int64{nd.ID: r.MemoryMiB}, HugePageKiB: r.HugePageKiB}
		takeGPUs(p, elig, sel, n, func(g *GPU) bool { return g.NUMANode == nd.ID })
		if r.PinCPUs {
			p.CPUs = nd.pinnable(pinned)[:r.VCPUs]
			p.EmulatorCPUs = []int{nd.EmulatorCPU()}
		}
		return &candidate{p: p, free: free, mem: h.freeMemoryMiB()}, ""
	}
	p := &Placement{Host: h.Name, NUMANode: -1, MemoryMiB: map[int]int64{}, HugePageKiB: r.HugePageKiB}
	if n > 0 {
		// Keep the GPUs on one node when one node has enough of them,
		// though the request does not insist.
		var whole []*Node
		for i := range nodes {
			if perNode[nodes[i].ID] >= n {
				whole = append(whole, &nodes[i])
			}
		}
		if len(whole) > 0 {
			rank(whole)
			id := whole[0].ID
			takeGPUs(p, elig, sel, n, func(g *GPU) bool { return g.NUMANode == id })
		} else {
			takeGPUs(p, elig, sel, n, func(*GPU) bool { return true })
		}
	}
	// Memory, huge pages and pinned CPUs come from the GPUs' nodes first,
	// then the others by id.
	order := gpuNodesFirst(h, p, nodes)
	if reason := spreadMemory(r, p, order, explain); reason != "" {
		return nil, reason
	}
	if r.PinCPUs {
		cpus, emu := pinAcross(order, pinned, r.VCPUs)
		if len(cpus) < r.VCPUs {
			if !explain {
				return nil, "-"
			}
			return nil, fmt.Sprintf("%d CPUs free to pin of %d vCPUs asked (%d pinned by other VMs, one per node kept for emulator threads)", len(cpus), r.VCPUs, len(h.PinnedCPUs))
		}
		p.CPUs, p.EmulatorCPUs = cpus, emu
	} else if cpus := hostCPUs(h); r.VCPUs > cpus {
		if !explain {
			return nil, "-"
		}
		return nil, fmt.Sprintf("%d vCPUs asked of a host with %d CPUs", r.VCPUs, cpus)
	}
	return &candidate{p: p, free: free, mem: h.freeMemoryMiB()}, ""
}

// pinAcross takes the CPUs free to pin from the nodes in order until vcpus
// are taken, and the emulator CPU of each node it takes from; fewer when
// the nodes run out.
func pinAcross(order []*Node, pinned map[int]bool, vcpus int) (cpus, emu []int) {
	for _, nd := range order {
		free := nd.pinnable(pinned)
		if len(free) == 0 {
			continue
		}
		take := min(len(free), vcpus-len(cpus))
		cpus = append(cpus, free[:take]...)
		emu = append(emu, nd.EmulatorCPU())
		if len(cpus) == vcpus {
			break
		}
	}
	return cpus, emu
}

func hostCPUs(h *Host) int {
	n := 0
	for _, nd := range h.Nodes {
		n += len(nd.CPUs)
	}
	return n
}

// takeGPUs gives p the first n units of elig (sorted by node, then
// address) that keep accepts.
func takeGPUs(p *Placement, elig []*GPU, sel Selector, n int, keep func(*GPU) bool) {
	for _, g := range elig {
		if n == 0 {
			break
		}
		if !keep(g) {
			continue
		}
		if !sel.mdev() {
			p.GPUs = append(p.GPUs, g.Address)
			n--
			continue
		}
		for k := 0; k < units(g, sel) && n > 0; k++ {
			p.Mdevs = append(p.Mdevs, MdevPick{Parent: g.Address, Type: sel.MdevType})
			n--
		}
	}
	slices.SortFunc(p.GPUs, vfio.Address.Compare)
}

// gpuNodesFirst orders the host's nodes: those of p's GPUs first, then the
// rest, each by id.
func gpuNodesFirst(h *Host, p *Placement, nodes []Node) []*Node {
	on := map[int]bool{}
	for _, a := range p.GPUs {
		for i := range h.GPUs {
			if h.GPUs[i].Address == a {
				on[h.GPUs[i].NUMANode] = true
			}
		}
	}
	for _, m := range p.Mdevs {
		for i := range h.GPUs {
			if h.GPUs[i].Address == m.Parent {
				on[h.GPUs[i].NUMANode] = true
			}
		}
	}
	var first, rest []*Node
	for i := range nodes {
		if on[nodes[i].ID] {
			first = append(first, &nodes[i])
		} else {
			rest = append(rest, &nodes[i])
		}
	}
	return append(first, rest...)
}

// spreadMemory takes r's memory (and huge pages) from the nodes in order,
// recording each node's share in p; why not when they do not hold it.
func spreadMemory(r *Request, p *Placement, order []*Node, explain bool) string {
	left := r.MemoryMiB
	var free int64
	for _, nd := range order {
		avail := nodeMemory(r, nd)
		free += avail
		take := min(avail, left)
		if take > 0 {
			p.MemoryMiB[nd.ID] = take
			left -= take
		}
	}
	if left > 0 {
		if !explain {
			return "-"
		}
		if r.HugePageKiB > 0 {
			return fmt.Sprintf("%s free in %s huge pages of %s asked", humanMiB(free), humanKiB(r.HugePageKiB), humanMiB(r.MemoryMiB))
		}
		return fmt.Sprintf("%s free of %s asked", humanMiB(free), humanMiB(r.MemoryMiB))
	}
	return ""
}

// nodeMemory is the memory a node can give r, in MiB: its free huge pages
// of r's size when r asks for them, its free memory otherwise.
func nodeMemory(r *Request, nd *Node) int64 {
	if r.HugePageKiB > 0 {
		return int64(nd.FreeHugePages[r.HugePageKiB] * r.HugePageKiB >> 10)
	}
	return nd.FreeMemoryMiB
}

// nodeShortfall says what node nd lacks to hold all of r; "" when it
// fits. Without explain it only says whether ("-" when it does not fit).
func nodeShortfall(r *Request, nd *Node, gpus int, pinned map[int]bool, explain bool) string {
	if !explain {
		fits := gpus >= r.gpuCount() && nodeMemory(r, nd) >= r.MemoryMiB
		if r.PinCPUs {
			fits = fits && len(nd.pinnable(pinned)) >= r.VCPUs
		} else {
			fits = fits && len(nd.CPUs) >= r.VCPUs
		}
		if fits {
			return ""
		}
		return "-"
	}
	var why []string
	if n := r.gpuCount(); gpus < n {
		why = append(why, fmt.Sprintf("has %d free matching GPU%s of %d asked", gpus, plural(gpus), n))
	}
	if have := nodeMemory(r, nd); have < r.MemoryMiB {
		if r.HugePageKiB > 0 {
			why = append(why, fmt.Sprintf("has %s free in %s huge pages of %s asked", humanMiB(have), humanKiB(r.HugePageKiB), humanMiB(r.MemoryMiB)))
		} else {
			why = append(why, fmt.Sprintf("has %s free of %s asked", humanMiB(have), humanMiB(r.MemoryMiB)))
		}
	}
	if r.PinCPUs {
		if free := len(nd.pinnable(pinned)); free < r.VCPUs {
			why = append(why, fmt.Sprintf("has %d CPUs free to pin of %d vCPUs asked (%d CPUs, %d pinned by other VMs, 1 kept for emulator threads)", free, r.VCPUs, len(nd.CPUs), pinnedOn(nd, pinned)))
		}
	} else if len(nd.CPUs) < r.VCPUs {
		why = append(why, fmt.Sprintf("has %d CPUs for %d vCPUs asked", len(nd.CPUs), r.VCPUs))
	}
	return strings.Join(why, " and ")
}

func pinnedOn(nd *Node, pinned map[int]bool) int {
	n := 0
	for _, c := range nd.CPUs {
		if pinned[c] {
			n++
		}
	}
	return n
}

// gpuShortfall says how many matching GPUs h has free against r's count,
// and who holds the others.
func gpuShortfall(h *Host, r *Request, free int) string {
	sel := r.GPU.Selector
	kind := "GPU"
	if sel.mdev() {
		kind = "vGPU instance"
	}
	var matching int
	busy := map[State][]string{}
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if !sel.Matches(g) {
			continue
		}
		matching++
		if !eligible(g, sel) {
			who := g.Address.String()
			if g.Holder != "" {
				who += " by " + g.Holder
			}
			if sel.mdev() && g.State != Claimed && g.State != InUse && g.State != Quarantined {
				busy[Free] = append(busy[Free], g.Address.String())
				continue
			}
			busy[g.State] = append(busy[g.State], who)
		}
	}
	if matching == 0 {
		return fmt.Sprintf("no GPU matching %s (it has %d GPU%s)", sel, len(h.GPUs), plural(len(h.GPUs)))
	}
	s := fmt.Sprintf("%d free %s%s matching %s of %d asked", free, kind, plural(free), sel, r.GPU.Count)
	var held []string
	for _, st := range []State{Claimed, InUse, HostHeld, Quarantined, VGPUs} {
		if len(busy[st]) > 0 {
			held = append(held, fmt.Sprintf("%s: %s", st, strings.Join(busy[st], ", ")))
		}
	}
	if len(busy[Free]) > 0 {
		held = append(held, "no instances left: "+strings.Join(busy[Free], ", "))
	}
	if len(held) > 0 {
		s += " (" + strings.Join(held, "; ") + ")"
	}
	return s
}

func humanMiB(m int64) string {
	if m >= 1024 && m%1024 == 0 {
		return fmt.Sprintf("%d GiB", m>>10)
	}
	return fmt.Sprintf("%d MiB", m)
}
