package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var (
	_ resource.ResourceWithConfigure   = (*vgpuResource)(nil)
	_ resource.ResourceWithImportState = (*vgpuResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*vgpuResource)(nil)
)

func newVGPUResource() resource.Resource { return &vgpuResource{} }

type vgpuResource struct {
	configuredResource
}

type vgpuModel struct {
	ID       types.String `tfsdk:"id"`
	Host     types.String `tfsdk:"host"`
	Hosts    types.List   `tfsdk:"hosts"`
	GPU      types.String `tfsdk:"gpu"`
	Type     types.String `tfsdk:"type"`
	TypeID   types.Int64  `tfsdk:"type_id"`
	TypeName types.String `tfsdk:"type_name"`
	Address  types.String `tfsdk:"address"`
}

func (r *vgpuResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vgpu"
}

func (r *vgpuResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	sticky := []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplaceIfConfigured()}
	resp.Schema = schema.Schema{
		Description: "One SR-IOV vGPU: a virtual function (VF) of a GPU given a vGPU type through the vendor's sysfs " +
			"(NVIDIA's `current_vgpu_type`, on L40S, H100, H200, B200 and Ampere cards with vGPU 17 and later), then " +
			"bound to `vfio-pci` so that a VM passes it through: `kohaku_vm.hostdevs = [kohaku_vgpu.x.address]` " +
			"with `host = kohaku_vgpu.x.host`. Name the GPU (`host` and `gpu`), or name only the type and let Kohaku " +
			"find a VF across the fleet (`hosts`): it packs, taking first a GPU that already runs the type, then " +
			"the one with the fewest instances of it left, then by host key and PCI address. The choice is recorded " +
			"and sticky: later plans never move it because capacity changed elsewhere. Setting the type is the " +
			"claim, atomic in the host's driver: of two applies (from any workspace) writing the same VF, one gets " +
			"it and the other moves on to the next free VF, or fails naming the GPU when none is left, having " +
			"made nothing. The plan refuses, on `type`'s line, a type no GPU offers and a type that cannot run " +
			"beside what runs on the GPU (a time-sliced GPU runs one type at a time; MIG-backed and time-sliced " +
			"types never share a GPU), naming what runs and where. Destroy refuses while a domain passes the VF " +
			"through; otherwise it resets the VF through the host's kernel (its function-level reset), gives it " +
			"back from `vfio-pci` and clears its type, which frees its share of the GPU. A VF found without the " +
			"type (cleared by hand, or its VFs disabled) is removed from state, and the next apply makes a vGPU " +
			"again. The host must be reached over a local or SSH connection (Kohaku reads and writes its sysfs), " +
			"and the GPU's VFs enabled (`kohaku_gpu_sriov`). A change of `type`, `host`, `gpu` or `hosts` " +
			"replaces the vGPU.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The VF's PCI address, prefixed by `<host>/` for a host of the provider's hosts map.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"host": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				Description:   "Key of the provider's `hosts` map the vGPU is on (`\"\"` is the default connection). Set it to name the host; leave it out to let Kohaku choose among `hosts`; known after apply either way, and kept.",
				PlanModifiers: sticky,
			},
			"hosts": schema.ListAttribute{
				Optional:      true,
				ElementType:   types.StringType,
				Description:   "The hosts Kohaku may choose among when `host` is not set: keys of the provider's `hosts` map, and `\"\"` for its default connection. Default: every host of the provider.",
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()},
			},
			"gpu": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				Description:   "PCI address of the GPU (the physical function) whose VF to take, e.g. `0000:3d:00.0`; needs `host` (or the default host). Leave it out to let Kohaku choose; known after apply either way, and kept.",
				Validators:    []validator.String{pciAddressValidator{}},
				PlanModifiers: sticky,
			},
			"type": schema.StringAttribute{
				Required: true,
				Description: "The vGPU type: its name as the vendor lists it (`NVIDIA L40S-12Q`, or `L40S-12Q`, " +
					"any case) or its id (`1161`). `data.kohaku_capacity` and `kohaku_pci_devices` list the " +
					"types each GPU offers now. Changing it replaces the vGPU.",
				PlanModifiers: []planmodifier.String{sameVGPUType{}, stringplanmodifier.RequiresReplace()},
			},
			"type_id": schema.Int64Attribute{
				Computed:      true,
				Description:   "The type's id on the host, what was written to `current_vgpu_type`.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			},
			"type_name": schema.StringAttribute{
				Computed:      true,
				Description:   "The type's name as the host lists it.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"address": schema.StringAttribute{
				Computed:      true,
				Description:   "PCI address of the VF: what `kohaku_vm.hostdevs` passes through.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

// candidates reads the GPUs the model may take a VF of: its GPU on its
// host when named, else every SR-IOV GPU of its hosts. A host that cannot
// be read is a reason, not an error, unless it is the only one.
func (r *vgpuResource) candidates(ctx context.Context, m vgpuModel, diags *diag.Diagnostics) ([]sriov.Candidate, []string) {
	var names []string
	switch {
	case !m.Host.IsNull() && !m.Host.IsUnknown():
		names = []string{m.Host.ValueString()}
	case !m.Hosts.IsNull() && !m.Hosts.IsUnknown():
		diags.Append(m.Hosts.ElementsAs(ctx, &names, false)...)
	case !m.GPU.IsNull() && !m.GPU.IsUnknown():
		names = []string{""}
	default:
		names = append([]string{""}, r.data.fleet.Names()...)
	}
	var out []sriov.Candidate
	var why []string
	for _, n := range names {
		c := r.data.client(n, diags)
		if c == nil {
			return nil, nil
		}
		label := n
		if label == "" {
			label = "the default host"
		}
		if !m.GPU.IsNull() && !m.GPU.IsUnknown() {
			a, err := vfio.ParseAddress(m.GPU.ValueString())
			if err != nil {
				diags.AddAttributeError(path.Root("gpu"), "Invalid PCI address", err.Error())
				return nil, nil
			}
			g, err := sriov.Inspect(ctx, c, a)
			if err != nil {
				why = append(why, label+": "+err.Error())
				continue
			}
			out = append(out, sriov.Candidate{Host: n, GPU: g})
			continue
		}
		gpus, err := sriov.InspectAll(ctx, c)
		if err != nil {
			why = append(why, label+": "+err.Error())
			continue
		}
		for i := range gpus {
			out = append(out, sriov.Candidate{Host: n, GPU: &gpus[i]})
		}
	}
	return out, why
}

// ModifyPlan refuses at plan, on type's line, a type no candidate GPU can
// take: unknown there, or in conflict with what runs. A GPU whose VFs are
// not enabled yet (a kohaku_gpu_sriov of the same apply) is not judged.
func (r *vgpuResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || !req.State.Raw.IsNull() || r.data == nil || !req.Config.Raw.IsFullyKnown() {
		return
	}
	var plan vgpuModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	cands, why := r.candidates(ctx, plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	for _, c := range cands {
		if c.GPU.NumVFs == 0 {
			return // its VFs may come in this apply
		}
	}
	if len(cands) == 0 && len(why) > 0 && !plan.GPU.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("gpu"), "The GPU cannot give a vGPU", strings.Join(why, "; "))
		return
	}
	if len(cands) == 0 {
		return // nothing readable to judge by (tcp hosts, hosts down): create says why
	}
	if _, err := sriov.Order(plan.Type.ValueString(), cands); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("type"), "No GPU can take this vGPU type", err.Error())
	}
}

