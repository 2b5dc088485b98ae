package placement

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

func mustPlace(t *testing.T, r *Request, hosts []*Host, policy Policy) *Placement {
	t.Helper()
	p, err := Place(r, hosts, policy)
	if err != nil {
		t.Fatalf("Place(%s): %v", r, err)
	}
	return p
}

func TestPlace_hgxNUMALocalPicksNodeZeroByTieBreak(t *testing.T) {
	t.Parallel()
	r := &Request{Name: "train", GPU: h100s(2), NUMALocal: true, VCPUs: 16, MemoryMiB: 64 << 10}
	p := mustPlace(t, r, []*Host{hgx("hgx1")}, Pack)
	if p.Host != "hgx1" || p.NUMANode != 0 {
		t.Fatalf("placed on %s node %d, want hgx1 node 0 (equal nodes: lowest id)", p.Host, p.NUMANode)
	}
	if want := []vfio.Address{addr(0x18), addr(0x2a)}; !slices.Equal(p.GPUs, want) {
		t.Errorf("GPUs %v, want %v (lowest addresses of the node)", p.GPUs, want)
	}
	if p.MemoryMiB[0] != 64<<10 || len(p.MemoryMiB) != 1 {
		t.Errorf("memory by node %v, want all 64 GiB on node 0", p.MemoryMiB)
	}
	if p.CPUs != nil {
		t.Errorf("CPUs pinned %v without pin_cpus", p.CPUs)
	}
}

func TestPlanner_packFillsOneNodeThenTheOtherThenSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	src := newSource(hgx("hgx1"))
	pl := NewPlanner(src, []string{"hgx1"}, Pack)
	want := []struct {
		node int
		gpus []uint8
	}{{0, []uint8{0x18, 0x2a}}, {0, []uint8{0x3a, 0x5d}}, {1, []uint8{0x9a, 0xab}}, {1, []uint8{0xba, 0xdb}}}
	for i, w := range want {
		r := &Request{Name: "vm" + string(rune('a'+i)), GPU: h100s(2), NUMALocal: true, VCPUs: 8, MemoryMiB: 32 << 10}
		p, err := pl.Place(context.Background(), r)
		if err != nil {
			t.Fatalf("VM %d: %v", i, err)
		}
		var got []uint8
		for _, a := range p.GPUs {
			got = append(got, a.Bus)
		}
		if p.NUMANode != w.node || !slices.Equal(got, w.gpus) {
			t.Errorf("VM %d on node %d with buses %x, want node %d with %x", i, p.NUMANode, got, w.node, w.gpus)
		}
	}
	_, err := pl.Place(context.Background(), &Request{Name: "late", GPU: h100s(1), VCPUs: 4, MemoryMiB: 1024})
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Fatalf("fifth request: %v, want a *NoFitError", err)
	}
	for _, s := range []string{"hgx1: 0 free GPUs matching", "of 1 asked", "0000:18:00.0 by vma", "0000:db:00.0 by vmd"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if src.reads["hgx1"] != 1 {
		t.Errorf("hgx1 read %d times for 5 requests, want once", src.reads["hgx1"])
	}
}

