package domain

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// NUMACell binds one guest NUMA cell to a host NUMA node: the cell's vCPUs
// run only on CPUs (host CPU ids in cpuset syntax, e.g. "8-15,24-31") and
// its memory comes only from HostNode (numatune mode strict).
//
// A VM with one cell is bound without a guest NUMA topology: all its vCPUs
// run on the node's CPUs and all its memory is on the node. A VM with
// several cells gets a guest topology that mirrors them: vCPUs and memory
// are split evenly between the cells, in order, each cell pinned to its
// node. Spec.NUMA comes from the host (the NUMA node of a VM's GPUs), not
// from the user, so its errors are not attribute errors.
type NUMACell struct {
	HostNode int    `json:"host_node"`
	CPUs     string `json:"cpus"`
}

// CPUTopology is the guest's CPU topology; Sockets*Cores*Threads must be
// the VM's vCPU count.
type CPUTopology struct {
	Sockets int `json:"sockets"`
	Cores   int `json:"cores"`
	Threads int `json:"threads"`
}

// Huge page sizes guests can be backed with, in KiB.
const (
	HugePage2MiB = 2048
	HugePage1GiB = 1 << 20
)

// ParseCPUSet reads libvirt's cpuset syntax ("0-3,8,10-11"; libvirt also
// accepts exclusions, "^2", which Kohaku never writes) into sorted,
// distinct CPU ids.
func ParseCPUSet(s string) ([]int, error) {
	var out []int
	var excl []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("cpuset %q has an empty element", s)
		}
		neg := strings.HasPrefix(part, "^")
		part = strings.TrimPrefix(part, "^")
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpuset %q: %q is not a CPU id", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpuset %q: %q is not a CPU range", s, part)
			}
		}
		for c := a; c <= b; c++ {
			if neg {
				excl = append(excl, c)
			} else {
				out = append(out, c)
			}
		}
	}
	out = slices.DeleteFunc(out, func(c int) bool { return slices.Contains(excl, c) })
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("cpuset %q names no CPU", s)
	}
	return out, nil
}

