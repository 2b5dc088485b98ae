package placement

import (
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

func TestSticky(t *testing.T) {
	t.Parallel()
	base := func() *Request {
		return &Request{Name: "vm", GPU: h100s(2), NUMALocal: true, PinCPUs: true, VCPUs: 8, MemoryMiB: 64 << 10}
	}
	// place on an HGX host, deduct, then let others take what is left of node 0
	host := hgx("gpu1")
	cur := mustPlace(t, base(), []*Host{host}, Pack)
	Deduct(host, base(), cur)
	host.GPUs[2].State, host.GPUs[3].State = Claimed, Claimed
	host.Nodes[0].FreeMemoryMiB = 16 << 10
	cases := []struct {
		name   string
		change func(r *Request, h *Host)
		keep   bool
		says   string
	}{
		{"unchanged", func(*Request, *Host) {}, true, ""},
		{"capacity elsewhere changed", func(_ *Request, h *Host) { h.GPUs[7].State = InUse }, true, ""},
		{"memory grows within the node", func(r *Request, _ *Host) { r.MemoryMiB += 8 << 10 }, true, ""},
		{"memory grows beyond the node", func(r *Request, _ *Host) { r.MemoryMiB += 32 << 10 }, false, "its memory grows by 32 GiB and NUMA node 0 has 16 GiB free"},
		{"more pinned vCPUs than the node has", func(r *Request, h *Host) { r.VCPUs = 60 }, false, "it needs 52 more pinned CPUs and NUMA node 0 has 47 free to pin"},
		{"GPU count changed", func(r *Request, _ *Host) { r.GPU.Count = 3 }, false, "it has 2 GPUs and the request asks for 3"},
		{"selector no longer matches", func(r *Request, _ *Host) { r.GPU.Selector = Selector{Model: "L40S"} }, false, "its GPU 0000:18:00.0 (GH100 [H100 SXM5 80GB], 80 GiB) does not match model ~ \"L40S\""},
		{"selector still matches", func(r *Request, _ *Host) { r.GPU.Selector = Selector{MinMemoryGiB: 80} }, true, ""},
		{"host left the list", func(r *Request, _ *Host) { r.Hosts = []string{"gpu2"} }, false, "it is on gpu1, which is no longer among hosts (gpu2)"},
		{"host still listed", func(r *Request, _ *Host) { r.Hosts = []string{"gpu2", "gpu1"} }, true, ""},
		{"to mdev", func(r *Request, _ *Host) { r.GPU.Selector = Selector{Mode: ModeMdev, MdevType: "t"} }, false, "it has 2 whole GPUs and the request asks for vGPUs"},
		{"huge pages asked and free on the node", func(r *Request, _ *Host) { r.HugePageKiB = 2048 }, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, h := base(), host.Clone()
			c.change(r, h)
			v := Sticky(cur, r, h)
			if v.Keep != c.keep || (c.says != "" && !strings.Contains(v.String(), c.says)) {
				t.Errorf("Sticky = %v, want keep=%v saying %q", v, c.keep, c.says)
			}
		})
	}
	// huge pages asked beyond what the node has free moves it
	r := base()
	r.HugePageKiB, r.MemoryMiB = 2048, 96<<10
	if v := Sticky(cur, r, host); v.Keep || !strings.Contains(v.String(), "its memory grows by 96 GiB and NUMA node 0 has 64 GiB free") {
		t.Errorf("96 GiB of huge pages where 64 GiB are free: %v", v)
	}
	// an unreadable host moves nothing
	if v := Sticky(cur, base(), nil); !v.Keep {
		t.Errorf("host unreadable: %v", v)
	}
	// a VM that spans nodes asked to be NUMA-local
	spans := &Placement{Host: "gpu1", NUMANode: -1, GPUs: []vfio.Address{addr(0x18), addr(0x9a)}, MemoryMiB: map[int]int64{0: 1024}}
	r = &Request{Name: "vm", GPU: h100s(2), NUMALocal: true, VCPUs: 2, MemoryMiB: 1024}
	if v := Sticky(spans, r, hgx("gpu1")); v.Keep || !strings.Contains(v.String(), "it spans NUMA nodes 0, 1 and the request asks for one") {
		t.Errorf("spanning VM made NUMA-local: %v", v)
	}
	r.NUMALocal = false
	if v := Sticky(spans, r, hgx("gpu1")); !v.Keep {
		t.Errorf("spanning VM not NUMA-local: %v", v)
	}
}
