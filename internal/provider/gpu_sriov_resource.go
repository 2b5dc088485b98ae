package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var (
	_ resource.ResourceWithConfigure   = (*gpuSRIOVResource)(nil)
	_ resource.ResourceWithImportState = (*gpuSRIOVResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*gpuSRIOVResource)(nil)
)

func newGPUSRIOVResource() resource.Resource { return &gpuSRIOVResource{} }

type gpuSRIOVResource struct {
	configuredResource
}

type gpuSRIOVModel struct {
	ID               types.String `tfsdk:"id"`
	Host             types.String `tfsdk:"host"`
	GPU              types.String `tfsdk:"gpu"`
	NumVFs           types.Int64  `tfsdk:"num_vfs"`
	VirtualFunctions types.List   `tfsdk:"virtual_functions"`
}

// sriovTimeout bounds each operation: the kernel makes VFs in seconds, and
// libvirt lists them once udev has seen them.
const sriovTimeout = 2 * time.Minute

// sriovOpen is how the SR-IOV resources' create and delete start: the
// model from the request's plan or state, and the operation's deadline.
// ok is false after a diagnostic; cancel is always safe to defer.
func sriovOpen(ctx context.Context, from modelGetter, m any, diags *diag.Diagnostics) (context.Context, context.CancelFunc, bool) {
	diags.Append(from.Get(ctx, m)...)
	if diags.HasError() {
		return ctx, func() {}, false
	}
	ctx, cancel := context.WithTimeout(ctx, sriovTimeout)
	return ctx, cancel, true
}

func (r *gpuSRIOVResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_gpu_sriov"
}

func (r *gpuSRIOVResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "The SR-IOV virtual functions (VFs) of one GPU: create enables them on the host, and destroy " +
			"disables them. On the GPUs clouds buy now " +
			"(NVIDIA L40S, H100, H200, B200, and Ampere cards with vGPU 17 and later) each vGPU is a VF given a " +
			"type (`kohaku_vgpu`) and passed through as a PCI device. Kohaku reads and writes the host's sysfs for " +
			"this, so the host must be reached over a local (`qemu:///system`) or SSH (`qemu+ssh://`) connection. " +
			"The plan refuses a function that does not exist or has no SR-IOV capability, and a count above what the " +
			"GPU allows (`sriov_totalvfs`), on the attribute's line. A GPU that already has exactly `num_vfs` VFs is " +
			"adopted as it is; one with another count is refused (the kernel changes the count only from 0). " +
			"Destroy refuses while any VF has a vGPU type set (a `kohaku_vgpu` or someone's by hand), naming them. " +
			"VFs found disabled on the host are removed from state, and the next apply enables them again. On " +
			"a GPU driven by NVIDIA's driver, whose vGPU manager (the vGPU host driver) must be installed, Kohaku " +
			"runs NVIDIA's own `/usr/lib/nvidia/sriov-manage -e` (and `-d` at destroy) where the host has it and " +
			"all VFs are asked for, as NVIDIA documents; elsewhere it writes `sriov_numvfs`. VFs do not survive " +
			"a host reboot: the next plan shows them to be enabled again. See the GPU guide for what the operator " +
			"sets (MIG mode, GPU instances). A change of `host`, `gpu` or `num_vfs` replaces the resource " +
			"(disable, then enable).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The GPU's PCI address, prefixed by `<host>/` for a host of the provider's hosts map.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"host": schema.StringAttribute{
				Optional:      true,
				Description:   "Key of the provider's `hosts` map the GPU is on; empty for the default connection. Changing it replaces the resource.",
				PlanModifiers: replace,
			},
			"gpu": schema.StringAttribute{
				Required:      true,
				Description:   "PCI address of the GPU (its physical function), as `DDDD:BB:SS.F`, e.g. `0000:3d:00.0`. Changing it replaces the resource.",
				Validators:    []validator.String{pciAddressValidator{}},
				PlanModifiers: replace,
			},
			"num_vfs": schema.Int64Attribute{
				Optional: true,
				Computed: true,
				Description: "How many VFs to enable, from 1 to the GPU's `sriov_totalvfs`. Default: all of them " +
					"(NVIDIA's `sriov-manage -e` enables all too). Changing it replaces the resource.",
				Validators:    []validator.Int64{int64validator.AtLeast(1)},
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplaceIfConfigured(), int64planmodifier.UseStateForUnknown()},
			},
			"virtual_functions": schema.ListAttribute{
				Computed:      true,
				ElementType:   types.StringType,
				Description:   "The VFs' PCI addresses as libvirt lists them, sorted.",
				PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

// ModifyPlan refuses at plan what the host cannot do, on the attribute's
// line: no such function, no SR-IOV, too many VFs, a connection that
// cannot reach sysfs.
func (r *gpuSRIOVResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || !req.State.Raw.IsNull() || r.data == nil || !req.Config.Raw.IsFullyKnown() {
		return
	}
	var plan gpuSRIOVModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	g, _, ok := r.inspect(ctx, plan, &resp.Diagnostics)
	if !ok {
		return
	}
	if n := plan.NumVFs.ValueInt64(); !plan.NumVFs.IsNull() && g.MaxVFs > 0 && n > int64(g.MaxVFs) {
		resp.Diagnostics.AddAttributeError(path.Root("num_vfs"), "Too many virtual functions",
			fmt.Sprintf("%s can have at most %d virtual functions (its sriov_totalvfs); num_vfs is %d.", g.Address, g.MaxVFs, n))
	}
	if n := plan.NumVFs.ValueInt64(); !plan.NumVFs.IsNull() && g.NumVFs != 0 && int64(g.NumVFs) != n {
		resp.Diagnostics.AddAttributeError(path.Root("num_vfs"), "The GPU has another count of virtual functions",
			fmt.Sprintf("%s has %d virtual functions enabled, and the kernel changes the count only from 0: set num_vfs = %d to adopt them, or disable them on the host first.", g.Address, g.NumVFs, g.NumVFs))
	}
	if plan.NumVFs.IsNull() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("num_vfs"), types.Int64Value(int64(g.MaxVFs)))...)
	}
}