func (r *vgpuResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan vgpuModel
	ctx, cancel, ok := sriovOpen(ctx, req.Plan, &plan, &resp.Diagnostics)
	defer cancel()
	if !ok {
		return
	}
	cands, why := r.candidates(ctx, plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	choices, err := sriov.Order(plan.Type.ValueString(), cands)
	if err != nil {
		var nf *sriov.NoFitError
		if errors.As(err, &nf) {
			nf.Reasons = append(nf.Reasons, why...)
		}
		resp.Diagnostics.AddAttributeError(path.Root("type"), "No GPU can take this vGPU type", err.Error())
		return
	}
	var tried []string
	for _, ch := range choices {
		c := r.data.client(ch.Host, &resp.Diagnostics)
		if c == nil {
			return
		}
		vf, err := sriov.Take(ctx, c, ch)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		moved, err := r.bindVF(ctx, c, vf)
		if err != nil {
			cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), sriovTimeout)
			defer cancel()
			note := "Its vGPU type was cleared again: nothing is left on the host."
			if cerr := sriov.ClearType(cleanup, c, vf); cerr != nil {
				note = "Clearing its vGPU type again failed too (" + cerr.Error() + "): clear it by hand with `echo 0 > " + sriov.CurrentPath(vf) + "`."
			}
			addError(&resp.Diagnostics, "Binding VF "+vf.String()+" to vfio-pci failed", err, note)
			return
		}
		plan.Host = types.StringValue(ch.Host)
		plan.GPU = types.StringValue(ch.GPU.String())
		plan.Address = types.StringValue(vf.String())
		plan.ID = types.StringValue(hostScopedID(ch.Host, vf.String()))
		plan.TypeID = types.Int64Value(int64(ch.Type.ID))
		plan.TypeName = types.StringValue(ch.Type.Name)
		tflog.Info(ctx, "vGPU made", map[string]any{"host": ch.Host, "vf": vf.String(), "type": ch.Type.Name, "bound_to_vfio_pci": moved})
		if moved {
			resp.Diagnostics.Append(resp.Private.SetKey(ctx, vgpuMovedKey, []byte(`{"moved":true}`))...)
		}
		resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
		return
	}
	resp.Diagnostics.AddAttributeError(path.Root("type"), "No VF could be given this vGPU type",
		"Every GPU that offered it when the apply started had its free VFs taken first by another apply: "+strings.Join(tried, "; ")+". Nothing was made.")
}

