package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var (
	_ resource.ResourceWithConfigure   = (*gpuBindingResource)(nil)
	_ resource.ResourceWithImportState = (*gpuBindingResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*gpuBindingResource)(nil)
)

func newGPUBindingResource() resource.Resource { return &gpuBindingResource{} }

type gpuBindingResource struct {
	configuredResource
}

func (r *gpuBindingResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_gpu_binding"
}

// Default operation timeouts of a binding; the timeouts block overrides them.
const gpuBindingTimeout = 5 * time.Minute

func (r *gpuBindingResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Moves a GPU, and every other function of its IOMMU group (typically the card's HDMI " +
			"audio), from the host's drivers to `vfio-pci` through libvirt's node-device API, so a `kohaku_vm` " +
			"can pass it through. " +
			"Each function's original driver is recorded, and for NVIDIA cards the host's NVIDIA driver version is read before the unbind so the guest can install the same one. " +
			"Destroying the binding gives every function back to the host, whose kernel probes its own driver again. " +
			"While a running domain passes one of the functions through, destroy gives nothing back and fails naming the function and the domain; the binding stays in state until that domain stops. " +
			"A give-back libvirt refuses keeps the binding in state, recording which functions are still on " +
			"vfio-pci, and a bind that fails and cannot give back what it moved keeps the binding tainted, " +
			"recording the functions it left there: the next destroy or apply gives them back. " +
			"The host needs a working IOMMU (VT-d or AMD-Vi, enabled in the firmware and on the kernel command line); without one the binding is refused. " +
			"A function that is found back on a host driver (someone ran `virsh nodedev-reattach`, the host rebooted) shows as a change in the next plan, and apply binds it again. " +
			"Over local and SSH connections, before anything is unbound, the host's processes are searched for " +
			"what holds the functions (a process with the GPU's `/dev/nvidiaN`, its DRM nodes `/dev/dri/cardN` and `renderDN`, or the function's sysfs files open, " +
			"`nvidia-persistenced`), and the bind is refused naming each (PID and command) instead of hanging in " +
			"the driver's unbind; elsewhere, or should an unbind hang anyway, it ends at the provider's " +
			"`call_timeout` or the `timeouts` block's, whichever comes first, and the functions bound before it " +
			"are given back. The hung function is followed for up to two minutes more: the kernel finishes its " +
			"unbind when the holder lets go, libvirt puts it on `vfio-pci`, and it is given back to its driver; " +
			"one still held after that is recorded in the tainted binding, for destroy or the next apply to give back. " +
			"The plan warns when a GPU function has no function-level reset (`flr` in its " +
			"sysfs `reset_method`). Destroy does not reset the GPU itself: the kernel's `vfio-pci` resets a " +
			"function when a guest opens or closes it, where the device has a reset it can use, and a reset " +
			"clears the device's memory only where the device does so (see the GPU guide). GPUs a `kohaku_vm` " +
			"places are reset and, when that fails, quarantined at the VM's destroy; a binding's GPU is not " +
			"placed, so it is not quarantined.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The binding's id: the canonical PCI address (`0000:01:00.0`), or `<host>/<address>` when `host` is set. Pass it to `kohaku_vm.gpus`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"host": schema.StringAttribute{
				Optional: true,
				Description: "Key of the provider's `hosts` map whose device to bind; empty means the default " +
					"connection. A change replaces the binding (the device is given back on the old host and " +
					"bound on the new one).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"address": schema.StringAttribute{
				Required: true,
				Description: "PCI address of the GPU (or of any function of the group to bind) as `DDDD:BB:SS.F` in lower-case hex, as `lspci -D` prints it, e.g. `0000:01:00.0`. " +
					"The whole IOMMU group this function belongs to is bound. A change replaces the binding.",
				Validators:    []validator.String{pciAddressValidator{}},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"functions": schema.SetAttribute{
				Optional:    true,
				Computed:    true,
				ElementType: types.StringType,
				Description: "The functions to bind, as PCI addresses. Default: every function of the IOMMU group of `address`, which is also what this attribute reports. " +
					"An explicit list documents what will move and must still cover the whole group (PCI " +
					"bridges in the group excepted): a partial group is refused at plan time with the " +
					"missing functions named, because a VM can use a group only when all of it is on " +
					"vfio-pci. Changed in place.",
				Validators:    []validator.Set{setvalidator.ValueStringsAre(pciAddressValidator{})},
				PlanModifiers: []planmodifier.Set{setplanmodifier.UseStateForUnknown()},
			},
			"allow_other_classes": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				Description: "Allow binding a group that holds storage controllers (class `01xx`), network controllers (`02xx`) or bridges (`06xx`): devices the host may need for its own disks and network. " +
					"Default `false`: such a group is refused with the devices named. When `true`, bridges keep " +
					"their driver (VFIO accepts them in the group that way) and every other function moves " +
					"to vfio-pci. Changed in place.",
			},
			"nvidia_driver_version": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Description: "The host's NVIDIA driver version, e.g. `550.54.14`, for `kohaku_seed.nvidia_driver.version` so the guest installs the same driver. " +
					"When not set and the device is an NVIDIA card (PCI vendor `10de`, or a function the host's " +
					"`nvidia` module drives), it is read from `" + gpubind.NVIDIAVersionFile + "` on the host before the " +
					"unbind: directly for a local (`qemu:///system`) connection, and over SSH for " +
					"`qemu+ssh://` hosts. " +
					"Over `tcp` and `tls` Kohaku cannot read host files: set it here. Null when there is no NVIDIA driver to read. Changed in place.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"iommu_group": schema.Int64Attribute{
				Computed:      true,
				Description:   "Number of the IOMMU group that was bound.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			},
			"function_details": schema.ListNestedAttribute{
				Computed:    true,
				Description: "Every function the binding moved, sorted by address.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"address":    schema.StringAttribute{Computed: true, Description: "PCI address of the function."},
					"class":      schema.StringAttribute{Computed: true, Description: "PCI class code as six hex digits, e.g. `030000`."},
					"class_name": schema.StringAttribute{Computed: true, Description: "The class as lspci names it, e.g. `VGA compatible controller` or `Audio device`."},
					"vendor_id":  schema.StringAttribute{Computed: true, Description: "PCI vendor id as four hex digits, e.g. `10de`."},
					"product_id": schema.StringAttribute{Computed: true, Description: "PCI product id as four hex digits."},
					"original_driver": schema.StringAttribute{Computed: true, Description: "The host driver the " +
						"function had before it was bound, e.g. `nvidia` or `snd_hda_intel`; empty when it had " +
						"none, or when it was on vfio-pci already (then it is unknown)."},
					"current_driver": schema.StringAttribute{Computed: true, Description: "The host driver the function has now: `vfio-pci` while bound. Anything else is drift, which the next apply corrects."},
				}},
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{
				Create: true, Update: true, Delete: true,
				CreateDescription: "How long binding may take; a hung unbind ends there (or at the provider's `call_timeout`): the functions bound before it are given back, and the hung one once its unbind ends (within two more minutes). Default `5m`.",
				UpdateDescription: "How long binding functions found off vfio-pci again may take. Default `5m`.",
				DeleteDescription: "How long giving the functions back may take. Default `5m`.",
			}),
		},
	}
}

