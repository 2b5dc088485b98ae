package placement

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Modes of a GPU request.
const (
	// ModePassthrough passes each GPU through whole, with the rest of its
	// IOMMU group. It is the default.
	ModePassthrough = "passthrough"
	// ModeMdev gives the VM mediated devices (vGPUs) of one type, each
	// made on a GPU that offers that type.
	ModeMdev = "mdev"
)

// Policy chooses among the hosts (and NUMA nodes) that fit.
type Policy string

const (
	// Pack (the default) places on the host with the fewest free matching
	// GPUs that still fits, so whole hosts stay free for large requests.
	Pack Policy = "pack"
	// Spread places on the host with the most free matching GPUs, so VMs
	// land on different hosts.
	Spread Policy = "spread"
)

// ParsePolicy reads a policy name; empty is Pack.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", Pack:
		return Pack, nil
	case Spread:
		return Spread, nil
	}
	return "", fmt.Errorf("placement policy %q is not known: use %q (fill the fullest host that fits, the default) or %q (the emptiest)", s, Pack, Spread)
}

// Selector says which GPUs a request accepts. Zero fields accept any.
type Selector struct {
	VendorID uint16
	DeviceID uint16
	// Model matches GPUs whose model name contains it (case-insensitive),
	// or equals it exactly when ModelExact is set.
	Model      string
	ModelExact bool
	// MinMemoryGiB is the least memory a GPU must have.
	MinMemoryGiB int
	// Mode is ModePassthrough (empty means it) or ModeMdev; MdevType is
	// the mdev type id (or its vendor name) that ModeMdev asks for.
	Mode     string
	MdevType string
}

// The keys ParseSelector knows, in the order its messages list them.
var selectorKeys = []string{"vendor_id", "device_id", "model", "model_exact", "min_memory_gib", "mode", "mdev_type"}

// ParseSelector reads a selector from the key/value form a configuration
// gives it (vendor_id = "10de", model = "H100", ...). An unknown key, a
// malformed value, or an mdev_type without mode = "mdev" is refused with
// a message that names the key and what it accepts.
func ParseSelector(kv map[string]string) (Selector, error) {
	var s Selector
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := strings.TrimSpace(kv[k])
		switch k {
		case "vendor_id", "device_id":
			n, err := parsePCIID(v)
			if err != nil {
				return Selector{}, fmt.Errorf("selector %s = %q: %w", k, kv[k], err)
			}
			if k == "vendor_id" {
				s.VendorID = n
			} else {
				s.DeviceID = n
			}
		case "model":
			s.Model = v
		case "model_exact":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Selector{}, fmt.Errorf("selector model_exact = %q: use true (the model name must equal model) or false (contain it, the default)", kv[k])
			}
			s.ModelExact = b
		case "min_memory_gib":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return Selector{}, fmt.Errorf("selector min_memory_gib = %q: use a whole number of GiB, 0 or more (e.g. \"80\")", kv[k])
			}
			s.MinMemoryGiB = n
		case "mode":
			if v != ModePassthrough && v != ModeMdev {
				return Selector{}, fmt.Errorf("selector mode = %q: use %q (whole GPUs with their IOMMU group, the default) or %q (vGPUs of mdev_type)", kv[k], ModePassthrough, ModeMdev)
			}
			s.Mode = v
		case "mdev_type":
			s.MdevType = v
		default:
			return Selector{}, fmt.Errorf("selector key %q is not known; the keys are %s", k, strings.Join(selectorKeys, ", "))
		}
	}
	if s.Mode == ModeMdev && s.MdevType == "" {
		return Selector{}, fmt.Errorf("selector mode = %q needs mdev_type (e.g. mdev_type = \"nvidia-592\"; data.kohaku_host lists the types its GPUs offer)", ModeMdev)
	}
	if s.MdevType != "" && s.Mode != ModeMdev {
		return Selector{}, fmt.Errorf("selector mdev_type = %q needs mode = %q (whole-GPU passthrough takes no mdev type)", s.MdevType, ModeMdev)
	}
	return s, nil
}

// parsePCIID reads a 16-bit PCI id in hex: "10de" or "0x10de".
func parsePCIID(s string) (uint16, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	n, err := strconv.ParseUint(t, 16, 16)
	if err != nil || len(t) == 0 || len(t) > 4 || n == 0 {
		return 0, fmt.Errorf("use four hex digits as lspci -nn shows them, e.g. \"10de\" (NVIDIA) or \"2330\"")
	}
	return uint16(n), nil
}

func (s Selector) mdev() bool { return s.Mode == ModeMdev }

