package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// vmFleetPlanProvider is a fleet of two hosts whose sockets do not exist:
// the plan-time checks of placement run without reaching either.
const vmFleetPlanProvider = `provider "kohaku" {
  uri   = "qemu:///system?socket=/nonexistent/libvirt-sock"
  hosts = { gpu1 = { uri = "qemu:///system?socket=/nonexistent/gpu1-sock" } }
}
`

func TestVMPlacementRejectsBadInputAtPlan(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		body string
		want []string
	}{
		"no GPUs asked": {
			body: `placement {
    gpu { count = 0 }
  }`,
			want: []string{`Invalid placement.gpu.count`, `0 GPUs asked: ask for 1 or more, or leave the gpu block out`},
		},
		"negative count": {
			body: `placement {
    gpu { count = -2 }
  }`,
			want: []string{`Invalid placement.gpu.count`, `-2 GPUs asked`},
		},
		"vendor id that is not hex": {
			body: `placement {
    gpu {
      count     = 1
      vendor_id = "nvidia"
    }
  }`,
			want: []string{`Invalid placement.gpu.vendor_id`, `selector vendor_id = "nvidia": use four hex digits`},
		},
		"device id too long": {
			body: `placement {
    gpu {
      count     = 1
      device_id = "123456"
    }
  }`,
			want: []string{`Invalid placement.gpu.device_id`, `selector device_id = "123456"`},
		},
		"negative memory": {
			body: `placement {
    gpu {
      count          = 1
      min_memory_gib = -1
    }
  }`,
			want: []string{`placement.gpu.min_memory_gib`, `must be at least 0`},
		},
		"unknown selector key": {
			body: `placement {
    gpu {
      count  = 1
      colour = "green"
    }
  }`,
			want: []string{`Unsupported argument`, `An argument named "colour" is not expected here`},
		},
		"gpu block without count": {
			body: `placement {
    gpu { model = "H100" }
  }`,
			want: []string{`Missing placement.gpu.count`, `set count = 1 or more, or leave the gpu block out`},
		},
		"unknown policy": {
			body: `placement {
    policy = "random"
  }`,
			want: []string{`placement.policy`, `value must be one of`, `"pack"`, `"spread"`},
		},
		"placement with host": {
			body: `
  host      = "gpu1"
  placement {
    gpu { count = 1 }
  }`,
			want: []string{`Invalid Attribute Combination`, `Attribute "host" cannot be specified when "placement" is specified`},
		},
		"placement with gpus": {
			body: `
  gpus      = ["0000:01:00.0"]
  placement {
    gpu { count = 1 }
  }`,
			want: []string{`Invalid Attribute Combination`, `Attribute "gpus" cannot be specified when "placement" is specified`},
		},
		"host not in the fleet": {
			body: `placement {
    hosts = ["gpu1", "gpu9"]
  }`,
			want: []string{`Invalid placement.hosts[1]: unknown host`, `"gpu9" is not a host of the provider: use a key of its hosts map (gpu1), or "" for its default connection`},
		},
		"host listed twice": {
			body: `placement {
    hosts = ["gpu1", "gpu1"]
  }`,
			want: []string{`Invalid placement.hosts`, `host "gpu1" is listed twice`},
		},
		"image outside the hosts": {
			body: `
  disk      = { image = "gpu1/default/debian-12.qcow2" }
  placement {
    hosts = [""]
  }`,
			want: []string{`Invalid placement.hosts: the image is not on an allowed host`, `is on host "gpu1", which placement.hosts () leaves out`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config: vmFleetPlanProvider + `
resource "kohaku_vm" "bad" {
  name   = "kohaku-acc-plan"
  type   = "qemu"
  ` + tc.body + `
}
`,
					PlanOnly:    true,
					ExpectError: vmErrRE(tc.want...),
				}},
			})
		})
	}
}

// A request that is right plans host and placed_gpus as known after
// apply, even when no host can be read at plan (create says then what
// each lacks).
func TestVMPlacementPlansHostUnknownUntilCreate(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: vmFleetPlanProvider + `
resource "kohaku_vm" "train" {
  name    = "kohaku-acc-plan"
  type    = "qemu"
  kernel  = "/boot/vmlinuz"
  initrd  = "/boot/initrd.img"
  running = false
  placement {
    gpu {
      count          = 2
      model          = "H100"
      min_memory_gib = 80
    }
    numa_local = true
    hosts      = ["gpu1", ""]
    policy     = "spread"
  }
}
`,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
	})
}