func TestPlace_spreadTakesTheEmptiestHost(t *testing.T) {
	t.Parallel()
	pl := NewPlanner(newSource(hgx("hgx-a"), hgx("hgx-b")), []string{"hgx-b", "hgx-a"}, Spread)
	var hosts []string
	for i := range 4 {
		p, err := pl.Place(context.Background(), &Request{Name: "vm" + string(rune('0'+i)), GPU: h100s(1), VCPUs: 4, MemoryMiB: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, p.Host)
	}
	if want := []string{"hgx-a", "hgx-b", "hgx-a", "hgx-b"}; !slices.Equal(hosts, want) {
		t.Errorf("spread placed on %v, want %v", hosts, want)
	}
	// pack keeps one host whole
	pl = NewPlanner(newSource(hgx("hgx-a"), hgx("hgx-b")), []string{"hgx-a", "hgx-b"}, Pack)
	hosts = nil
	for i := range 4 {
		p, err := pl.Place(context.Background(), &Request{Name: "vm" + string(rune('0'+i)), GPU: h100s(1), VCPUs: 4, MemoryMiB: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, p.Host)
	}
	if want := []string{"hgx-a", "hgx-a", "hgx-a", "hgx-a"}; !slices.Equal(hosts, want) {
		t.Errorf("pack placed on %v, want %v", hosts, want)
	}
}

func TestPlace_mixedFleet(t *testing.T) {
	t.Parallel()
	fleet := []*Host{hgx("gpu1"), l40sHost("gpu2"), cpuHost("cpu1")}
	cases := []struct {
		name string
		r    *Request
		host string
	}{
		{"CPU-only VM packs onto the host without GPUs", &Request{VCPUs: 8, MemoryMiB: 16 << 10}, "cpu1"},
		{"H100 by model", &Request{GPU: h100s(1), VCPUs: 8, MemoryMiB: 16 << 10}, "gpu1"},
		{"L40S by device id", &Request{GPU: &GPUAsk{Count: 2, Selector: Selector{VendorID: nvidia, DeviceID: l40s}}, NUMALocal: true, VCPUs: 8, MemoryMiB: 16 << 10}, "gpu2"},
		{"any GPU of 80 GiB", &Request{GPU: &GPUAsk{Count: 1, Selector: Selector{MinMemoryGiB: 80}}, VCPUs: 8, MemoryMiB: 16 << 10}, "gpu1"},
		{"any GPU packs onto the host with fewer free", &Request{GPU: &GPUAsk{Count: 1}, VCPUs: 8, MemoryMiB: 16 << 10}, "gpu2"},
		{"exact model", &Request{GPU: &GPUAsk{Count: 1, Selector: Selector{Model: l40sName, ModelExact: true}}, VCPUs: 8, MemoryMiB: 16 << 10}, "gpu2"},
		{"CPU-only VM bigger than the CPU host", &Request{VCPUs: 40, MemoryMiB: 300 << 10}, "gpu2"},
		{"hosts allow-list", &Request{VCPUs: 2, MemoryMiB: 1024, Hosts: []string{"gpu1"}}, "gpu1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.r.Name = "vm"
			if p := mustPlace(t, c.r, fleet, Pack); p.Host != c.host {
				t.Errorf("placed on %s, want %s", p.Host, c.host)
			}
		})
	}
}

func TestPlace_noFitNamesWhatEachHostLacks(t *testing.T) {
	t.Parallel()
	gpu1 := hgx("gpu1")
	for i := range gpu1.GPUs {
		switch {
		case i == 0:
			gpu1.GPUs[i].State, gpu1.GPUs[i].Holder = HostHeld, "process 4242 (python3)"
		case i == 1:
			gpu1.GPUs[i].State, gpu1.GPUs[i].Holder = Quarantined, "reset failed after vm-old"
		case i == 2:
			gpu1.GPUs[i].State, gpu1.GPUs[i].Holder = InUse, "handmade (by hand, no claim)"
		case i < 8 && i != 3:
			gpu1.GPUs[i].State, gpu1.GPUs[i].Holder = Claimed, "vm-b"
		}
	}
	gpu2 := hgx("gpu2")
	gpu2.Nodes[0].FreeMemoryMiB = 30 << 10
	gpu2.Nodes[1].FreeMemoryMiB = 20 << 10
	fleet := []*Host{downHost("gpu3", "connection refused"), gpu2, gpu1, l40sHost("gpu4")}
	r := &Request{Name: "big", GPU: h100s(2), NUMALocal: true, VCPUs: 16, MemoryMiB: 64 << 10}
	_, err := Place(r, fleet, Pack)
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Fatalf("Place: %v, want a *NoFitError", err)
	}
	if len(nf.Misses) != 4 {
		t.Fatalf("misses %v, want one per host", nf.Misses)
	}
	msg := err.Error()
	for _, s := range []string{
		"no host can take big (2 GPUs (vendor 10de, model ~ \"H100\"), 16 vCPUs, 65536 MiB, NUMA-local)",
		"gpu1: 1 free GPU matching vendor 10de, model ~ \"H100\" of 2 asked (claimed: 0000:9a:00.0 by vm-b",
		"in use: 0000:3a:00.0 by handmade (by hand, no claim)",
		"held by a host process: 0000:18:00.0 by process 4242 (python3)",
		"quarantined: 0000:2a:00.0 by reset failed after vm-old",
		"gpu2: no NUMA node holds it all: node 0 has 30 GiB free of 64 GiB asked, node 1 has 20 GiB free of 64 GiB asked",
		"gpu3: down (connection refused)",
		"gpu4: no GPU matching vendor 10de, model ~ \"H100\" (it has 4 GPUs)",
	} {
		if !strings.Contains(msg, s) {
			t.Errorf("error does not say %q:\n%s", s, msg)
		}
	}
	// hosts in name order, whatever order they came in
	var names []string
	for _, m := range nf.Misses {
		names = append(names, m.Host)
	}
	if !slices.IsSorted(names) {
		t.Errorf("misses in order %v, want sorted by host name", names)
	}
}

