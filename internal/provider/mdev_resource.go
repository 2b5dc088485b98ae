package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/mdev"
)

var (
	_ resource.ResourceWithConfigure   = (*mdevResource)(nil)
	_ resource.ResourceWithImportState = (*mdevResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*mdevResource)(nil)
)

func newMdevResource() resource.Resource { return &mdevResource{} }

type mdevResource struct {
	configuredResource
}

type mdevModel struct {
	ID         types.String `tfsdk:"id"`
	Host       types.String `tfsdk:"host"`
	Parent     types.String `tfsdk:"parent"`
	Type       types.String `tfsdk:"type"`
	UUID       types.String `tfsdk:"uuid"`
	NodeDevice types.String `tfsdk:"node_device"`
	Active     types.Bool   `tfsdk:"active"`
	Autostart  types.Bool   `tfsdk:"autostart"`
}

// mdevTimeout bounds each operation on a mediated device.
const mdevTimeout = 2 * time.Minute

var mdevUUIDRegexp = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func (r *mdevResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_mdev"
}

func (r *mdevResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A mediated device (a vGPU, or another instance a parent device's driver splits off, " +
			"such as an NVIDIA vGPU profile or an Intel GVT-g slice), created through libvirt's node-device API: " +
			"defined persistently, marked to start with the host, and started. Pass its `uuid` to " +
			"`kohaku_vm.mdevs`. The plan refuses a parent the host does not have, a type the parent does not " +
			"offer, a type with no instances left and a UUID another mediated device has, naming what the " +
			"parent offers (`kohaku_pci_devices` lists it too). Destroy stops the device and removes its " +
			"definition; the parent is left as it was. A device found gone from the host is removed from state " +
			"and created again by the next apply; one found stopped, or no longer marked to autostart, shows as " +
			"a change of `active` or `autostart`, and apply starts it and marks it again in place. The host's libvirt creates mediated devices with `mdevctl`, " +
			"which must be installed there (libvirt 9.0 fails with \"Cannot find 'mdevctl' in path\" otherwise). " +
			"A change of `host`, `parent`, `type` or `uuid` replaces the device; `active` and `autostart` are " +
			"put right in place, and `id` and `node_device` are computed.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The device's id: its `uuid`, or `<host>/<uuid>` when `host` is set.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"host": schema.StringAttribute{
				Optional: true,
				Description: "Key of the provider's `hosts` map whose device to create; empty means the default " +
					"connection. A change replaces the device.",
				PlanModifiers: replace,
			},
			"parent": schema.StringAttribute{
				Required: true,
				Description: "The parent device: a PCI address as `lspci -D` prints it (`0000:41:00.0`, a GPU whose " +
					"driver offers vGPU types), or a libvirt node-device name (`pci_0000_41_00_0`, `mtty_mtty`). " +
					"`kohaku_pci_devices` lists each PCI parent with its `mdev_types`. A change replaces the device.",
				Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
				PlanModifiers: replace,
			},
			"type": schema.StringAttribute{
				Required: true,
				Description: "The mediated device type, as the parent names it, e.g. `nvidia-35` or `mtty-2` " +
					"(`mdev_types` in `kohaku_pci_devices`, or `virsh nodedev-dumpxml` of the parent). " +
					"A change replaces the device.",
				Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
				PlanModifiers: replace,
			},
			"uuid": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Description: "The device's UUID in lower case, which names it on the host and in `kohaku_vm.mdevs`. " +
					"Default: a random UUID chosen at create. A change replaces the device.",
				Validators: []validator.String{stringvalidator.RegexMatches(mdevUUIDRegexp,
					"must be a UUID in lower case, such as 6b6f6861-6b75-4d64-8000-000000000001")},
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
			},
			"active": schema.BoolAttribute{
				Computed: true,
				Description: "Whether the device is started on the host, as the last refresh found it. Always planned " +
					"`true`: a device stopped behind Terraform's back (`virsh nodedev-destroy`, a host rebooted while " +
					"autostart was off) shows as a change, and apply starts it again.",
			},
			"autostart": schema.BoolAttribute{
				Computed: true,
				Description: "Whether the host keeps the device's definition and starts it at boot (libvirt's " +
					"persistent definition and autostart), as the last refresh found it. Always planned `true`: found " +
					"off, apply defines it again and marks it to autostart.",
			},
			"node_device": schema.StringAttribute{
				Computed:      true,
				Description:   "libvirt's node-device name of the device, e.g. `mdev_6b6f6861_6b75_4d64_8000_000000000001_mtty` (`virsh nodedev-info` takes it).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

// ModifyPlan refuses at plan time what the host cannot create, on the line
// of the attribute at fault.
func (r *mdevResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	// what Create makes and apply restores: started and autostarted
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("active"), true)...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("autostart"), true)...)
	if !req.State.Raw.IsNull() || r.data == nil || !req.Config.Raw.IsFullyKnown() {
		return // an existing device (other changes replace it), or unknown inputs
	}
	var plan mdevModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m, ok := r.manager(plan, &resp.Diagnostics); ok {
		checkMdev(ctx, m, mdevSpec(plan), &resp.Diagnostics)
	}
}

func mdevSpec(m mdevModel) mdev.Spec {
	return mdev.Spec{Parent: mdev.ParentNodeName(m.Parent.ValueString()), Type: m.Type.ValueString(), UUID: m.UUID.ValueString()}
}

