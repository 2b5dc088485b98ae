package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
)

var (
	_ resource.ResourceWithConfigure   = (*snapshotResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*snapshotResource)(nil)
	_ resource.ResourceWithImportState = (*snapshotResource)(nil)
)

const (
	snapshotCreateTimeout = 30 * time.Minute
	snapshotDeleteTimeout = 5 * time.Minute
	// snapshotPlanCheck bounds the plan-time look at the VM's disks.
	snapshotPlanCheck = 30 * time.Second
)

// snapshotNameRE is the name's rule at plan time; snapshot.CheckName is
// the same rule, for the packages below.
var snapshotNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func newSnapshotResource() resource.Resource { return &snapshotResource{} }

type snapshotResource struct {
	data *providerData
}

type snapshotModel struct {
	ID          types.String   `tfsdk:"id"`
	Host        types.String   `tfsdk:"host"`
	VM          types.String   `tfsdk:"vm"`
	Name        types.String   `tfsdk:"name"`
	VMUUID      types.String   `tfsdk:"vm_uuid"`
	Disks       types.List     `tfsdk:"disks"`
	Consistency types.String   `tfsdk:"consistency"`
	CreatedAt   types.String   `tfsdk:"created_at"`
	Timeouts    timeouts.Value `tfsdk:"timeouts"`
}

type snapshotDiskModel struct {
	Disk           types.String `tfsdk:"disk"`
	Pool           types.String `tfsdk:"pool"`
	Volume         types.String `tfsdk:"volume"`
	SnapshotVolume types.String `tfsdk:"snapshot_volume"`
	SHA256         types.String `tfsdk:"sha256"`
}

var snapshotDiskType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"disk": types.StringType, "pool": types.StringType, "volume": types.StringType,
	"snapshot_volume": types.StringType, "sha256": types.StringType,
}}

// snapshotID is a snapshot's id: `<vm uuid>/<name>`, with `<host>/` first
// on a host of the hosts map.
func snapshotID(host, uuid, name string) string {
	if host == "" {
		return uuid + "/" + name
	}
	return host + "/" + uuid + "/" + name
}

// parseSnapshotID splits a snapshot's id, saying what is wrong with one
// that is not of the form.
func parseSnapshotID(id string) (host, uuid, name string, err error) {
	parts := strings.Split(id, "/")
	switch len(parts) {
	case 2:
		uuid, name = parts[0], parts[1]
	case 3:
		host, uuid, name = parts[0], parts[1], parts[2]
	}
	if uuid == "" || !uuidRE.MatchString(uuid) || !snapshotNameRE.MatchString(name) {
		return "", "", "", fmt.Errorf("%q is not a snapshot id: want `<vm uuid>/<name>`, or `<host>/<vm uuid>/<name>` on a "+
			"host of the provider's hosts map, e.g. 5a1d9c4e-3f00-4b2a-9c1e-0d2f6b7a8e91/before-upgrade (a kohaku_snapshot's id)", id)
	}
	return host, strings.ToLower(uuid), name, nil
}

func (r *snapshotResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_snapshot"
}