func TestPlace_tieBreakIsStableUnderInputOrder(t *testing.T) {
	t.Parallel()
	r := &Request{Name: "vm", GPU: h100s(1), NUMALocal: true, VCPUs: 4, MemoryMiB: 4096}
	fleet := []*Host{hgx("c"), hgx("a"), hgx("b"), l40sHost("d")}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		rng.Shuffle(len(fleet), func(i, j int) { fleet[i], fleet[j] = fleet[j], fleet[i] })
		p := mustPlace(t, r, fleet, Pack)
		if p.Host != "a" || p.NUMANode != 0 || p.GPUs[0] != addr(0x18) {
			t.Fatalf("fleet order %v: placed on %s node %d %v, want a node 0 0000:18:00.0", hostNames(fleet), p.Host, p.NUMANode, p.GPUs)
		}
		if s := mustPlace(t, r, fleet, Spread); s.Host != "a" {
			t.Fatalf("spread over equal hosts chose %s, want a (name order)", s.Host)
		}
	}
}

func hostNames(hs []*Host) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

func TestPlace_NUMALocalNeedsGPUsAndMemoryOnOneNode(t *testing.T) {
	t.Parallel()
	h := hgx("hgx1")
	// three free on node 0, two on node 1
	h.GPUs[0].State, h.GPUs[5].State, h.GPUs[6].State = Claimed, Claimed, Claimed
	r := &Request{Name: "vm", GPU: h100s(4), NUMALocal: true, VCPUs: 8, MemoryMiB: 8 << 10}
	_, err := Place(r, []*Host{h}, Pack)
	if err == nil || !strings.Contains(err.Error(), "node 0 has 3 free matching GPUs of 4 asked, node 1 has 2 free matching GPUs of 4 asked") {
		t.Fatalf("4 NUMA-local GPUs over 3+2 free: %v", err)
	}
	// without NUMA-locality the same request fits, the GPUs as close as they can be
	r.NUMALocal = false
	p := mustPlace(t, r, []*Host{h}, Pack)
	if len(p.GPUs) != 4 || p.NUMANode != -1 {
		t.Fatalf("placement %+v", p)
	}
	// vCPUs beyond the node's CPUs
	r = &Request{Name: "vm", GPU: h100s(1), NUMALocal: true, VCPUs: 60, MemoryMiB: 8 << 10}
	if _, err := Place(r, []*Host{hgx("hgx1")}, Pack); err == nil || !strings.Contains(err.Error(), "node 0 has 56 CPUs for 60 vCPUs asked") {
		t.Fatalf("60 NUMA-local vCPUs on a 56-CPU node: %v", err)
	}
	// huge pages count per node
	r = &Request{Name: "vm", GPU: h100s(1), NUMALocal: true, VCPUs: 4, MemoryMiB: 100 << 10, HugePageKiB: 2048}
	if _, err := Place(r, []*Host{hgx("hgx1")}, Pack); err == nil || !strings.Contains(err.Error(), "node 1 has 64 GiB free in 2 MiB huge pages of 100 GiB asked") {
		t.Fatalf("100 GiB of huge pages on nodes with 64: %v", err)
	}
}

