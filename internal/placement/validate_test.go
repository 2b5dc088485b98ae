package placement

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate_refusesBadRequestsNamingTheAttribute(t *testing.T) {
	t.Parallel()
	fleet := []*Host{hgx("gpu1"), l40sHost("gpu2"), cpuHost("cpu1")}
	cases := []struct {
		name, attr, says string
		r                *Request
	}{
		{"count 0", "gpu.count", "0 GPUs asked: ask for 1 or more, or leave the gpu block out", &Request{GPU: h100s(0), VCPUs: 1, MemoryMiB: 1}},
		{"more than any host has", "gpu.count", "9 GPUs asked, but no host has more than 8 matching vendor 10de, model ~ \"H100\" (gpu1): ask for at most 8 per VM", &Request{GPU: h100s(9), VCPUs: 1, MemoryMiB: 1}},
		{"more than the allowed hosts have", "gpu.count", "5 GPUs asked, but no host of gpu2 has more than 4 matching any GPU (gpu2)", &Request{GPU: &GPUAsk{Count: 5}, Hosts: []string{"gpu2"}, VCPUs: 1, MemoryMiB: 1}},
		{"NUMA-local beyond a node", "numa_local", "5 GPUs asked on one NUMA node, but no node has more than 4 matching vendor 10de, model ~ \"H100\" (gpu1 node 0): ask for at most 4, or set numa_local = false", &Request{GPU: h100s(5), NUMALocal: true, VCPUs: 1, MemoryMiB: 1}},
		{"selector nothing matches", "gpu.selector", "no host has a GPU matching model ~ \"B200\"", &Request{GPU: &GPUAsk{Count: 1, Selector: Selector{Model: "B200"}}, VCPUs: 1, MemoryMiB: 1}},
		{"unknown host", "hosts", `host "gpu9" is not in the provider's hosts (cpu1, gpu1, gpu2)`, &Request{Hosts: []string{"gpu9"}, VCPUs: 1, MemoryMiB: 1}},
		{"no vCPU", "vcpu", "0 vCPUs asked", &Request{MemoryMiB: 1}},
		{"odd huge pages", "hugepages", "pages of 4 KiB: use 2048 (2 MiB) or 1048576 (1 GiB)", &Request{VCPUs: 1, MemoryMiB: 1024, HugePageKiB: 4}},
		{"memory not whole pages", "memory_mib", "1000 MiB is not a whole number of 1 GiB huge pages: round it to a multiple of 1024 MiB", &Request{VCPUs: 1, MemoryMiB: 1000, HugePageKiB: 1 << 20}},
		{"host twice", "hosts", `host "gpu1" is listed twice`, &Request{Hosts: []string{"gpu1", "gpu1"}, VCPUs: 1, MemoryMiB: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateRequest(c.r)
			if err == nil {
				err = ValidateAgainstFleet(c.r, fleet)
			}
			var ae *AttributeError
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an *AttributeError", err)
			}
			if ae.Attribute != c.attr || !strings.Contains(err.Error(), c.says) {
				t.Errorf("got %q on %s, want %q on %s", err, ae.Attribute, c.says, c.attr)
			}
		})
	}
	for _, ok := range []*Request{
		{GPU: h100s(8), VCPUs: 1, MemoryMiB: 1},
		{GPU: h100s(4), NUMALocal: true, VCPUs: 1, MemoryMiB: 1},
		{GPU: &GPUAsk{Count: 12, Selector: Selector{Mode: ModeMdev, MdevType: "x"}}, VCPUs: 1, MemoryMiB: 1},
		{VCPUs: 2, MemoryMiB: 2048, HugePageKiB: 2048, Hosts: []string{"cpu1"}},
	} {
		if err := ValidateRequest(ok); err != nil {
			t.Errorf("ValidateRequest(%s): %v", ok, err)
		}
		if ok.GPU != nil && ok.GPU.Selector.mdev() {
			continue // no fixture offers type x
		}
		if err := ValidateAgainstFleet(ok, fleet); err != nil {
			t.Errorf("ValidateAgainstFleet(%s): %v", ok, err)
		}
	}
}

func TestParseSelector(t *testing.T) {
	t.Parallel()
	s, err := ParseSelector(map[string]string{"vendor_id": "0x10de", "device_id": "2330", "model": "H100", "model_exact": "false", "min_memory_gib": "80"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Selector{VendorID: nvidia, DeviceID: h100SXM, Model: "H100", MinMemoryGiB: 80}); s != want {
		t.Errorf("parsed %+v, want %+v", s, want)
	}
	s, err = ParseSelector(map[string]string{"mode": "mdev", "mdev_type": "nvidia-592"})
	if err != nil || s.Mode != ModeMdev || s.MdevType != "nvidia-592" {
		t.Errorf("mdev selector: %+v, %v", s, err)
	}
	for kv, says := range map[[2]string]string{
		{"vendor", "10de"}:          `selector key "vendor" is not known; the keys are vendor_id, device_id, model, model_exact, min_memory_gib, mode, mdev_type`,
		{"vendor_id", "nvidia"}:     `selector vendor_id = "nvidia": use four hex digits as lspci -nn shows them`,
		{"device_id", "12345"}:      `selector device_id = "12345": use four hex digits`,
		{"min_memory_gib", "80GB"}:  `selector min_memory_gib = "80GB": use a whole number of GiB`,
		{"mode", "sriov"}:           `selector mode = "sriov": use "passthrough" (whole GPUs with their IOMMU group, the default) or "mdev"`,
		{"mode", "mdev"}:            `selector mode = "mdev" needs mdev_type`,
		{"mdev_type", "nvidia-592"}: `selector mdev_type = "nvidia-592" needs mode = "mdev"`,
		{"model_exact", "yes"}:      `selector model_exact = "yes": use true`,
	} {
		_, err := ParseSelector(map[string]string{kv[0]: kv[1]})
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s = %q: %v, want %q", kv[0], kv[1], err, says)
		}
	}
	if _, err := ParsePolicy("binpack"); err == nil || !strings.Contains(err.Error(), `use "pack"`) {
		t.Errorf("ParsePolicy(binpack): %v", err)
	}
	if p, err := ParsePolicy(""); p != Pack || err != nil {
		t.Errorf("ParsePolicy(\"\") = %q, %v; want pack", p, err)
	}
}

func TestValidateAgainstFleet_namesTheSameHostAndNodeWhateverTheOrder(t *testing.T) {
	t.Parallel()
	fleet := []*Host{hgx("b"), hgx("a"), hgx("c")}
	r := &Request{GPU: h100s(5), NUMALocal: true, VCPUs: 1, MemoryMiB: 1}
	for i := range 30 {
		fleet[0], fleet[i%3] = fleet[i%3], fleet[0]
		err := ValidateAgainstFleet(r, fleet)
		if err == nil || !strings.Contains(err.Error(), "(a node 0)") {
			t.Fatalf("order %v: %v, want it to name a node 0", hostNames(fleet), err)
		}
	}
}