func (r *snapshotResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *snapshotResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A snapshot of a VM's disks, kept on its host: a standalone qcow2 copy of each disk the VM " +
			"owns (its boot overlay, base image merged in, and the data disks Kohaku made for it with `size_gib` " +
			"and `keep = false`), named `<disk volume>.snap-<name>` in the disk's own pool. `kohaku_vm_revert` " +
			"returns the VM's disks to it.\n\n" +
			"A shut-off VM's disks are copied as they are (`consistency = \"powered_off\"`). A running VM keeps " +
			"running: libvirt's backup job copies every disk as it was at one moment, with the guest's file systems " +
			"frozen through the QEMU guest agent (`guest-fsfreeze`) just before that moment and thawed right after " +
			"(`quiesced`); a VM without the guest agent channel, or whose agent does not answer, is copied without " +
			"the freeze (`crash_consistent`, with a warning). A host whose libvirt cannot back up a running VM " +
			"fails the create, saying to snapshot the VM shut off. A VM with a disk Kohaku did not make (an " +
			"existing `disk.volume`, a data disk given by `volume` or kept, a file given by path, a disk added by " +
			"hand) or a raw disk is refused, at plan time when the VM exists already, naming each such disk.\n\n" +
			"The snapshot is taken once: later changes to the VM, which Kohaku makes in place, leave it as it " +
			"is, and `terraform apply -replace` takes it again. Destroy deletes its volumes. A snapshot and its " +
			"VM are independent: destroying the VM destroys its snapshots first when they reference it (as " +
			"`vm = kohaku_vm.<name>.id` does), and never fails because snapshots exist. Drift: a snapshot " +
			"whose volumes were deleted out of band is taken again by the next apply. Import with the `id`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true,
				Description: "`<vm uuid>/<name>` on the provider's default host, `<host>/<vm uuid>/<name>` on a host " +
					"of the `hosts` map: what `kohaku_vm_revert`'s `snapshot` takes.",
				PlanModifiers: keep,
			},
			"host": schema.StringAttribute{
				Optional:      true,
				Description:   "Key of the provider's `hosts` map the VM is on; empty means the default connection. A change replaces the snapshot.",
				PlanModifiers: replace,
			},
			"vm": schema.StringAttribute{
				Required: true,
				Description: "The VM to snapshot: a `kohaku_vm`'s `id` (its UUID), or a domain's name or UUID on `host`. " +
					"A change replaces the snapshot (takes a new one of that VM).",
				PlanModifiers: replace,
				Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"name": schema.StringAttribute{
				Required: true,
				Description: "Name of the snapshot, unique among the VM's snapshots, e.g. `before-upgrade`: 1 to 63 " +
					"letters, digits, '.', '_' and '-', starting with a letter or digit; it becomes part of the " +
					"copies' volume names. A volume of such a name that exists already is never overwritten: the " +
					"create fails instead. A change replaces the snapshot.",
				PlanModifiers: replace,
				Validators: []validator.String{stringvalidator.RegexMatches(snapshotNameRE,
					"must be 1 to 63 letters, digits, '.', '_' and '-', starting with a letter or digit, e.g. `before-upgrade`")},
			},
			"vm_uuid": fixedString("UUID of the VM the snapshot was taken of. `kohaku_vm_revert` refuses to revert any other VM to it."),
			"disks": schema.ListNestedAttribute{
				Computed: true, PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown()},
				Description: "The disks copied, boot disk first.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"disk":            schema.StringAttribute{Computed: true, Description: "`boot`, or the data disk's serial."},
					"pool":            schema.StringAttribute{Computed: true, Description: "Pool of the disk and of its copy."},
					"volume":          schema.StringAttribute{Computed: true, Description: "The disk's volume."},
					"snapshot_volume": schema.StringAttribute{Computed: true, Description: "The copy's volume, `<volume>.snap-<name>`."},
					"sha256":          schema.StringAttribute{Computed: true, Description: "`sha256:<hex>` of the copy's bytes, read back from the host after the copy."},
				}},
			},
			"consistency": fixedString("How consistent the copies are with one another and with the guest's file systems: " +
				"`powered_off`, the VM was shut off while they were made, so they hold what the guest wrote " +
				"before it powered off; `quiesced`, the VM ran and its file systems were frozen through the guest " +
				"agent at the moment copied, so what the guest had written was flushed; `crash_consistent`, the VM " +
				"ran without a freeze, so the disks are as after a power cut at that moment (journaling file " +
				"systems recover; what the guest had not written out is missing). Null for an imported snapshot."),
			"created_at": fixedString("When the snapshot was taken (RFC 3339, UTC); null for an imported snapshot."),
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{
				Create: true, Delete: true,
				CreateDescription: "How long copying the disks and reading them back may take. Default `30m`.",
				DeleteDescription: "How long deleting the copies may take. Default `5m`.",
			}),
		},
	}
}

// ModifyPlan refuses, at plan time, a snapshot of a VM that exists and is
// running or has a disk Kohaku cannot snapshot. A VM not made yet is
// checked at apply.
func (r *snapshotResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var plan snapshotModel
	if !r.data.createPlan(ctx, req, &plan, &resp.Diagnostics) || plan.VM.IsUnknown() || plan.Host.IsUnknown() {
		return
	}
	c, err := r.data.fleet.Host(plan.Host.ValueString())
	if err != nil {
		return // the create says so
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotPlanCheck)
	defer cancel()
	t, err := snapshot.Find(ctx, c, plan.VM.ValueString())
	switch {
	case errors.Is(err, snapshot.ErrNotSnapshottable):
		resp.Diagnostics.AddAttributeError(path.Root("vm"), "VM cannot be snapshotted", sentence(err))
	case err == nil && t.Running() && !t.Agent:
		resp.Diagnostics.AddAttributeWarning(path.Root("vm"), "Snapshot will be crash-consistent", fmt.Sprintf("%s is "+
			"%s and has no guest agent channel, so its file systems cannot be frozen for the snapshot: it will be "+
			"crash-consistent, as after a power cut (what the guest had not written out is missing). Give the VM "+
			"the guest agent (guest_agent and qemu-guest-agent in the guest), or snapshot it shut off.", t.VM.Name, t.State))
	}
}