// FormatCPUSet writes CPU ids as ranges, e.g. [0 1 2 3 8] -> "0-3,8", the
// form libvirt writes cpusets back in.
func FormatCPUSet(cpus []int) string {
	s := slices.Clone(cpus)
	slices.Sort(s)
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// canonicalCPUSet is s in FormatCPUSet's form, or s when it does not parse
// (Validate reports it).
func canonicalCPUSet(s string) string {
	c, err := ParseCPUSet(s)
	if err != nil {
		return s
	}
	return FormatCPUSet(c)
}

// NUMANodes lists the host nodes of s's cells, in cell order.
func (s Spec) NUMANodes() []int {
	var out []int
	for _, c := range s.NUMA {
		out = append(out, c.HostNode)
	}
	return out
}

// CellSplit returns the first vCPU and the vCPU count, and the memory in
// MiB, of cell i of k: an even split, the last cell taking the remainder.
func CellSplit(vcpu, memMiB, i, k int) (first, count, mib int) {
	first = i * vcpu / k
	count = (i+1)*vcpu/k - first
	mib = memMiB / k
	if i == k-1 {
		mib = memMiB - mib*(k-1)
	}
	return first, count, mib
}

// buildNUMA adds the placement, huge pages and CPU topology of n to dom.
func buildNUMA(n Spec, dom *libvirtxml.Domain) {
	if n.Topology != nil {
		dom.CPU.Topology = &libvirtxml.DomainCPUTopology{Sockets: n.Topology.Sockets, Dies: 1, Cores: n.Topology.Cores, Threads: n.Topology.Threads}
	}
	if n.HugePageKiB > 0 {
		if dom.MemoryBacking == nil {
			dom.MemoryBacking = &libvirtxml.DomainMemoryBacking{}
		}
		dom.MemoryBacking.MemoryHugePages = &libvirtxml.DomainMemoryHugepages{
			Hugepages: []libvirtxml.DomainMemoryHugepage{{Size: uint(n.HugePageKiB), Unit: "KiB"}},
		}
	}
	switch k := len(n.NUMA); {
	case k == 1:
		dom.VCPU.CPUSet = n.NUMA[0].CPUs
		dom.NUMATune = &libvirtxml.DomainNUMATune{Memory: &libvirtxml.DomainNUMATuneMemory{Mode: "strict", Nodeset: strconv.Itoa(n.NUMA[0].HostNode)}}
	case k > 1:
		var all []int
		var nodes []int
		tune := &libvirtxml.DomainNUMATune{}
		cputune := &libvirtxml.DomainCPUTune{}
		numa := &libvirtxml.DomainNuma{}
		for i, c := range n.NUMA {
			cpus, _ := ParseCPUSet(c.CPUs) // Validate has accepted it
			all = append(all, cpus...)
			nodes = append(nodes, c.HostNode)
			first, count, mib := CellSplit(n.VCPU, n.MemoryMiB, i, k)
			numa.Cell = append(numa.Cell, libvirtxml.DomainCell{
				ID: new(uint(i)), CPUs: FormatCPUSet(seq(first, count)), Memory: uint(mib), Unit: "MiB",
			})
			tune.MemNodes = append(tune.MemNodes, libvirtxml.DomainNUMATuneMemNode{CellID: uint(i), Mode: "strict", Nodeset: strconv.Itoa(c.HostNode)})
			for v := first; v < first+count; v++ {
				cputune.VCPUPin = append(cputune.VCPUPin, libvirtxml.DomainCPUTuneVCPUPin{VCPU: uint(v), CPUSet: c.CPUs})
			}
		}
		tune.Memory = &libvirtxml.DomainNUMATuneMemory{Mode: "strict", Nodeset: FormatCPUSet(nodes)}
		dom.VCPU.CPUSet = FormatCPUSet(all)
		dom.NUMATune = tune
		dom.CPUTune = cputune
		dom.CPU.Numa = numa
	}
	if len(n.CPUPins) > 0 {
		// One to one, inside the node's cpuset when bound to one.
		t := &libvirtxml.DomainCPUTune{}
		for v, c := range n.CPUPins {
			t.VCPUPin = append(t.VCPUPin, libvirtxml.DomainCPUTuneVCPUPin{VCPU: uint(v), CPUSet: strconv.Itoa(c)})
		}
		if n.EmulatorCPUs != "" {
			t.EmulatorPin = &libvirtxml.DomainCPUTuneEmulatorPin{CPUSet: n.EmulatorCPUs}
		}
		dom.CPUTune = t
	}
}

// parsePins reads back the one-to-one pins buildNUMA writes: every vCPU
// pinned to a single host CPU, and where the emulator threads run. Pins
// Kohaku did not write (no placement in its metadata) are the domain's
// own, not read into the spec, and Merge keeps them.
func (o *Observed) parsePins(dom *libvirtxml.Domain) {
	t, s := dom.CPUTune, &o.Spec
	if o.Metadata == nil || !o.Metadata.Placed || t == nil || len(t.VCPUPin) == 0 || len(t.VCPUPin) != s.VCPU || len(s.NUMA) > 1 {
		return
	}
	pins := make([]int, s.VCPU)
	for _, p := range t.VCPUPin {
		c, err := strconv.Atoi(strings.TrimSpace(p.CPUSet))
		if err != nil || c < 0 || int(p.VCPU) >= s.VCPU {
			return // not one to one: the domain's own tuning
		}
		pins[p.VCPU] = c
	}
	s.CPUPins = pins
	if t.EmulatorPin != nil {
		s.EmulatorCPUs = canonicalCPUSet(t.EmulatorPin.CPUSet)
	}
}

func seq(first, count int) []int {
	out := make([]int, count)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// parseNUMA reads back what buildNUMA writes. Placements Build does not
// write (another numatune mode, a cpuset without numatune, cells without
// memnodes) are reported as unrecognized.
func (o *Observed) parseNUMA(dom *libvirtxml.Domain) {
	s := &o.Spec
	if dom.CPU != nil && dom.CPU.Topology != nil {
		t := dom.CPU.Topology
		s.Topology = &CPUTopology{Sockets: t.Sockets, Cores: t.Cores, Threads: t.Threads}
		if t.Dies > 1 || t.Clusters > 1 {
			o.unrecognized("CPU topology with %d dies and %d clusters", t.Dies, t.Clusters)
		}
	}
	if mb := dom.MemoryBacking; mb != nil && mb.MemoryHugePages != nil {
		pages := mb.MemoryHugePages.Hugepages
		switch {
		case len(pages) == 0:
			o.unrecognized("huge pages of the host's default size")
		case len(pages) > 1 || pages[0].Nodeset != "":
			o.unrecognized("huge pages of several sizes or per guest cell")
		default:
			kib, err := toKiB(uint64(pages[0].Size), cmp.Or(pages[0].Unit, "KiB"))
			if err != nil {
				o.unrecognized("huge pages of %d %s", pages[0].Size, pages[0].Unit)
			} else {
				s.HugePageKiB = int(kib)
			}
		}
	}
	tune := dom.NUMATune
	cpuset := ""
	if dom.VCPU != nil {
		cpuset = dom.VCPU.CPUSet
	}
	var cells []libvirtxml.DomainCell
	if dom.CPU != nil && dom.CPU.Numa != nil {
		cells = dom.CPU.Numa.Cell
	}
	switch {
	case tune == nil && len(cells) == 0:
		if cpuset != "" {
			o.unrecognized("vCPUs pinned to host CPUs %s without a NUMA memory binding", cpuset)
		}
	case tune != nil && len(cells) == 0 && len(tune.MemNodes) == 0 && tune.Memory != nil && tune.Memory.Mode == "strict" && cpuset != "":
		node, err := strconv.Atoi(tune.Memory.Nodeset)
		if err != nil {
			o.unrecognized("memory bound to host NUMA nodes %s", tune.Memory.Nodeset)
			return
		}
		s.NUMA = []NUMACell{{HostNode: node, CPUs: canonicalCPUSet(cpuset)}}
	case tune != nil && len(cells) > 0 && len(tune.MemNodes) == len(cells):
		pins := map[uint]string{}
		if dom.CPUTune != nil {
			for _, p := range dom.CPUTune.VCPUPin {
				pins[p.VCPU] = p.CPUSet
			}
		}
		for i, mn := range tune.MemNodes {
			node, err := strconv.Atoi(mn.Nodeset)
			if err != nil || mn.Mode != "strict" || mn.CellID != uint(i) {
				o.unrecognized("guest NUMA cell %d bound to host nodes %s (%s)", mn.CellID, mn.Nodeset, mn.Mode)
				s.NUMA = nil
				return
			}
			first, _, _ := CellSplit(s.VCPU, s.MemoryMiB, i, len(cells))
			s.NUMA = append(s.NUMA, NUMACell{HostNode: node, CPUs: canonicalCPUSet(pins[uint(first)])})
		}
	default:
		o.unrecognized("a NUMA placement Kohaku does not write (%d guest cells)", len(cells))
	}
}

// numa checks the placement, huge pages and CPU topology.
func (v *validator) numa(s Spec) {
	if t := s.Topology; t != nil {
		switch {
		case t.Sockets < 1 || t.Cores < 1 || t.Threads < 1:
			v.add("cpu_topology", "{ sockets = 1, cores = 4, threads = 2 } for vcpu = 8", "sockets, cores and threads must each be at least 1 (got %d, %d, %d)", t.Sockets, t.Cores, t.Threads)
		case t.Sockets*t.Cores*t.Threads != s.VCPU:
			v.add("cpu_topology", fmt.Sprintf("{ sockets = 1, cores = %d, threads = 1 } for vcpu = %d", max(s.VCPU, 1), s.VCPU),
				"sockets x cores x threads is %d x %d x %d = %d, not vcpu (%d)", t.Sockets, t.Cores, t.Threads, t.Sockets*t.Cores*t.Threads, s.VCPU)
		}
	}
	k := max(len(s.NUMA), 1)
	switch s.HugePageKiB {
	case 0:
	case HugePage2MiB, HugePage1GiB:
		page := s.HugePageKiB >> 10
		if s.MemoryMiB%(page*k) != 0 {
			what := fmt.Sprintf("%d MiB is not a whole number of %d MiB huge pages", s.MemoryMiB, page)
			if k > 1 {
				what = fmt.Sprintf("%d MiB does not split into %d guest NUMA cells of whole %d MiB huge pages", s.MemoryMiB, k, page)
			}
			v.add("memory_mib", strconv.Itoa(max(1, s.MemoryMiB/(page*k)+1)*page*k), "%s", what)
		}
	default:
		v.add("hugepages.page_size_mib", "2, or 1024 where the host has 1 GiB pages", "%d KiB is not a huge page size (2 MiB or 1 GiB)", s.HugePageKiB)
	}
	if len(s.NUMA) > s.VCPU && s.VCPU >= 1 {
		v.add("vcpu", strconv.Itoa(len(s.NUMA)), "%d vCPUs cannot be spread over %d NUMA nodes (the nodes of "+
			"the VM's GPUs): give it at least one vCPU per node, or set numa_placement = \"none\"", s.VCPU, len(s.NUMA))
	}
	if len(s.CPUPins) > 0 {
		switch {
		case len(s.CPUPins) != s.VCPU:
			v.add("vcpu", strconv.Itoa(len(s.CPUPins)), "%d host CPUs are pinned for %d vCPUs: one each", len(s.CPUPins), s.VCPU)
		case len(s.NUMA) > 1:
			v.add("vcpu", "the vCPUs of one NUMA node", "pinned vCPUs go with one NUMA node, not %d", len(s.NUMA))
		}
		for i, c := range s.CPUPins {
			if c < 0 || slices.Contains(s.CPUPins[:i], c) {
				v.add("vcpu", "distinct host CPUs", "host CPU %d is negative or pinned twice", c)
			}
		}
		if s.EmulatorCPUs != "" {
			if _, err := ParseCPUSet(s.EmulatorCPUs); err != nil {
				v.add("vcpu", `"7"`, "emulator CPUs: %v", err)
			}
		}
	}
	seen := map[int]bool{}
	for i, c := range s.NUMA {
		if c.HostNode < 0 || seen[c.HostNode] {
			v.add(fmt.Sprintf("numa[%d]", i), "host node 1", "host node %d is negative or repeated", c.HostNode)
		}
		seen[c.HostNode] = true
		if _, err := ParseCPUSet(c.CPUs); err != nil {
			v.add(fmt.Sprintf("numa[%d]", i), `"8-15"`, "%v", err)
		}
	}
}
