package provider

import (
	"errors"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/capacity"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// An HGX-like host: two nodes, VMs pinned to CPUs 1, 2 and 9, four GPUs of
// one model in four states and one of another, one offering vGPU types.
func hgxCapacity() *placement.Host {
	h100 := "GH100 [H100 SXM5 80GB]"
	gpu := func(bus uint8, node int, st placement.State, holder string) placement.GPU {
		return placement.GPU{Address: vfio.Address{Bus: bus}, VendorID: 0x10de, DeviceID: 0x2330, Model: h100, MemoryGiB: 128, NUMANode: node, State: st, Holder: holder}
	}
	l4 := placement.GPU{Address: vfio.Address{Bus: 0xca}, VendorID: 0x10de, DeviceID: 0x27b8, Model: "AD104GL [L4]", NUMANode: -1,
		MdevTypes: []placement.MdevType{{ID: "nvidia-920", Name: "NVIDIA L4-4Q", Available: 6}}}
	return &placement.Host{
		Name: "gpu1", Schedulable: true,
		Nodes: []placement.Node{
			{ID: 1, CPUs: []int{8, 9, 10, 11}, FreeMemoryMiB: 4096, FreeHugePages: map[uint64]uint64{}},
			{ID: 0, CPUs: []int{0, 1, 2, 3}, FreeMemoryMiB: 1024, FreeHugePages: map[uint64]uint64{1 << 20: 4, 2048: 100}},
		},
		GPUs: []placement.GPU{
			gpu(0x18, 0, placement.Free, ""),
			gpu(0x2a, 0, placement.Claimed, "VM train (u-1) of workspace ml"),
			gpu(0x3a, 1, placement.InUse, "web (u-2)"),
			gpu(0x5d, 1, placement.HostHeld, "process 4242 (python3)"),
			l4,
		},
		PinnedCPUs: []int{1, 2, 9, 9},
	}
}

func TestHostCapacityFrom_nodesGPUsAndModels(t *testing.T) {
	t.Parallel()
	m := hostCapacityFrom(capacity.Result{Name: "gpu1", Host: hgxCapacity()})
	if !m.Up.ValueBool() || !m.Error.IsNull() || m.CPUs.ValueInt64() != 8 || m.PinnedCPUs.ValueInt64() != 3 || m.FreeMemoryMiB.ValueInt64() != 5120 {
		t.Errorf("host: up %v error %v cpus %v pinned %v free %v", m.Up, m.Error, m.CPUs, m.PinnedCPUs, m.FreeMemoryMiB)
	}
	if len(m.NUMANodes) != 2 {
		t.Fatalf("nodes %+v", m.NUMANodes)
	}
	n0, n1 := m.NUMANodes[0], m.NUMANodes[1]
	if n0.ID.ValueInt64() != 0 || n0.CPUs.ValueInt64() != 4 || n0.PinnedCPUs.ValueInt64() != 2 || n0.FreeMemoryMiB.ValueInt64() != 1024 {
		t.Errorf("node 0 %+v", n0)
	}
	if len(n0.FreeHugePages) != 2 || n0.FreeHugePages[0] != (capacityHugePagesModel{types.Int64Value(2048), types.Int64Value(100)}) ||
		n0.FreeHugePages[1] != (capacityHugePagesModel{types.Int64Value(1 << 20), types.Int64Value(4)}) {
		t.Errorf("node 0 huge pages %+v, want 2 MiB then 1 GiB", n0.FreeHugePages)
	}
	if n1.ID.ValueInt64() != 1 || n1.PinnedCPUs.ValueInt64() != 1 || n1.FreeHugePages == nil || len(n1.FreeHugePages) != 0 {
		t.Errorf("node 1 %+v", n1)
	}
	want := []capacityGPUModelModel{
		{types.StringValue("AD104GL [L4]"), types.Int64Value(1), types.Int64Value(1), types.Int64Value(0), types.Int64Value(0), types.Int64Value(0), types.Int64Value(0), types.Int64Value(0)},
		{types.StringValue("GH100 [H100 SXM5 80GB]"), types.Int64Value(4), types.Int64Value(1), types.Int64Value(1), types.Int64Value(1), types.Int64Value(1), types.Int64Value(0), types.Int64Value(0)},
	}
	if len(m.GPUModels) != 2 || m.GPUModels[0] != want[0] || m.GPUModels[1] != want[1] {
		t.Errorf("gpu_models %+v, want %+v", m.GPUModels, want)
	}
	states := ""
	for _, g := range m.GPUs {
		states += g.State.ValueString() + " "
	}
	if states != "free claimed in_use host_process free " {
		t.Errorf("states %q", states)
	}
	free, claimed, l4 := m.GPUs[0], m.GPUs[1], m.GPUs[4]
	if free.Address.ValueString() != "0000:18:00.0" || !free.Holder.IsNull() || free.MemoryGiB.ValueInt64() != 128 || free.NUMANode.ValueInt64() != 0 || free.VendorID.ValueString() != "10de" || free.DeviceID.ValueString() != "2330" {
		t.Errorf("free GPU %+v", free)
	}
	if claimed.Holder.ValueString() != "VM train (u-1) of workspace ml" {
		t.Errorf("claimed GPU's holder %v", claimed.Holder)
	}
	if m.GPUs[3].Holder.ValueString() != "process 4242 (python3)" {
		t.Errorf("held GPU's holder %v", m.GPUs[3].Holder)
	}
	if !l4.MemoryGiB.IsNull() || !l4.NUMANode.IsNull() || len(l4.MdevTypes) != 1 ||
		l4.MdevTypes[0] != (capacityMdevTypeModel{types.StringValue("nvidia-920"), types.StringValue("NVIDIA L4-4Q"), types.Int64Value(6)}) {
		t.Errorf("L4 %+v", l4)
	}
	if free.MdevTypes == nil || len(free.MdevTypes) != 0 {
		t.Errorf("a GPU without vGPU types has mdev_types %v, want empty", free.MdevTypes)
	}
}

func TestHostCapacityFrom_downHost(t *testing.T) {
	t.Parallel()
	m := hostCapacityFrom(capacity.Result{Name: "gpu2", Err: errors.New("dialing gpu2.example.com:22: connection refused")})
	if m.Up.ValueBool() || m.Error.ValueString() != "dialing gpu2.example.com:22: connection refused" {
		t.Errorf("down host: up %v error %v", m.Up, m.Error)
	}
	if !m.CPUs.IsNull() || !m.PinnedCPUs.IsNull() || !m.FreeMemoryMiB.IsNull() {
		t.Errorf("down host's numbers %v %v %v, want null", m.CPUs, m.PinnedCPUs, m.FreeMemoryMiB)
	}
	if m.NUMANodes == nil || m.GPUs == nil || m.GPUModels == nil || len(m.NUMANodes)+len(m.GPUs)+len(m.GPUModels) != 0 {
		t.Errorf("down host's lists %+v, want empty", m)
	}
}

// No GPUs: empty lists, not null, so length() works in HCL.
func TestHostCapacityFrom_noGPUs(t *testing.T) {
	t.Parallel()
	m := hostCapacityFrom(capacity.Result{Name: "", Host: &placement.Host{Nodes: []placement.Node{{ID: 0, CPUs: []int{0, 1}, FreeMemoryMiB: 512}}}})
	if !m.Up.ValueBool() || m.GPUs == nil || len(m.GPUs) != 0 || m.GPUModels == nil || len(m.GPUModels) != 0 || m.CPUs.ValueInt64() != 2 || m.PinnedCPUs.ValueInt64() != 0 {
		t.Errorf("host without GPUs %+v", m)
	}
}

func TestGPUStateName_everyState(t *testing.T) {
	t.Parallel()
	want := map[placement.State]string{placement.Free: "free", placement.Claimed: "claimed", placement.InUse: "in_use", placement.HostHeld: "host_process", placement.Quarantined: "quarantined"}
	for s, n := range want {
		if got := gpuStateName(s); got != n {
			t.Errorf("state %v named %q, want %q", s, got, n)
		}
	}
}