// ModifyPlan fills the id, refuses at plan time what apply would refuse
// (unknown address, no IOMMU, a partial group, other classes), and turns a
// function found off vfio-pci into a planned change.
func (r *gpuBindingResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan gpuBindingModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var state *gpuBindingModel
	if !req.State.Raw.IsNull() {
		state = &gpuBindingModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	if !plan.Host.IsUnknown() && !plan.Address.IsUnknown() {
		if a, err := vfio.ParseAddress(plan.Address.ValueString()); err == nil {
			plan.ID = types.StringValue(bindingID(plan.Host.ValueString(), a))
		}
	}
	replacing := state != nil && (!state.Address.Equal(plan.Address) || !state.Host.Equal(plan.Host))
	if state != nil && !replacing {
		details := gpuFunctionDetails(ctx, state.FunctionDetails, &resp.Diagnostics)
		var drifted []string
		for _, d := range details {
			if d.CurrentDriver.ValueString() != vfio.DriverVFIO {
				drifted = append(drifted, fmt.Sprintf("%s is on %s", d.Address.ValueString(), gpubind.DriverOrNone(d.CurrentDriver.ValueString())))
			}
		}
		if plan.NVIDIADriverVersion.IsUnknown() {
			// Not configured: keep what was read (null after an import).
			plan.NVIDIADriverVersion = state.NVIDIADriverVersion
		}
		if len(drifted) > 0 {
			plan.FunctionDetails = types.ListUnknown(gpuFunctionType)
			resp.Diagnostics.AddWarning("GPU binding "+plan.ID.ValueString()+" has drifted",
				fmt.Sprintf("%s, not vfio-pci. Apply binds it to vfio-pci again.", strings.Join(drifted, "; ")))
		} else {
			plan.FunctionDetails = state.FunctionDetails
		}
	}
	// Check the plan against the host when something the check depends on
	// is new or changed, and every input is known.
	check := state == nil || replacing || !state.Functions.Equal(plan.Functions) || !state.AllowOtherClasses.Equal(plan.AllowOtherClasses)
	if check && r.data != nil && req.Config.Raw.IsFullyKnown() {
		var cfg gpuBindingModel
		resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
		if resp.Diagnostics.HasError() {
			return
		}
		target, opts, ok := bindingInputs(ctx, &cfg, &resp.Diagnostics)
		if !ok {
			return
		}
		c := r.data.client(cfg.Host.ValueString(), &resp.Diagnostics)
		if c == nil {
			return
		}
		p, ok := planOnHost(ctx, c, target, opts, &resp.Diagnostics)
		if !ok {
			return
		}
		warnNoFLR(ctx, c, p.Bind, &resp.Diagnostics)
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

func (r *gpuBindingResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan gpuBindingModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Create(ctx, gpuBindingTimeout)
	ctx, cancel, c := r.data.open(ctx, plan.Host.ValueString(), timeout, d, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	target, opts, ok := bindingInputs(ctx, &plan, &resp.Diagnostics)
	if !ok {
		return
	}
	binder := newBinder(ctx, c)
	res, refused, err := applyBinding(ctx, binder, c, &plan, gpubind.Request{Target: target, Options: opts}, &resp.Diagnostics)
	if refused {
		return
	}
	p, bound := res.Plan, res.Bound
	plan.ID = types.StringValue(bindingID(plan.Host.ValueString(), target))
	plan.IOMMUGroup = types.Int64Value(int64(p.Group))
	if plan.Functions.IsUnknown() || plan.Functions.IsNull() {
		plan.Functions = pciAddressSet(p.Addresses())
	}
	if err != nil {
		var be *gpubind.BindError
		if errors.As(err, &be) && len(be.Left) > 0 {
			// The rollback could not give everything back: the state
			// records what is still on vfio-pci, and Terraform keeps the
			// binding tainted, so destroy or the next apply gives it back.
			plan.FunctionDetails = gpuDetailsList(binder.ReadBack(ctx, be.Left))
			resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
			addError(&resp.Diagnostics, "Binding "+target.String()+" to vfio-pci failed",
				err, fmt.Sprintf("The binding is kept in state, tainted, with the functions still on vfio-pci (%s): "+
					"terraform destroy, or the next apply, gives them back.", boundAddresses(be.Left)))
			return
		}
		addError(&resp.Diagnostics, "Binding "+target.String()+" to vfio-pci failed", err)
		return
	}
	plan.FunctionDetails = gpuDetailsList(bound)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// recordLeft is what a binding records after a rollback that left some
// functions on vfio-pci: the functions it recorded, each with its driver
// read again (kept as recorded when it cannot be read), and those left.
func recordLeft(ctx context.Context, b gpubind.Binder, details []gpuFunctionModel, left []gpubind.Bound) types.List {
	seen := map[string]bool{}
	for i := range details {
		seen[details[i].Address.ValueString()] = true
		if a, err := vfio.ParseAddress(details[i].Address.ValueString()); err == nil {
			if dev, err := b.ReadDevice(ctx, a); err == nil {
				details[i].CurrentDriver = types.StringValue(dev.Driver)
			}
		}
	}
	var more []gpubind.Bound
	for _, l := range left {
		if !seen[l.Address.String()] {
			more = append(more, l)
		}
	}
	var extra []gpuFunctionModel
	if len(more) > 0 {
		extra = gpuFunctionDetails(ctx, gpuDetailsList(b.ReadBack(ctx, more)), &diag.Diagnostics{})
	}
	all := append(details, extra...)
	sort.Slice(all, func(i, j int) bool { return all[i].Address.ValueString() < all[j].Address.ValueString() })
	return gpuDetailsFromModels(all)
}

func boundAddresses(fns []gpubind.Bound) string {
	s := make([]string, 0, len(fns))
	for _, f := range fns {
		s = append(s, f.Address.String())
	}
	return strings.Join(s, ", ")
}

func (r *gpuBindingResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state gpuBindingModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	target, err := vfio.ParseAddress(state.Address.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("address"), "Invalid PCI address in state", err.Error())
		return
	}
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	inv, err := newBinder(ctx, c).Inventory(ctx)
	if err != nil {
		addError(&resp.Diagnostics, "Reading the host's PCI devices", err)
		return
	}
	if gone := readBinding(ctx, inv, target, &state, &resp.Diagnostics); gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update rebinds functions found off vfio-pci and re-checks the group
// against changed functions or allow_other_classes.
// readBinding refreshes m, the binding of target, from the host's PCI
// inventory, as Read and the list resource do: a binding whose functions
// are unknown (imported, or listed) is the group as the host shows it now.
// gone is true when the host no longer has target.
func readBinding(ctx context.Context, inv *vfio.Inventory, target vfio.Address, m *gpuBindingModel, diags *diag.Diagnostics) (gone bool) {
	dev := inv.Lookup(target)
	if dev == nil {
		tflog.Info(ctx, "the bound device is gone from the host; removing the binding from state", map[string]any{"address": target.String()})
		diags.AddWarning("GPU "+target.String()+" is gone", fmt.Sprintf("The host no longer has a "+
			"PCI function %s, so the binding was removed from state; the next apply tries to bind it again.", target))
		return true
	}
	m.ID = types.StringValue(bindingID(m.Host.ValueString(), target))
	if dev.HasIOMMU() {
		m.IOMMUGroup = types.Int64Value(int64(dev.Group))
	}
	if m.AllowOtherClasses.IsNull() {
		m.AllowOtherClasses = types.BoolValue(false) // imported
	}
	details := gpuFunctionDetails(ctx, m.FunctionDetails, diags)
	if len(details) == 0 {
		// Imported: the binding is the group as the host shows it now.
		p, err := vfio.PlanBinding(inv, target, vfio.Options{AllowOtherClasses: true})
		if err != nil {
			addBindingPlanError(diags, target, err)
			return false
		}
		bound := make([]gpubind.Bound, 0, len(p.Bind))
		for _, b := range p.Bind {
			bound = append(bound, gpubind.Bound{Device: b.Device, Original: b.OriginalDriver})
		}
		m.FunctionDetails = gpuDetailsList(bound)
		if m.Functions.IsNull() || m.Functions.IsUnknown() {
			m.Functions = pciAddressSet(p.Addresses())
		}
	} else {
		for i := range details {
			d := &details[i]
			a, err := vfio.ParseAddress(d.Address.ValueString())
			if err != nil {
				continue
			}
			if fn := inv.Lookup(a); fn != nil {
				d.CurrentDriver = types.StringValue(fn.Driver)
			} else {
				d.CurrentDriver = types.StringValue("") // the function itself is gone
			}
		}
		m.FunctionDetails = gpuDetailsFromModels(details)
	}
	if m.NVIDIADriverVersion.IsUnknown() {
		m.NVIDIADriverVersion = types.StringNull()
	}
	return false
}

func (r *gpuBindingResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state gpuBindingModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Update(ctx, gpuBindingTimeout)
	ctx, cancel, c := r.data.open(ctx, plan.Host.ValueString(), timeout, d, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	target, opts, ok := bindingInputs(ctx, &plan, &resp.Diagnostics)
	if !ok {
		return
	}
	// What each function had before Kohaku bound it: the state's record,
	// else (a function that fell back to the host) the driver it is on now.
	known := map[string]string{}
	for _, d := range gpuFunctionDetails(ctx, state.FunctionDetails, &resp.Diagnostics) {
		if o := d.OriginalDriver.ValueString(); o != "" {
			known[d.Address.ValueString()] = o
		}
	}
	binder := newBinder(ctx, c)
	res, refused, err := applyBinding(ctx, binder, c, &plan, gpubind.Request{Target: target, Options: opts, Rebind: true, Known: known}, &resp.Diagnostics)
	if refused {
		return
	}
	p, bound := res.Plan, res.Bound
	if err != nil {
		var be *gpubind.BindError
		if errors.As(err, &be) && len(be.Left) > 0 {
			// The rollback left functions on vfio-pci: the prior state,
			// with every function's driver as it is now, records them.
			state.FunctionDetails = recordLeft(ctx, binder, gpuFunctionDetails(ctx, state.FunctionDetails, &resp.Diagnostics), be.Left)
			resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
		}
		addError(&resp.Diagnostics, "Binding "+target.String()+" to vfio-pci failed", err)
		return
	}
	if plan.NVIDIADriverVersion.IsUnknown() {
		plan.NVIDIADriverVersion = state.NVIDIADriverVersion
	}
	plan.IOMMUGroup = types.Int64Value(int64(p.Group))
	if plan.Functions.IsUnknown() || plan.Functions.IsNull() {
		plan.Functions = pciAddressSet(p.Addresses())
	}
	plan.FunctionDetails = gpuDetailsList(bound)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// Delete gives every function back to the host. A function already back on
// a host driver is fine; a failure names the function and keeps the binding
// in state so destroy can be retried.
func (r *gpuBindingResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state gpuBindingModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := state.Timeouts.Delete(ctx, gpuBindingTimeout)
	ctx, cancel, c := r.data.open(ctx, state.Host.ValueString(), timeout, d, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	target, _ := vfio.ParseAddress(state.Address.ValueString())
	details := gpuFunctionDetails(ctx, state.FunctionDetails, &resp.Diagnostics)
	var addrs []vfio.Address
	original := map[vfio.Address]string{}
	for _, d := range details {
		if a, err := vfio.ParseAddress(d.Address.ValueString()); err == nil {
			addrs = append(addrs, a)
			original[a] = d.OriginalDriver.ValueString()
		}
	}
	if len(addrs) == 0 {
		addrs = []vfio.Address{target}
	}
	binder := newBinder(ctx, c)
	title := "Giving " + state.ID.ValueString() + " back to the host failed"
	// A function a running domain holds cannot be given back: say which
	// domain, and give back none of the group (the domain needs all of it).
	err := binder.CheckNotInUse(ctx, addrs)
	var users *gpubind.UsersError
	switch {
	case errors.As(err, &users):
		addError(&resp.Diagnostics, "Checking which domains use "+target.String(), users.Err)
		return
	case err != nil:
		resp.Diagnostics.AddError(title, fmt.Sprintf("Nothing was given back: the functions are %v\n\nThe binding stays in state: stop those domains, then run destroy again.", err))
		return
	}
	notes, failed := binder.Release(ctx, addrs, original)
	if len(notes) > 0 {
		resp.Diagnostics.AddWarning("GPU binding "+state.ID.ValueString()+" given back with remarks", strings.Join(notes, "; ")+".")
	}
	if len(failed) > 0 {
		resp.Diagnostics.AddError(title,
			fmt.Sprintf("These functions are still on vfio-pci:\n  %s\n"+
				"The binding stays in state: fix the cause and run destroy again, or give a function back by "+
				"hand with `virsh nodedev-reattach pci_DDDD_BB_SS_F`.", strings.Join(failed, "\n  ")))
		// The state keeps the binding; its drivers say what was given back
		// and what was not.
		if len(details) > 0 {
			state.FunctionDetails = recordLeft(ctx, binder, details, nil)
			resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
		}
	}
}

// ImportState takes `<address>` or `<host>/<address>`.
func (r *gpuBindingResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, raw := "", req.ID
	if i := strings.LastIndex(req.ID, "/"); i >= 0 {
		host, raw = req.ID[:i], req.ID[i+1:]
	}
	a, err := vfio.ParseAddress(raw)
	if err != nil || (host == "" && strings.Contains(req.ID, "/")) {
		msg := "not a PCI address"
		if err != nil {
			msg = err.Error()
		}
		resp.Diagnostics.AddError("Invalid import ID",
			fmt.Sprintf("%q: %s. Import a GPU binding by its PCI address, e.g. 0000:01:00.0, or as <host>/<address> (e.g. gpu2/0000:01:00.0) for a host of the provider's hosts map.", req.ID, msg))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), bindingID(host, a))...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("address"), a.String())...)
	if host != "" {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("host"), host)...)
	}
}

// ---------------------------------------------------------------- helpers

// bindingID is the canonical address, prefixed by the host key when set:
// the form kohaku_vm.gpus takes.
func bindingID(host string, a vfio.Address) string {
	if host == "" {
		return a.String()
	}
	return host + "/" + a.String()
}

// bindingInputs reads the target address and planning options from a model.
func bindingInputs(ctx context.Context, m *gpuBindingModel, diags *diag.Diagnostics) (vfio.Address, vfio.Options, bool) {
	target, err := vfio.ParseAddress(m.Address.ValueString())
	if err != nil {
		diags.AddAttributeError(path.Root("address"), "Invalid PCI address", err.Error())
		return target, vfio.Options{}, false
	}
	opts := vfio.Options{AllowOtherClasses: m.AllowOtherClasses.ValueBool()}
	if !m.Functions.IsNull() && !m.Functions.IsUnknown() {
		var fns []string
		diags.Append(m.Functions.ElementsAs(ctx, &fns, false)...)
		for _, s := range fns {
			a, err := vfio.ParseAddress(s)
			if err != nil {
				diags.AddAttributeError(path.Root("functions"), "Invalid PCI address", err.Error())
				continue
			}
			opts.Functions = append(opts.Functions, a)
		}
	}
	return target, opts, !diags.HasError()
}

// addBindingPlanError turns a refusal of the planner into a diagnostic on the
// attribute the user can change.
func addBindingPlanError(diags *diag.Diagnostics, target vfio.Address, err error) {
	var (
		unknown *vfio.UnknownDeviceError
		noIOMMU *vfio.NoIOMMUError
		partial *vfio.PartialGroupError
		outside *vfio.NotInGroupError
		other   *vfio.OtherClassError
	)
	switch {
	case errors.As(err, &unknown):
		diags.AddAttributeError(path.Root("address"), "Unknown PCI address "+target.String(), err.Error())
	case errors.As(err, &noIOMMU):
		diags.AddAttributeError(path.Root("address"), "No usable IOMMU on the host", err.Error())
	case errors.As(err, &partial):
		diags.AddAttributeError(path.Root("functions"), fmt.Sprintf("Partial IOMMU group %d", partial.Group), err.Error())
	case errors.As(err, &outside):
		diags.AddAttributeError(path.Root("functions"), fmt.Sprintf("Function outside IOMMU group %d", outside.Group), err.Error())
	case errors.As(err, &other):
		diags.AddAttributeError(path.Root("allow_other_classes"), fmt.Sprintf("IOMMU group %d holds devices the host may need", other.Group), err.Error())
	default:
		diags.AddAttributeError(path.Root("address"), "Cannot bind "+target.String(), err.Error())
	}
}

// warnBindingChecks warns of what a bind could not read before it went
// ahead: the host's processes holding the functions, and the host's NVIDIA
// driver version.
func warnBindingChecks(c hosts.Host, res *gpubind.Result, diags *diag.Diagnostics) {
	if res.HoldersErr != nil {
		diags.AddWarning("Could not look for processes holding "+res.Plan.Target.String(),
			fmt.Sprintf("%v. The bind goes ahead; should a process hold the device, the unbind can hang until call_timeout or the binding's timeout.", res.HoldersErr))
	}
	switch err := res.NVIDIAVersionErr; {
	case err == nil:
	case errors.Is(err, hosts.ErrHostFilesUnsupported):
		diags.AddAttributeWarning(path.Root("nvidia_driver_version"), "Host NVIDIA driver version not read",
			fmt.Sprintf("Kohaku reads %s from the host only over local and SSH connections, not over %s. Set "+
				"nvidia_driver_version to the host's version if the guest needs it.", gpubind.NVIDIAVersionFile, c.Endpoint().Transport))
	default:
		diags.AddAttributeWarning(path.Root("nvidia_driver_version"), "Host NVIDIA driver version not read", err.Error())
	}
}

// planOnHost reads the host's PCI devices and plans the binding of target:
// what plan time checks against the host.
func planOnHost(ctx context.Context, c hosts.Host, target vfio.Address, opts vfio.Options, diags *diag.Diagnostics) (*vfio.Plan, bool) {
	_, p, err := newBinder(ctx, c).Plan(ctx, target, opts)
	if refusedBeforeBind(diags, target, err) {
		return nil, false
	}
	return p, true
}

// refusedBeforeBind turns a failure of the steps before a bind (nothing
// has moved) into its diagnostic; false for no error or the bind's own.
func refusedBeforeBind(diags *diag.Diagnostics, target vfio.Address, err error) bool {
	var (
		inv   *gpubind.InventoryError
		plan  *gpubind.PlanError
		inUse *gpubind.InUseError
		held  *gpubind.HoldersError
		users *gpubind.UsersError
	)
	switch {
	case errors.As(err, &inv):
		addError(diags, "Reading the host's PCI devices", inv.Err)
	case errors.As(err, &plan):
		addBindingPlanError(diags, target, plan.Err)
	case errors.As(err, &inUse) && errors.As(err, &users):
		addError(diags, "Checking which domains use "+target.String(), users.Err)
	case errors.As(err, &inUse):
		diags.AddError("GPU "+target.String()+" is in use", inUse.Err.Error())
	case errors.As(err, &held):
		diags.AddError("Binding "+target.String()+" to vfio-pci refused: the device is in use on the host",
			err.Error()+"\n\nNothing was changed.")
	default:
		return false
	}
	return true
}

// newBinder applies binding plans on c, logging each function it moves.
// applyBinding is Create's and Update's gpubind.Apply of req, reading the
// NVIDIA driver version where plan leaves it unknown (while the host driver
// still holds the card) and recording it in plan, with the warnings of
// the checks Apply made. refused says that it stopped before anything was
// bound; the diagnostic says why.
func applyBinding(ctx context.Context, binder gpubind.Binder, c hosts.Host, plan *gpuBindingModel, req gpubind.Request,
	diags *diag.Diagnostics) (res *gpubind.Result, refused bool, err error) {
	req.ReadNVIDIAVersion = plan.NVIDIADriverVersion.IsUnknown()
	res, err = gpubind.Apply(ctx, binder, c, req)
	if refusedBeforeBind(diags, req.Target, err) {
		return res, true, err
	}
	warnBindingChecks(c, res, diags)
	if res.NVIDIAChecked {
		plan.NVIDIADriverVersion = types.StringPointerValue(res.NVIDIAVersion)
	}
	return res, false, err
}

func newBinder(ctx context.Context, c hosts.Host) gpubind.Binder {
	return gpubind.Binder{Host: c,
		Log:   func(msg string, fields map[string]any) { tflog.Info(ctx, msg, fields) },
		Debug: func(msg string) { tflog.Debug(ctx, msg) }}
}