func (r *snapshotResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan snapshotModel
	ctx, cancel, c := r.data.openCreate(ctx, req, &plan, &plan.Host, &plan.Timeouts, snapshotCreateTimeout, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	vm, name := plan.VM.ValueString(), plan.Name.ValueString()
	s, err := snapshot.Take(ctx, c, snapshot.TakeRequest{
		VM: vm, Name: name,
		Progress: func(line string) { tflog.Info(ctx, "snapshot: "+line, map[string]any{"vm": vm, "snapshot": name}) },
	})
	if errors.Is(err, snapshot.ErrNotSnapshottable) {
		resp.Diagnostics.AddAttributeError(path.Root("vm"), "VM cannot be snapshotted", sentence(err)+" Nothing was changed.")
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Taking snapshot %q of VM %s", name, vm), err)
		return
	}
	for _, w := range s.Warnings {
		resp.Diagnostics.AddAttributeWarning(path.Root("vm"), "Snapshot "+name+" of "+s.VM.Name+" is crash-consistent", w)
	}
	plan.CreatedAt = types.StringValue(time.Now().UTC().Format(time.RFC3339))
	plan.set(s)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// set records a snapshot as made or read.
func (m *snapshotModel) set(s *snapshot.Snapshot) {
	m.ID = types.StringValue(snapshotID(m.Host.ValueString(), s.VM.UUID, s.Name))
	m.VMUUID = types.StringValue(s.VM.UUID)
	m.Consistency = types.StringValue(s.Consistency)
	if s.Consistency == "" {
		m.Consistency = types.StringNull() // imported: the host does not say
	}
	var disks []attr.Value
	for _, c := range s.Copies {
		disks = append(disks, types.ObjectValueMust(snapshotDiskType.AttrTypes, map[string]attr.Value{
			"disk": types.StringValue(c.Disk.Disk), "pool": types.StringValue(c.Pool), "volume": types.StringValue(c.Volume),
			"snapshot_volume": types.StringValue(c.Snapshot), "sha256": types.StringValue(c.Digest.String()),
		}))
	}
	m.Disks = types.ListValueMust(snapshotDiskType, disks)
}

// copies is what the state records of the snapshot's volumes.
func (m *snapshotModel) copies(ctx context.Context) ([]snapshot.Copy, error) {
	var disks []snapshotDiskModel
	if d := m.Disks.ElementsAs(ctx, &disks, false); d.HasError() {
		return nil, errors.New("reading the snapshot's disks from its state")
	}
	out := make([]snapshot.Copy, 0, len(disks))
	for _, d := range disks {
		out = append(out, snapshot.Copy{
			Disk:     snapshot.Disk{Disk: d.Disk.ValueString(), Pool: d.Pool.ValueString(), Volume: d.Volume.ValueString()},
			Snapshot: d.SnapshotVolume.ValueString(),
		})
	}
	return out, nil
}

func (r *snapshotResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state snapshotModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	copies, err := state.copies(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Reading snapshot "+state.ID.ValueString(), err.Error())
		return
	}
	gone, err := snapshot.Missing(ctx, c, copies)
	if err != nil {
		addError(&resp.Diagnostics, "Reading snapshot "+state.ID.ValueString(), err)
		return
	}
	if len(gone) > 0 {
		var names []string
		for _, g := range gone {
			names = append(names, g.Pool+"/"+g.Snapshot)
		}
		tflog.Info(ctx, "snapshot volumes are gone; removing the snapshot from state so the next apply takes it again",
			map[string]any{"id": state.ID.ValueString(), "gone": names})
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update changes only the timeouts; everything else replaces.
func (r *snapshotResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	updateTimeouts(ctx, req, resp)
}

func (r *snapshotResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state snapshotModel
	ctx, cancel, c := r.data.openDelete(ctx, req, &state, &state.Host, &state.Timeouts, snapshotDeleteTimeout, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	copies, err := state.copies(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Deleting snapshot "+state.ID.ValueString(), err.Error())
		return
	}
	if err := snapshot.Delete(ctx, c, copies); err != nil {
		addError(&resp.Diagnostics, "Deleting snapshot "+state.ID.ValueString(), err)
	}
}

// ImportState takes the id and reads the snapshot's copies of the VM's
// disks back from the host.
func (r *snapshotResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, uuid, name, err := parseSnapshotID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import id", err.Error())
		return
	}
	c := r.data.client(host, &resp.Diagnostics)
	if c == nil {
		return
	}
	s, err := snapshot.Open(ctx, c, uuid, name)
	if err != nil {
		addError(&resp.Diagnostics, "Importing snapshot "+req.ID, err)
		return
	}
	m := snapshotModel{Host: types.StringNull(), Name: types.StringValue(name)}
	if host != "" {
		m.Host = types.StringValue(host)
	}
	m.set(s)
	for attr, v := range map[string]any{
		"id": m.ID, "host": m.Host, "vm": types.StringValue(uuid), "name": m.Name, "vm_uuid": m.VMUUID,
		"disks": m.Disks, "consistency": m.Consistency, "created_at": types.StringNull(),
	} {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(attr), v)...)
	}
}