func TestAddPlacementErrorNamesTheAttribute(t *testing.T) {
	t.Parallel()
	node := func(id int) []placement.GPU {
		var gs []placement.GPU
		for i := range 2 {
			gs = append(gs, placement.GPU{Address: vfio.Address{Bus: uint8(0x10*id + i + 1)}, Model: "H100", NUMANode: id})
		}
		return gs
	}
	fleet := []*placement.Host{{Name: "gpu1", Schedulable: true, GPUs: append(node(0), node(1)...)}}
	for name, tc := range map[string]struct {
		r    placement.Request
		want path.Path
		text string
	}{
		"NUMA-local with more GPUs than a node has": {
			r:    placement.Request{Name: "a", GPU: &placement.GPUAsk{Count: 3}, NUMALocal: true, VCPUs: 1, MemoryMiB: 1},
			want: path.Root("placement").AtName("numa_local"), text: "no node has more than 2",
		},
		"more GPUs than a host has": {
			r:    placement.Request{Name: "a", GPU: &placement.GPUAsk{Count: 5}, VCPUs: 1, MemoryMiB: 1},
			want: path.Root("placement").AtName("gpu").AtName("count"), text: "no host has more than 4",
		},
		"a model no host has": {
			r:    placement.Request{Name: "a", GPU: &placement.GPUAsk{Count: 1, Selector: placement.Selector{Model: "B200"}}, VCPUs: 1, MemoryMiB: 1},
			want: path.Root("placement").AtName("gpu"), text: "no host has a GPU matching",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := placement.ValidateAgainstFleet(&tc.r, fleet)
			if err == nil {
				t.Fatal("accepted")
			}
			var diags diag.Diagnostics
			addPlacementError(&diags, "", err, "")
			if len(diags) != 1 {
				t.Fatalf("diags %v", diags)
			}
			d, ok := diags[0].(diag.DiagnosticWithPath)
			if !ok || !d.Path().Equal(tc.want) || !strings.Contains(d.Detail(), tc.text) {
				t.Errorf("diagnostic %v at %v, want at %v saying %q", diags[0], d.Path(), tc.want, tc.text)
			}
		})
	}
}

func placementObject(count int64, numaLocal bool) types.Object {
	gpu := types.ObjectValueMust(vmPlacementGPUAttrTypes, map[string]attr.Value{
		"count": types.Int64Value(count), "model": types.StringValue("H100"), "model_exact": types.BoolNull(),
		"vendor_id": types.StringNull(), "device_id": types.StringNull(), "min_memory_gib": types.Int64Null(),
	})
	return types.ObjectValueMust(vmPlacementAttrTypes, map[string]attr.Value{
		"gpu": gpu, "numa_local": types.BoolValue(numaLocal), "pin_cpus": types.BoolNull(),
		"hosts": types.ListNull(types.StringType), "policy": types.StringNull(),
	})
}

func placedVM(count int64, numaLocal bool, memMiB int64, gpus ...string) *vmModel {
	vals := make([]attr.Value, len(gpus))
	for i, g := range gpus {
		vals[i] = types.StringValue(g)
	}
	return &vmModel{
		Name: types.StringValue("train"), Host: types.StringValue("gpu1"), VCPU: types.Int64Value(4),
		MemoryMiB: types.Int64Value(memMiB), Hugepages: types.ObjectNull(vmHugepagesAttrTypes),
		NUMANodes: types.ListValueMust(types.Int64Type, []attr.Value{types.Int64Value(0)}),
		Placement: placementObject(count, numaLocal), PlacedGPUs: types.ListValueMust(types.StringType, vals),
	}
}

// gpu1 as a plan reads it: two H100s on node 0, both the VM's, and one
// free on node 1; node 0 has 8 GiB free.
func gpu1Now() *placement.Host {
	return &placement.Host{Name: "gpu1", Schedulable: true,
		Nodes: []placement.Node{{ID: 0, CPUs: []int{0, 1, 2, 3}, FreeMemoryMiB: 8 << 10}, {ID: 1, CPUs: []int{4, 5, 6, 7}, FreeMemoryMiB: 64 << 10}},
		GPUs: []placement.GPU{
			{Address: vfio.Address{Bus: 0x18}, Model: "H100", NUMANode: 0, State: placement.Claimed, Holder: "train"},
			{Address: vfio.Address{Bus: 0x2a}, Model: "H100", NUMANode: 0, State: placement.Claimed, Holder: "train"},
			{Address: vfio.Address{Bus: 0x9a}, Model: "H100", NUMANode: 1},
		}}
}

