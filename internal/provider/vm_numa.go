package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
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

// keepNUMANodes plans numa_nodes as the state has them while what decides
// the binding (gpus and numa_placement) stays as it is: any other change,
// and a plan that only differs from the state in how a value is spelled,
// leaves the binding alone, so it must not show as "known after apply".
type keepNUMANodes struct{}

func (keepNUMANodes) Description(context.Context) string {
	return "keeps the NUMA nodes while gpus and numa_placement stay the same"
}

func (k keepNUMANodes) MarkdownDescription(ctx context.Context) string { return k.Description(ctx) }

func (keepNUMANodes) PlanModifyList(ctx context.Context, req planmodifier.ListRequest, resp *planmodifier.ListResponse) {
	if req.StateValue.IsNull() || !req.PlanValue.IsUnknown() || req.Plan.Raw.IsNull() || req.State.Raw.IsNull() {
		return
	}
	var planGPUs, stateGPUs types.Set
	var planMode, stateMode types.String
	for _, d := range []diag.Diagnostics{
		req.Plan.GetAttribute(ctx, path.Root("gpus"), &planGPUs),
		req.State.GetAttribute(ctx, path.Root("gpus"), &stateGPUs),
		req.Plan.GetAttribute(ctx, path.Root("numa_placement"), &planMode),
		req.State.GetAttribute(ctx, path.Root("numa_placement"), &stateMode),
	} {
		if d.HasError() {
			return
		}
	}
	if planGPUs.IsUnknown() || planMode.IsUnknown() || !planGPUs.Equal(stateGPUs) || !planMode.Equal(stateMode) {
		return
	}
	resp.PlanValue = req.StateValue
}