// Matches reports whether g is a GPU of the kind s asks for (whatever its
// state).
func (s Selector) Matches(g *GPU) bool {
	if s.VendorID != 0 && g.VendorID != s.VendorID {
		return false
	}
	if s.DeviceID != 0 && g.DeviceID != s.DeviceID {
		return false
	}
	if s.Model != "" {
		if s.ModelExact && g.Model != s.Model {
			return false
		}
		if !s.ModelExact && !strings.Contains(strings.ToLower(g.Model), strings.ToLower(s.Model)) {
			return false
		}
	}
	if s.MinMemoryGiB > 0 && g.MemoryGiB < s.MinMemoryGiB {
		return false
	}
	if s.mdev() && g.mdevType(s.MdevType) == nil {
		return false
	}
	return true
}

// mdevType returns the GPU's mdev type with id (or vendor name) t, or nil.
func (g *GPU) mdevType(t string) *MdevType {
	for i := range g.MdevTypes {
		if g.MdevTypes[i].ID == t || (g.MdevTypes[i].Name != "" && g.MdevTypes[i].Name == t) {
			return &g.MdevTypes[i]
		}
	}
	return nil
}

// String describes the selector for messages, e.g. `model ~ "H100", >= 80 GiB`.
func (s Selector) String() string {
	var parts []string
	if s.VendorID != 0 {
		parts = append(parts, fmt.Sprintf("vendor %04x", s.VendorID))
	}
	if s.DeviceID != 0 {
		parts = append(parts, fmt.Sprintf("device %04x", s.DeviceID))
	}
	if s.Model != "" {
		op := "~"
		if s.ModelExact {
			op = "="
		}
		parts = append(parts, fmt.Sprintf("model %s %q", op, s.Model))
	}
	if s.MinMemoryGiB > 0 {
		parts = append(parts, fmt.Sprintf(">= %d GiB", s.MinMemoryGiB))
	}
	if s.mdev() {
		parts = append(parts, "mdev "+s.MdevType)
	}
	if len(parts) == 0 {
		return "any GPU"
	}
	return strings.Join(parts, ", ")
}

// GPUAsk is the GPU part of a request.
type GPUAsk struct {
	Count    int
	Selector Selector
}

// Request is what one VM asks of the fleet.
type Request struct {
	// Name is the VM's name, for messages and as the holder of what the
	// planner deducts.
	Name string
	// GPU is nil for a VM without GPUs.
	GPU *GPUAsk
	// NUMALocal asks for all GPUs, vCPUs and memory on one NUMA node.
	NUMALocal bool
	// Hosts limits placement to these hosts of the fleet; empty is all.
	Hosts     []string
	VCPUs     int
	MemoryMiB int64
	// HugePageKiB backs the memory with huge pages of this size; 0 is none.
	HugePageKiB uint64
	// PinCPUs pins each vCPU to its own host CPU that no other VM has
	// pinned (on the GPUs' node), with the emulator threads apart.
	PinCPUs bool
	// Policy, when set, chooses among the hosts that fit this request
	// instead of the planner's own policy.
	Policy Policy
}

func (r *Request) gpuCount() int {
	if r.GPU == nil {
		return 0
	}
	return r.GPU.Count
}