func TestJudgePlacement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	state := placedVM(2, false, 4096, "0000:18:00.0", "0000:2a:00.0")
	for name, tc := range map[string]struct {
		plan  *vmModel
		reads int
		keep  bool
		why   string
	}{
		"unchanged request: kept without a read":          {plan: placedVM(2, false, 4096), reads: 0, keep: true},
		"memory grows within the node's free memory":      {plan: placedVM(2, false, 8192), reads: 1, keep: true},
		"NUMA-locality asked of a VM already on one node": {plan: placedVM(2, true, 4096), reads: 1, keep: true},
		"memory grows past the node's free memory":        {plan: placedVM(2, false, 16384), reads: 1, keep: false, why: "its memory grows by 12 GiB and NUMA node 0 has 8 GiB free"},
		"a GPU more": {plan: placedVM(3, false, 4096), reads: 1, keep: false, why: "it has 2 GPUs and the request asks for 3"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req, ok := tc.plan.placementRequest(ctx, &diag.Diagnostics{})
			if !ok || req == nil {
				t.Fatal("no request")
			}
			reads := 0
			var diags diag.Diagnostics
			v := judgePlacement(ctx, state, tc.plan, req, func(host string) *placement.Host {
				reads++
				if host != "gpu1" {
					t.Errorf("read %q, want only the VM's host", host)
				}
				return gpu1Now()
			}, &diags)
			if diags.HasError() {
				t.Fatal(diags)
			}
			if reads != tc.reads {
				t.Errorf("%d reads, want %d", reads, tc.reads)
			}
			keep := v == nil || v.Keep
			if keep != tc.keep || (v != nil && !strings.Contains(v.String(), tc.why)) {
				t.Errorf("verdict %v, want keep %v saying %q", v, tc.keep, tc.why)
			}
		})
	}
	// Pins are made for a vCPU count, at create: a vCPU change of a pinned
	// VM, and pin_cpus turned on or off, place it anew without a read.
	pinnedVM := func(vcpu int64, pin bool, pins ...int64) *vmModel {
		m := placedVM(2, true, 4096, "0000:18:00.0", "0000:2a:00.0")
		m.VCPU = types.Int64Value(vcpu)
		attrs := m.Placement.Attributes()
		attrs["pin_cpus"] = types.BoolValue(pin)
		m.Placement = types.ObjectValueMust(vmPlacementAttrTypes, attrs)
		vals := []attr.Value{}
		for _, c := range pins {
			vals = append(vals, types.Int64Value(c))
		}
		m.PinnedCPUs = types.ListValueMust(types.Int64Type, vals)
		return m
	}
	for name, tc := range map[string]struct {
		state, plan *vmModel
		why         string
	}{
		"vcpu of a pinned VM": {pinnedVM(4, true, 0, 1, 2, 3), pinnedVM(6, true), "its 4 vCPUs are pinned one to one and vcpu changes to 6"},
		"pin_cpus turned on":  {pinnedVM(4, false), pinnedVM(4, true), "pin_cpus changes to true"},
		"pin_cpus turned off": {pinnedVM(4, true, 0, 1, 2, 3), pinnedVM(4, false), "pin_cpus changes to false"},
	} {
		req, _ := tc.plan.placementRequest(ctx, &diag.Diagnostics{})
		var diags diag.Diagnostics
		v := judgePlacement(ctx, tc.state, tc.plan, req, func(string) *placement.Host {
			t.Errorf("%s: read the host", name)
			return gpu1Now()
		}, &diags)
		if diags.HasError() || v == nil || v.Keep || !strings.Contains(v.String(), tc.why) {
			t.Errorf("%s: verdict %v (%v), want a new placement saying %q", name, v, diags, tc.why)
		}
	}
	// A host that cannot be read moves nothing for what cannot be seen.
	v := judgePlacement(ctx, state, placedVM(2, false, 1<<20), func() *placement.Request {
		r, _ := placedVM(2, false, 1<<20).placementRequest(ctx, &diag.Diagnostics{})
		return r
	}(), func(string) *placement.Host { return nil }, &diag.Diagnostics{})
	if v == nil || !v.Keep {
		t.Errorf("verdict %v with the host down, want keep", v)
	}
}