// inspect reads the model's GPU from its host; false after a diagnostic
// on the attribute at fault.
func (r *gpuSRIOVResource) inspect(ctx context.Context, m gpuSRIOVModel, diags *diag.Diagnostics) (*sriov.GPU, hosts.Host, bool) {
	a, err := vfio.ParseAddress(m.GPU.ValueString())
	if err != nil {
		diags.AddAttributeError(path.Root("gpu"), "Invalid PCI address", err.Error())
		return nil, nil, false
	}
	c := r.data.client(m.Host.ValueString(), diags)
	if c == nil {
		return nil, nil, false
	}
	g, err := sriov.Inspect(ctx, c, a)
	switch {
	case errors.Is(err, sriov.ErrNoHostFiles):
		diags.AddAttributeError(path.Root("host"), "The host's connection cannot reach its sysfs", err.Error())
		return nil, nil, false
	case err != nil && strings.Contains(err.Error(), "listing the host's PCI devices"):
		addError(diags, "Reading GPU "+a.String(), err)
		return nil, nil, false
	case err != nil:
		diags.AddAttributeError(path.Root("gpu"), "The GPU cannot have virtual functions", err.Error())
		return nil, nil, false
	}
	return g, c, true
}

func (r *gpuSRIOVResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan gpuSRIOVModel
	ctx, cancel, ok := sriovOpen(ctx, req.Plan, &plan, &resp.Diagnostics)
	defer cancel()
	if !ok {
		return
	}
	g, c, ok := r.inspect(ctx, plan, &resp.Diagnostics)
	if !ok {
		return
	}
	n := g.MaxVFs
	if !plan.NumVFs.IsNull() && !plan.NumVFs.IsUnknown() {
		n = int(plan.NumVFs.ValueInt64())
	}
	if err := sriov.Enable(ctx, c, g, n); err != nil {
		addError(&resp.Diagnostics, "Enabling the virtual functions of "+g.Address.String()+" failed", err)
		return
	}
	// libvirt lists the VFs once udev has seen them.
	for {
		if g, _, ok = r.inspect(ctx, plan, &resp.Diagnostics); !ok {
			return
		}
		if len(g.VFs) >= n {
			break
		}
		select {
		case <-ctx.Done():
			addError(&resp.Diagnostics, "Enabling the virtual functions of "+g.Address.String()+" failed",
				fmt.Errorf("the kernel took sriov_numvfs = %d, but libvirt lists %d of them after %s", n, len(g.VFs), sriovTimeout),
				"The VFs stay enabled; the next apply adopts them, or destroy disables them.")
			r.setState(ctx, &plan, g, &resp.State, &resp.Diagnostics)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	r.setState(ctx, &plan, g, &resp.State, &resp.Diagnostics)
}

func (r *gpuSRIOVResource) setState(ctx context.Context, m *gpuSRIOVModel, g *sriov.GPU, st stateSetter, diags *diag.Diagnostics) {
	vfs := make([]string, len(g.VFs))
	for i, vf := range g.VFs {
		vfs[i] = vf.Address.String()
	}
	m.ID = types.StringValue(hostScopedID(m.Host.ValueString(), g.Address.String()))
	m.GPU = types.StringValue(g.Address.String())
	m.NumVFs = types.Int64Value(int64(g.NumVFs))
	var d diag.Diagnostics
	m.VirtualFunctions, d = types.ListValueFrom(ctx, types.StringType, vfs)
	diags.Append(d...)
	diags.Append(st.Set(ctx, m)...)
}

func (r *gpuSRIOVResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state gpuSRIOVModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	g, _, ok := r.inspect(ctx, state, &resp.Diagnostics)
	if !ok {
		return
	}
	if !foundOnHost(ctx, resp, "virtual functions of", g.Address.String(), g.NumVFs > 0, nil) {
		return
	}
	r.setState(ctx, &state, g, &resp.State, &resp.Diagnostics)
}

// Update has nothing to change in place: every argument replaces.
func (r *gpuSRIOVResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan gpuSRIOVModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *gpuSRIOVResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state gpuSRIOVModel
	ctx, cancel, ok := sriovOpen(ctx, req.State, &state, &resp.Diagnostics)
	defer cancel()
	if !ok {
		return
	}
	g, c, ok := r.inspect(ctx, state, &resp.Diagnostics)
	if !ok {
		return
	}
	if err := sriov.Disable(ctx, c, g); err != nil {
		addError(&resp.Diagnostics, "Disabling the virtual functions of "+g.Address.String()+" failed", err)
	}
}

// ImportState takes `<address>` or `<host>/<address>`.
func (r *gpuSRIOVResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, raw, _ := parseNameImportID(req.ID)
	a, err := vfio.ParseAddress(raw)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q: import a GPU's virtual functions by the GPU's PCI address, "+
			"e.g. 0000:3d:00.0, or as <host>/<address> for a host of the provider's hosts map.", req.ID))
		return
	}
	importHostScoped(ctx, resp, "gpu", host, a.String())
}