func TestPlace_pinningKeepsTheEmulatorCPUApartAndRunsOut(t *testing.T) {
	t.Parallel()
	pl := NewPlanner(newSource(hgx("hgx1")), []string{"hgx1"}, Pack)
	ctx := context.Background()
	r := &Request{Name: "a", GPU: h100s(1), NUMALocal: true, PinCPUs: true, VCPUs: 50, MemoryMiB: 8 << 10}
	a, err := pl.Place(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.CPUs, cpuRange(0, 50)) || !slices.Equal(a.EmulatorCPUs, []int{55}) {
		t.Fatalf("pinned %v emulator %v, want CPUs 0-49 and emulator 55", a.CPUs, a.EmulatorCPUs)
	}
	// node 0 has 5 CPUs left to pin: 50-54 (55 is the emulator's)
	b, err := pl.Place(ctx, &Request{Name: "b", GPU: h100s(1), NUMALocal: true, PinCPUs: true, VCPUs: 5, MemoryMiB: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if b.NUMANode != 0 || !slices.Equal(b.CPUs, cpuRange(50, 5)) {
		t.Fatalf("b on node %d pinned %v, want node 0 CPUs 50-54", b.NUMANode, b.CPUs)
	}
	// node 0 has two GPUs but no CPU left: c goes to node 1
	c, err := pl.Place(ctx, &Request{Name: "c", GPU: h100s(2), NUMALocal: true, PinCPUs: true, VCPUs: 55, MemoryMiB: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if c.NUMANode != 1 || c.CPUs[0] != 56 || c.CPUs[54] != 110 || c.EmulatorCPUs[0] != 111 {
		t.Fatalf("c on node %d pinned %v emulator %v", c.NUMANode, c.CPUs, c.EmulatorCPUs)
	}
	_, err = pl.Place(ctx, &Request{Name: "d", GPU: h100s(1), NUMALocal: true, PinCPUs: true, VCPUs: 1, MemoryMiB: 8 << 10})
	for _, s := range []string{"node 0 has 0 CPUs free to pin of 1 vCPUs asked (56 CPUs, 55 pinned by other VMs, 1 kept for emulator threads)", "node 1 has 0 CPUs free to pin"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("pinning a full host: %v, want it to say %q", err, s)
		}
	}
	// unpinned VMs still fit: pinning takes CPUs from pinned VMs only
	if _, err := pl.Place(ctx, &Request{Name: "e", GPU: h100s(1), NUMALocal: true, VCPUs: 8, MemoryMiB: 8 << 10}); err != nil {
		t.Errorf("an unpinned VM on a host whose CPUs are all pinned: %v", err)
	}
}

func TestPlace_pinningWithoutNUMALocalityStartsOnTheGPUsNode(t *testing.T) {
	t.Parallel()
	h := cpuHost("c")
	h.PinnedCPUs = cpuRange(0, 10)
	p := mustPlace(t, &Request{Name: "vm", PinCPUs: true, VCPUs: 8, MemoryMiB: 1024}, []*Host{h}, Pack)
	if want := append(cpuRange(10, 5), cpuRange(16, 3)...); !slices.Equal(p.CPUs, want) || !slices.Equal(p.EmulatorCPUs, []int{15, 31}) {
		t.Errorf("pinned %v emulators %v, want %v and [15 31]", p.CPUs, p.EmulatorCPUs, want)
	}
	g := hgx("g")
	g.GPUs[0].State = Claimed
	g.GPUs[1].State = Claimed
	g.GPUs[2].State = Claimed
	g.GPUs[3].State = Claimed
	p = mustPlace(t, &Request{Name: "vm", GPU: h100s(1), PinCPUs: true, VCPUs: 4, MemoryMiB: 1024}, []*Host{g}, Pack)
	if p.CPUs[0] != 56 || p.MemoryMiB[1] != 1024 {
		t.Errorf("a GPU on node 1: pinned %v memory %v, want CPUs and memory from node 1", p.CPUs, p.MemoryMiB)
	}
}

func TestPlace_mdev(t *testing.T) {
	t.Parallel()
	h := hgx("hgx1")
	for i := range h.GPUs {
		h.GPUs[i].MdevTypes = []MdevType{{ID: "nvidia-592", Name: "NVIDIA H100-20C", Available: 4}}
	}
	h.GPUs[0].MdevTypes[0].Available = 1
	h.GPUs[1].State = Claimed
	sel := Selector{Mode: ModeMdev, MdevType: "NVIDIA H100-20C"}
	p := mustPlace(t, &Request{Name: "v", GPU: &GPUAsk{Count: 3, Selector: sel}, NUMALocal: true, VCPUs: 4, MemoryMiB: 1024}, []*Host{h}, Pack)
	want := []MdevPick{{addr(0x18), sel.MdevType}, {addr(0x3a), sel.MdevType}, {addr(0x3a), sel.MdevType}}
	if !slices.Equal(p.Mdevs, want) || len(p.GPUs) != 0 {
		t.Errorf("mdevs %v GPUs %v, want %v (the claimed GPU skipped)", p.Mdevs, p.GPUs, want)
	}
	Deduct(h, &Request{Name: "v", GPU: &GPUAsk{Count: 3, Selector: sel}}, p)
	if h.GPUs[0].MdevTypes[0].Available != 0 || h.GPUs[2].MdevTypes[0].Available != 2 {
		t.Errorf("instances left %d and %d, want 0 and 2", h.GPUs[0].MdevTypes[0].Available, h.GPUs[2].MdevTypes[0].Available)
	}
	_, err := Place(&Request{Name: "v", GPU: &GPUAsk{Count: 30, Selector: sel}, VCPUs: 4, MemoryMiB: 1024}, []*Host{h}, Pack)
	if err == nil || !strings.Contains(err.Error(), "hgx1: 22 free vGPU instances matching mdev NVIDIA H100-20C of 30 asked (claimed: 0000:2a:00.0; no instances left: 0000:18:00.0)") {
		t.Errorf("30 vGPUs: %v", err)
	}
}

func TestPlanner_unreadableHostCountsAsDown(t *testing.T) {
	t.Parallel()
	src := newSource(cpuHost("ok"))
	src.fail["gone"] = errors.New("dial tcp: connection refused")
	pl := NewPlanner(src, src.names(), Pack)
	_, err := pl.Place(context.Background(), &Request{Name: "vm", VCPUs: 1, MemoryMiB: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "gone: down (reading its capacity failed: dial tcp: connection refused)") || !strings.Contains(err.Error(), "ok: 240 GiB free of 1024 GiB asked") {
		t.Fatalf("placing beyond a fleet with a host down: %v", err)
	}
	if _, err := pl.Place(context.Background(), &Request{Name: "vm", VCPUs: 1, MemoryMiB: 1024, Hosts: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), `hosts: host "nope" is not in the provider's hosts (gone, ok)`) {
		t.Fatalf("unknown host: %v", err)
	}
	if src.reads["gone"] != 1 || src.reads["ok"] != 1 {
		t.Errorf("reads %v, want each host once", src.reads)
	}
}

func TestPlanner_doesNotChangeTheSourcesHosts(t *testing.T) {
	t.Parallel()
	h := hgx("h")
	pl := NewPlanner(newSource(h), []string{"h"}, Pack)
	if _, err := pl.Place(context.Background(), &Request{Name: "vm", GPU: h100s(8), PinCPUs: true, VCPUs: 8, MemoryMiB: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if h.GPUs[0].State != Free || h.Nodes[0].FreeMemoryMiB != 900<<10 || len(h.PinnedCPUs) != 0 {
		t.Errorf("the source's host changed: %+v", h.GPUs[0])
	}
	snap := pl.Snapshot(context.Background(), "h")
	if snap.GPUs[7].State != Claimed || snap.GPUs[7].Holder != "vm" || len(snap.PinnedCPUs) != 8 || snap.Nodes[0].FreeMemoryMiB+snap.Nodes[1].FreeMemoryMiB != 1800<<10-1<<20 {
		t.Errorf("snapshot not deducted: %+v pinned %v nodes %+v", snap.GPUs[7], snap.PinnedCPUs, snap.Nodes)
	}
}
