package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

var (
	vmHugepagesAttrTypes = map[string]attr.Type{"page_size_mib": types.Int64Type}
	vmTopologyAttrTypes  = map[string]attr.Type{"sockets": types.Int64Type, "cores": types.Int64Type, "threads": types.Int64Type}
)

type vmHugepagesModel struct {
	PageSizeMiB types.Int64 `tfsdk:"page_size_mib"`
}

type vmTopologyModel struct {
	Sockets types.Int64 `tfsdk:"sockets"`
	Cores   types.Int64 `tfsdk:"cores"`
	Threads types.Int64 `tfsdk:"threads"`
}

// numaSpec puts huge pages and the CPU topology of m into in's spec. The
// NUMA binding itself is the host's to tell (vmlife.Place).
func (m *vmModel) numaSpec(ctx context.Context, in *specInput, diags *diag.Diagnostics) {
	s := &in.Spec
	switch {
	case m.Hugepages.IsUnknown():
		in.unknownAt("hugepages")
	case !m.Hugepages.IsNull():
		var h vmHugepagesModel
		diags.Append(m.Hugepages.As(ctx, &h, basetypes.ObjectAsOptions{})...)
		s.HugePageKiB = in.int(h.PageSizeMiB, "hugepages.page_size_mib", 2) << 10
	}
	switch {
	case m.CPUTopology.IsUnknown():
		in.unknownAt("cpu_topology")
	case !m.CPUTopology.IsNull():
		var t vmTopologyModel
		diags.Append(m.CPUTopology.As(ctx, &t, basetypes.ObjectAsOptions{})...)
		top := &domain.CPUTopology{
			Sockets: in.int(t.Sockets, "cpu_topology", 1),
			Cores:   in.int(t.Cores, "cpu_topology", 1),
			Threads: in.int(t.Threads, "cpu_topology", 1),
		}
		if t.Sockets.IsUnknown() || t.Cores.IsUnknown() || t.Threads.IsUnknown() {
			top = nil // checked at apply, once known
		}
		s.Topology = top
	}
}

// placement is the numa_placement of m, auto when unset.
func (m *vmModel) placement() string {
	if m.NUMAPlacement.IsNull() || m.NUMAPlacement.IsUnknown() || m.NUMAPlacement.ValueString() == "" {
		return vmlife.PlacementAuto
	}
	return m.NUMAPlacement.ValueString()
}

// numaFromDomain fills the NUMA attributes from what libvirt reports;
// numa_placement lives only in Terraform.
func (m *vmModel) numaFromDomain(o domain.Spec, prior *vmModel) {
	m.NUMAPlacement = prior.NUMAPlacement
	if m.NUMAPlacement.IsNull() || m.NUMAPlacement.IsUnknown() {
		m.NUMAPlacement = types.StringValue(vmlife.PlacementAuto)
	}
	nodes := []attr.Value{}
	for _, n := range o.NUMANodes() {
		nodes = append(nodes, types.Int64Value(int64(n)))
	}
	m.NUMANodes = types.ListValueMust(types.Int64Type, nodes)
	m.Hugepages = types.ObjectNull(vmHugepagesAttrTypes)
	if o.HugePageKiB > 0 {
		m.Hugepages = types.ObjectValueMust(vmHugepagesAttrTypes, map[string]attr.Value{"page_size_mib": types.Int64Value(int64(o.HugePageKiB >> 10))})
	}
	m.CPUTopology = types.ObjectNull(vmTopologyAttrTypes)
	if t := o.Topology; t != nil {
		m.CPUTopology = types.ObjectValueMust(vmTopologyAttrTypes, map[string]attr.Value{
			"sockets": types.Int64Value(int64(t.Sockets)), "cores": types.Int64Value(int64(t.Cores)), "threads": types.Int64Value(int64(t.Threads)),
		})
	}
}