// Refresh of a placed VM: its GPUs' functions are its placed_gpus, not
// gpus or hostdevs, and the request and choice are kept as they were.
func TestFromDomainKeepsPlacement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	view := &domainView{
		Status:    &hosts.DomainStatus{DomainRef: hosts.DomainRef{UUID: "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", Name: "train"}},
		Observed:  domain.Observed{Spec: domain.Spec{Name: "train", Hostdevs: []string{"0000:18:00.0", "0000:18:00.1"}}},
		GPUGroups: gpuGroups{"0000:18:00.0": {"0000:18:00.0", "0000:18:00.1"}},
	}
	prior := placedVM(1, false, 4096, "0000:18:00.0")
	prior.GPUs, prior.Hostdevs = types.SetNull(types.StringType), types.SetNull(types.StringType)
	var m vmModel
	var diags diag.Diagnostics
	m.fromDomain(ctx, view, prior, &diags)
	if diags.HasError() {
		t.Fatal(diags)
	}
	if !m.GPUs.IsNull() || !m.Hostdevs.IsNull() {
		t.Errorf("gpus %s hostdevs %s, want both null", m.GPUs, m.Hostdevs)
	}
	if !m.PlacedGPUs.Equal(prior.PlacedGPUs) || !m.Placement.Equal(prior.Placement) || m.Host.ValueString() != "gpu1" {
		t.Errorf("placed_gpus %s placement %s host %s", m.PlacedGPUs, m.Placement, m.Host)
	}
	// An imported VM has no placement: none is invented.
	var imported vmModel
	imported.fromDomain(ctx, view, &vmModel{}, &diags)
	if !imported.Placement.IsNull() || !imported.PlacedGPUs.IsNull() || imported.Hostdevs.IsNull() {
		t.Errorf("imported: placement %s placed_gpus %s hostdevs %s", imported.Placement, imported.PlacedGPUs, imported.Hostdevs)
	}
}

func TestPlacedMovedRecord(t *testing.T) {
	t.Parallel()
	g, audio := vfio.Address{Bus: 0x18}, vfio.Address{Bus: 0x18, Function: 1}
	other := vfio.Address{Bus: 0x2a}
	rec := placedMovedRecord(map[vfio.Address][]vfio.Address{g: {g, audio}})
	got := placedMovedFrom(rec, []vfio.Address{g, other})
	if len(got[g]) != 2 || len(got[other]) != 0 {
		t.Errorf("round trip %v: want the two functions of %s and nothing of %s (on vfio-pci before)", got, g, other)
	}
	// nothing moved is recorded too, so destroy gives nothing back
	if got := placedMovedFrom(placedMovedRecord(nil), []vfio.Address{g}); len(got[g]) != 0 {
		t.Errorf("empty record read as %v", got)
	}
	// no record at all: the GPU itself goes back
	if got := placedMovedFrom(nil, []vfio.Address{g}); len(got[g]) != 1 || got[g][0] != g {
		t.Errorf("no record read as %v", got)
	}
}

// The 64-bit PCI window of a placed VM is sized from its placed GPUs: at
// apply for a new VM (unknown until placed), kept while they stay.
func TestPlanMMIOOfPlacedGPUs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	placed := func(gpus types.List) *vmModel {
		m := mmioModel(types.Int64Null())
		m.GPUs, m.PlacedGPUs = types.SetNull(types.StringType), gpus
		return m
	}
	f := &fakeSizer{}
	plan := *placed(types.ListUnknown(types.StringType))
	plan.PCIMMIO64GiB = types.Int64Unknown()
	var diags diag.Diagnostics
	planMMIOWith(ctx, &plan, placed(types.ListUnknown(types.StringType)), nil, f.size, &diags)
	if !plan.PCIMMIO64GiB.IsUnknown() || f.calls != 0 {
		t.Errorf("new placed VM: planned %v after %d reads, want unknown until create places it", plan.PCIMMIO64GiB, f.calls)
	}
	one := types.ListValueMust(types.StringType, []attr.Value{types.StringValue("0000:c1:00.0")})
	plan = *placed(one)
	plan.PCIMMIO64GiB = types.Int64Unknown()
	planMMIOWith(ctx, &plan, placed(one), nil, f.size, &diags)
	if !plan.PCIMMIO64GiB.Equal(types.Int64Value(256)) || f.calls != 1 {
		t.Errorf("placed H100: planned %v after %d reads, want 256 sized from it", plan.PCIMMIO64GiB, f.calls)
	}
	state := placed(one)
	state.PCIMMIO64GiB = types.Int64Value(256)
	plan = *placed(one)
	plan.PCIMMIO64GiB = types.Int64Unknown()
	planMMIOWith(ctx, &plan, placed(one), state, f.size, &diags)
	if !plan.PCIMMIO64GiB.Equal(types.Int64Value(256)) || f.calls != 1 {
		t.Errorf("unchanged placed VM: planned %v after %d reads, want 256 kept without a read", plan.PCIMMIO64GiB, f.calls)
	}
}