// vgpuMovedKey marks, in the resource's private state, a VF that create
// moved to vfio-pci and destroy is to give back.
const vgpuMovedKey = "vf_moved_to_vfio"

// bindVF readies vf for passthrough: a VF already on a VFIO driver
// (vfio-pci, or a vendor's VFIO variant driver such as the one NVIDIA's
// vGPU manager binds its VFs to) stays there, since the vendor's driver
// is what serves the vGPU; any other VF is bound to vfio-pci as
// kohaku_gpu_binding would (the holders check included). moved says
// whether it was moved.
func (r *vgpuResource) bindVF(ctx context.Context, c hosts.Host, vf vfio.Address) (moved bool, err error) {
	binder := newBinder(ctx, c)
	dev, err := binder.ReadDevice(ctx, vf)
	if err != nil {
		return false, err
	}
	if vfioCapable(dev.Driver) {
		return false, nil
	}
	// The VF is the vGPU whatever class its card reports (the nested
	// host's stand-in is an NVMe controller), so other classes are
	// allowed, but only for a VF alone in its IOMMU group.
	if len(dev.GroupMembers) > 1 {
		return false, fmt.Errorf("VF %s shares IOMMU group %d with %d other functions; a vGPU's VF must be alone in its group (the host's IOMMU and ACS decide it)", vf, dev.Group, len(dev.GroupMembers)-1)
	}
	_, m, err := (gpubind.Placed{Binder: binder, Machine: c, Options: vfio.Options{AllowOtherClasses: true}}).BindGPU(ctx, vf)
	return len(m) > 0, err
}

// vfioCapable reports whether a VF on driver is a VFIO device already:
// vfio-pci, a vendor's VFIO variant driver, or NVIDIA's own driver, which
// with its vGPU manager registers each VF as a VFIO device itself and
// must keep it: unbinding a VF from nvidia breaks the vGPU.
func vfioCapable(driver string) bool {
	return strings.Contains(driver, "vfio") || driver == vfio.DriverNVIDIA
}

// vf reads the model's VF and GPU; a nil GPU when its VFs are gone.
func (r *vgpuResource) vf(ctx context.Context, m vgpuModel, diags *diag.Diagnostics) (*sriov.GPU, *sriov.VF, bool) {
	c := r.data.client(m.Host.ValueString(), diags)
	if c == nil {
		return nil, nil, false
	}
	pf, err1 := vfio.ParseAddress(m.GPU.ValueString())
	vfa, err2 := vfio.ParseAddress(m.Address.ValueString())
	if err := errors.Join(err1, err2); err != nil {
		diags.AddError("Invalid vGPU state", err.Error())
		return nil, nil, false
	}
	g, err := sriov.Inspect(ctx, c, pf)
	if err != nil && strings.Contains(err.Error(), "no SR-IOV capability") {
		return nil, nil, true
	}
	if err != nil {
		addError(diags, "Reading vGPU "+vfa.String(), err)
		return nil, nil, false
	}
	for i := range g.VFs {
		if g.VFs[i].Address == vfa {
			return g, &g.VFs[i], true
		}
	}
	return g, nil, true
}