// String describes the request for messages.
func (r *Request) String() string {
	var parts []string
	if n := r.gpuCount(); n > 0 {
		kind := "GPU"
		if r.GPU.Selector.mdev() {
			kind = "vGPU"
		}
		parts = append(parts, fmt.Sprintf("%d %s%s (%s)", n, kind, plural(n), r.GPU.Selector))
	}
	parts = append(parts, fmt.Sprintf("%d vCPU%s", r.VCPUs, plural(r.VCPUs)), fmt.Sprintf("%d MiB", r.MemoryMiB))
	if r.HugePageKiB > 0 {
		parts = append(parts, "huge pages of "+humanKiB(r.HugePageKiB))
	}
	if r.NUMALocal {
		parts = append(parts, "NUMA-local")
	}
	if r.PinCPUs {
		parts = append(parts, "pinned")
	}
	return strings.Join(parts, ", ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func humanKiB(k uint64) string {
	if k >= 1<<20 {
		return fmt.Sprintf("%d GiB", k>>20)
	}
	return fmt.Sprintf("%d MiB", k>>10)
}

// AttributeError is a request the configuration must change: Attribute
// names the attribute (for a diagnostic on its line), Err says what is
// wrong and what is right.
type AttributeError struct {
	Attribute string
	Err       error
}

func (e *AttributeError) Error() string { return e.Attribute + ": " + e.Err.Error() }
func (e *AttributeError) Unwrap() error { return e.Err }

// ValidateRequest checks a request on its own, before any host is read: a
// GPU count of at least 1, vCPUs and memory, a huge page size of 2 MiB or
// 1 GiB, and that the hosts list names no host twice.
func ValidateRequest(r *Request) error {
	if r.GPU != nil && r.GPU.Count < 1 {
		return &AttributeError{Attribute: "gpu.count", Err: fmt.Errorf("%d GPUs asked: ask for 1 or more, or leave the gpu block out for a VM without GPUs", r.GPU.Count)}
	}
	if r.VCPUs < 1 {
		return &AttributeError{Attribute: "vcpu", Err: fmt.Errorf("%d vCPUs asked: a VM needs at least 1", r.VCPUs)}
	}
	if r.MemoryMiB < 1 {
		return &AttributeError{Attribute: "memory_mib", Err: fmt.Errorf("%d MiB asked: a VM needs memory", r.MemoryMiB)}
	}
	if r.HugePageKiB != 0 && r.HugePageKiB != 2048 && r.HugePageKiB != 1<<20 {
		return &AttributeError{Attribute: "hugepages", Err: fmt.Errorf("pages of %d KiB: use 2048 (2 MiB) or 1048576 (1 GiB)", r.HugePageKiB)}
	}
	if r.HugePageKiB != 0 && uint64(r.MemoryMiB)<<10%r.HugePageKiB != 0 {
		return &AttributeError{Attribute: "memory_mib", Err: fmt.Errorf("%d MiB is not a whole number of %s huge pages: round it to a multiple of %d MiB", r.MemoryMiB, humanKiB(r.HugePageKiB), r.HugePageKiB>>10)}
	}
	seen := map[string]bool{}
	for _, h := range r.Hosts {
		if seen[h] {
			return &AttributeError{Attribute: "hosts", Err: fmt.Errorf("host %q is listed twice", h)}
		}
		seen[h] = true
	}
	return nil
}

// ValidateAgainstFleet checks a request against what the fleet's hosts
// have at all (whatever is free now): the hosts it names exist, and some
// allowed host has as many GPUs matching the selector as it asks for (on
// one NUMA node when NUMA-local). It is the check a plan can make; Place
// says whether they are free.
func ValidateAgainstFleet(r *Request, hosts []*Host) error {
	known := map[string]bool{}
	var names []string
	for _, h := range hosts {
		known[h.Name] = true
		names = append(names, h.Name)
	}
	slices.Sort(names)
	for _, h := range r.Hosts {
		if !known[h] {
			return &AttributeError{Attribute: "hosts", Err: fmt.Errorf("host %q is not in the provider's hosts (%s)", h, strings.Join(names, ", "))}
		}
	}
	n := r.gpuCount()
	if n == 0 {
		return nil
	}
	sel := r.GPU.Selector
	bestHost, bestHostN, bestNode, bestNodeN := "", 0, "", 0
	// hosts in name order and nodes by id, so the host and node a
	// message names are always the same
	sorted := slices.Clone(hosts)
	slices.SortFunc(sorted, func(a, b *Host) int { return strings.Compare(a.Name, b.Name) })
	for _, h := range sorted {
		if !allowed(r, h.Name) {
			continue
		}
		perNode := map[int]int{}
		total := 0
		for i := range h.GPUs {
			if sel.Matches(&h.GPUs[i]) {
				total++
				perNode[h.GPUs[i].NUMANode]++
			}
		}
		if total > bestHostN {
			bestHost, bestHostN = h.Name, total
		}
		for _, id := range slices.Sorted(maps.Keys(perNode)) {
			if c := perNode[id]; c > bestNodeN {
				bestNode, bestNodeN = fmt.Sprintf("%s node %d", h.Name, id), c
			}
		}
	}
	if bestHostN == 0 {
		return &AttributeError{Attribute: "gpu.selector", Err: fmt.Errorf("no host%s has a GPU matching %s; data.kohaku_host lists each host's GPUs with their vendor, device and model", hostScope(r), sel)}
	}
	if sel.mdev() {
		return nil // instances, not GPUs: a GPU may offer several
	}
	if n > bestHostN {
		return &AttributeError{Attribute: "gpu.count", Err: fmt.Errorf("%d GPUs asked, but no host%s has more than %d matching %s (%s): ask for at most %d per VM", n, hostScope(r), bestHostN, sel, bestHost, bestHostN)}
	}
	if r.NUMALocal && n > bestNodeN {
		return &AttributeError{Attribute: "numa_local", Err: fmt.Errorf("%d GPUs asked on one NUMA node, but no node%s has more than %d matching %s (%s): ask for at most %d, or set numa_local = false", n, hostScope(r), bestNodeN, sel, bestNode, bestNodeN)}
	}
	return nil
}

func hostScope(r *Request) string {
	if len(r.Hosts) == 0 {
		return ""
	}
	return " of " + strings.Join(r.Hosts, ", ")
}

func allowed(r *Request, host string) bool {
	return len(r.Hosts) == 0 || slices.Contains(r.Hosts, host)
}