// checkMdev adds a refusal as an error on its attribute; false when there
// was an error.
func checkMdev(ctx context.Context, m mdev.Manager, s mdev.Spec, diags *diag.Diagnostics) bool {
	err := m.Check(ctx, s)
	var refusal *mdev.Refusal
	switch {
	case errors.As(err, &refusal):
		diags.AddAttributeError(path.Root(refusal.Attribute), "The host cannot create this mediated device", refusal.Msg)
	case err != nil:
		addError(diags, "Checking mediated device parent "+s.Parent, err)
	}
	return err == nil
}

func (r *mdevResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan mdevModel
	ctx, cancel, m, ok := r.open(ctx, req.Plan, &plan, &resp.Diagnostics)
	defer cancel()
	if !ok {
		return
	}
	if plan.UUID.IsUnknown() || plan.UUID.IsNull() {
		plan.UUID = types.StringValue(uuid.NewString())
	}
	s := mdevSpec(plan)
	if !checkMdev(ctx, m, s, &resp.Diagnostics) {
		return
	}
	d, err := m.Create(ctx, s)
	if err != nil {
		addError(&resp.Diagnostics, "Creating mediated device "+s.UUID+" failed", err)
		return
	}
	plan.ID = types.StringValue(hostScopedID(plan.Host.ValueString(), d.UUID))
	plan.NodeDevice = types.StringValue(d.Name)
	setMdevState(&plan, d)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// open is how Create, Update and Delete start: the model from the
// request's plan or state, the deadline of mdevTimeout, and the manager of
// the model's host; false after a diagnostic. cancel is always safe to
// defer.
func (r *mdevResource) open(ctx context.Context, from modelGetter, m *mdevModel, diags *diag.Diagnostics) (context.Context, context.CancelFunc, mdev.Manager, bool) {
	diags.Append(from.Get(ctx, m)...)
	if diags.HasError() {
		return ctx, func() {}, mdev.Manager{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, mdevTimeout)
	mgr, ok := r.manager(*m, diags)
	return ctx, cancel, mgr, ok
}

// manager is the mediated-device manager of the model's host; false (with
// the error in diags) when the host cannot be reached.
func (r *mdevResource) manager(m mdevModel, diags *diag.Diagnostics) (mdev.Manager, bool) {
	c := r.data.client(m.Host.ValueString(), diags)
	return mdev.Manager{Host: c}, c != nil
}

// setMdevState records whether d is started and will start with the host.
func setMdevState(m *mdevModel, d mdev.Device) {
	m.Active = types.BoolValue(d.Active)
	m.Autostart = types.BoolValue(d.Persistent && d.Autostart)
}

func (r *mdevResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state mdevModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m, ok := r.manager(state, &resp.Diagnostics)
	if !ok {
		return
	}
	d, err := m.Find(ctx, state.UUID.ValueString())
	if !foundOnHost(ctx, resp, "mediated device", state.UUID.ValueString(), d != nil, err) {
		return
	}
	// The parent keeps the spelling of the configuration (a PCI address)
	// while it names the same node device.
	if mdev.ParentNodeName(state.Parent.ValueString()) != d.Parent {
		state.Parent = types.StringValue(d.Parent)
	}
	state.Type = types.StringValue(d.Type)
	state.UUID = types.StringValue(d.UUID)
	state.NodeDevice = types.StringValue(d.Name)
	state.ID = types.StringValue(hostScopedID(state.Host.ValueString(), d.UUID))
	setMdevState(&state, *d)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update restores a device found stopped or no longer autostarted; every
// configurable attribute replaces the device instead.
func (r *mdevResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan mdevModel
	ctx, cancel, m, ok := r.open(ctx, req.Plan, &plan, &resp.Diagnostics)
	defer cancel()
	if !ok {
		return
	}
	var restored mdev.Device
	d, err := m.Find(ctx, plan.UUID.ValueString())
	switch {
	case err != nil:
	case d == nil:
		err = fmt.Errorf("the host no longer has it; refresh, and the next apply creates it again")
	default:
		restored, err = m.Restore(ctx, mdevSpec(plan), *d)
	}
	if err != nil {
		addError(&resp.Diagnostics, "Restoring mediated device "+plan.UUID.ValueString()+" failed", err)
		return
	}
	plan.NodeDevice = types.StringValue(restored.Name)
	setMdevState(&plan, restored)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *mdevResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state mdevModel
	ctx, cancel, m, ok := r.open(ctx, req.State, &state, &resp.Diagnostics)
	defer cancel()
	if !ok {
		return
	}
	d, err := m.Find(ctx, state.UUID.ValueString())
	if err == nil && d != nil {
		err = m.Remove(ctx, *d)
	}
	if err != nil {
		addError(&resp.Diagnostics, "Removing mediated device "+state.UUID.ValueString()+" failed", err,
			"A device a running VM passes through cannot be removed: stop or change that VM first.")
	}
}

func (r *mdevResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, id, ok := parseMdevImportID(req.ID)
	if !ok {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q: import a mediated device by its UUID, "+
			"e.g. 6b6f6861-6b75-4d64-8000-000000000001, or as <host>/<uuid> for a host of the provider's hosts map.", req.ID))
		return
	}
	importHostScoped(ctx, resp, "uuid", host, id)
}

// parseMdevImportID splits <uuid> or <host>/<uuid>, the UUID in lower case.
func parseMdevImportID(raw string) (host, id string, ok bool) {
	host, id, ok = parseNameImportID(raw)
	id = strings.ToLower(id)
	return host, id, ok && mdevUUIDRegexp.MatchString(id)
}