func (r *vgpuResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state vgpuModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	g, vf, ok := r.vf(ctx, state, &resp.Diagnostics)
	if !ok {
		return
	}
	found := vf != nil && vf.Current != 0 && int64(vf.Current) == state.TypeID.ValueInt64()
	if !foundOnHost(ctx, resp, "vGPU", state.Address.ValueString(), found, nil) {
		return
	}
	if name := g.TypeByID(vf.Current).Name; name != "" {
		state.TypeName = types.StringValue(name)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update has nothing to change in place: every argument replaces.
func (r *vgpuResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan vgpuModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *vgpuResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state vgpuModel
	ctx, cancel, ok := sriovOpen(ctx, req.State, &state, &resp.Diagnostics)
	defer cancel()
	if !ok {
		return
	}
	_, vf, ok := r.vf(ctx, state, &resp.Diagnostics)
	if !ok || vf == nil {
		return // its VFs are gone, and its type with them
	}
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	binder := newBinder(ctx, c)
	if err := binder.CheckNotInUse(ctx, []vfio.Address{vf.Address}); err != nil {
		addError(&resp.Diagnostics, "Destroying vGPU "+vf.Address.String()+" failed", err,
			"Stop or change the VM that passes it through first; the vGPU is left as it was.")
		return
	}
	movedMark, d := req.Private.GetKey(ctx, vgpuMovedKey)
	resp.Diagnostics.Append(d...)
	if vf.Driver == vfio.DriverVFIO {
		if err := (gpubind.GroupResetter{Host: c}).ResetGPU(ctx, vf.Address); err != nil {
			summary := "vGPU " + vf.Address.String() + " was not reset"
			if errors.Is(err, hostapi.ErrHostFilesUnsupported) {
				summary += " (the connection cannot reach the kernel's reset)"
			}
			resp.Diagnostics.AddWarning(summary, err.Error()+"\n\nClearing its type below still destroys the vGPU instance on NVIDIA's driver, which gives its framebuffer share back; see the GPU guide for what is cleared.")
		}
	}
	if vf.Driver == vfio.DriverVFIO && len(movedMark) > 0 {
		if err := (gpubind.Placed{Binder: binder, Machine: c}).GiveBackGPU(ctx, []vfio.Address{vf.Address}); err != nil {
			addError(&resp.Diagnostics, "Giving vGPU "+vf.Address.String()+" back from vfio-pci failed", err, "Its type is still set; the next destroy tries again.")
			return
		}
	}
	if err := sriov.ClearType(ctx, c, vf.Address); err != nil {
		addError(&resp.Diagnostics, "Clearing the type of vGPU "+vf.Address.String()+" failed", err)
	}
}

// ImportState takes `<host>/<gpu>/<vf>` or `<gpu>/<vf>`: the type is read
// from the VF.
func (r *vgpuResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	parts := strings.Split(req.ID, "/")
	host := ""
	if len(parts) == 3 {
		host, parts = parts[0], parts[1:]
	}
	var pf, vf vfio.Address
	var err error
	if len(parts) == 2 {
		pf, err = vfio.ParseAddress(parts[0])
		if err == nil {
			vf, err = vfio.ParseAddress(parts[1])
		}
	}
	if len(parts) != 2 || err != nil {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q: import a vGPU as <gpu>/<vf> (e.g. 0000:3d:00.0/0000:3d:00.4), or <host>/<gpu>/<vf> for a host of the provider's hosts map.", req.ID))
		return
	}
	c := r.data.client(host, &resp.Diagnostics)
	if c == nil {
		return
	}
	g, err := sriov.Inspect(ctx, c, pf)
	if err != nil {
		addError(&resp.Diagnostics, "Importing vGPU "+vf.String(), err)
		return
	}
	for _, v := range g.VFs {
		if v.Address == vf && v.Current != 0 {
			t := g.TypeByID(v.Current)
			resp.Diagnostics.Append(resp.State.Set(ctx, &vgpuModel{
				ID: types.StringValue(hostScopedID(host, vf.String())), Host: types.StringValue(host), Hosts: types.ListNull(types.StringType),
				GPU: types.StringValue(pf.String()), Type: types.StringValue(t.Name), TypeID: types.Int64Value(int64(t.ID)),
				TypeName: types.StringValue(t.Name), Address: types.StringValue(vf.String()),
			})...)
			return
		}
	}
	resp.Diagnostics.AddError("No vGPU to import", fmt.Sprintf("%s is not a VF of %s with a vGPU type set.", vf, pf))
}

// sameVGPUType keeps the state's spelling of type when the configuration
// names the same type another way ("L40S-12Q" for "NVIDIA L40S-12Q", or
// its id), so that an import, or a respelling, replaces nothing.
type sameVGPUType struct{}

func (sameVGPUType) Description(context.Context) string {
	return "Keeps the state's type when the configuration names the same type by another spelling or its id."
}
func (m sameVGPUType) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (sameVGPUType) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.State.Raw.IsNull() || req.PlanValue.IsUnknown() || req.PlanValue.IsNull() || req.StateValue.IsNull() {
		return
	}
	var id types.Int64
	var name types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("type_id"), &id)...)
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("type_name"), &name)...)
	if _, ok := sriov.Resolve(req.PlanValue.ValueString(), []sriov.Type{{ID: int(id.ValueInt64()), Name: name.ValueString()}}); ok {
		resp.PlanValue = req.StateValue
	}
}
