package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/backup"
)

var (
	_ resource.ResourceWithConfigure   = (*backupResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*backupResource)(nil)
	_ resource.ResourceWithImportState = (*backupResource)(nil)
)

// backupPlanCheck bounds the plan-time look at the snapshot and pool. A
// backup's create and delete take as long as an image copy's.
const backupPlanCheck = 30 * time.Second

func newBackupResource() resource.Resource { return &backupResource{} }

type backupResource struct {
	configuredResource
}

func (r *backupResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_backup"
}

func (r *backupResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A backup of one disk of a `kohaku_snapshot`, kept in another pool or on another host of the " +
			"`hosts` map, where it outlives the VM, the snapshot and their host. The snapshot's copy of the disk " +
			"is streamed from its host through the machine running Terraform into `pool` on `host` " + streamedCopyDoc +
			". Only then is a small manifest volume, `<name>.kohaku-backup`, " +
			"written beside it, recording the digest and what the backup is of: a copy cut off before that (a " +
			"killed run) has no manifest and is never read or imported as a backup. An interrupted create " +
			"(Ctrl-C, a timeout) deletes its copy.\n\n" +
			"Restore it as a new data disk of a VM on the same host with `data_disks = [{ name = \"data\", " +
			"source = kohaku_backup.<name>.id }]`: the host copies it into a volume the VM owns, so the VM never " +
			"writes the backup and destroying the VM leaves it. To restore on another host, back up to that host.\n\n" +
			"After its create the backup needs neither the snapshot nor its host: a refresh reads only the target. " +
			"Destroy deletes the manifest, then the volume. Drift: a backup whose volume was deleted out of band " +
			"is made again by the next apply (while its snapshot is still there); one whose manifest alone was " +
			"deleted is no longer taken for a backup, and the next apply fails, naming the volume, until it is " +
			"deleted too. Import with the " +
			"`id`; an import reads the whole volume back and refuses one that no longer matches its manifest.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true,
				Description: "`<pool>/<name>` on the provider's default host, `<host>/<pool>/<name>` on a host of the " +
					"`hosts` map: what a VM's `data_disks[*].source` takes. Known at plan time.",
				PlanModifiers: []planmodifier.String{imageIDFromPlan()},
			},
			"host": schema.StringAttribute{
				Optional: true,
				Description: "Key of the provider's `hosts` map to keep the backup on; empty means the provider's own " +
					"connection, as for every resource (not the snapshot's host: to keep it there, set " +
					"`host = kohaku_snapshot.<name>.host`). The host needs `qemu-img` (Debian's qemu-utils), with which " +
					"libvirt makes qcow2 volumes. A change replaces the backup.",
				PlanModifiers: replace,
			},
			"pool": schema.StringAttribute{
				Required: true,
				Description: "Storage pool on `host` to keep the backup in, e.g. `backups` (a `kohaku_pool` of this " +
					"configuration, or one that exists). The plan warns when the host has no such pool now. A change " +
					"replaces the backup.",
				PlanModifiers: replace,
				Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"name": schema.StringAttribute{
				Required: true,
				Description: "Volume name of the backup, e.g. `db-data.2026-11-27.qcow2`: 1 to 200 letters, digits, " +
					"'.', '_' and '-', starting with a letter or digit. Its manifest is `<name>.kohaku-backup`. A " +
					"volume of either name that exists already is never overwritten: the create fails instead. A " +
					"change replaces the backup.",
				PlanModifiers: replace,
				Validators: []validator.String{checkedString{summary: "Invalid backup name", check: backup.CheckName,
					desc: "1 to 200 letters, digits, '.', '_' and '-', starting with a letter or digit, not ending in `.kohaku-backup`"}},
			},
			"snapshot": schema.StringAttribute{
				Required: true,
				Description: "The `id` of the `kohaku_snapshot` to back up a disk of, e.g. `kohaku_snapshot.nightly.id`. " +
					"Read at create only. A change (another snapshot, or the snapshot taken again) replaces the backup.",
				PlanModifiers: replace,
				Validators:    []validator.String{snapshotIDValidator},
			},
			"disk": schema.StringAttribute{
				Required: true,
				Description: "Which disk of the snapshot to back up, as the snapshot's `disks[*].disk` names it: a data " +
					"disk's serial (its `name` unless `serial` is set), or `boot`. A name the snapshot's VM does not " +
					"have is refused at plan time when the snapshot exists, naming the disks it has. A change replaces " +
					"the backup.",
				PlanModifiers: replace,
				Validators: []validator.String{checkedString{summary: "Invalid disk", check: backup.CheckDisk,
					desc: "`boot` or a data disk's serial: 1 to 20 letters, digits, '.', '_' and '-'"}},
			},
			"sha256": fixedString("`sha256:<hex>` of the backup volume's bytes, as read from the snapshot and read back from " +
				"the copy: equal to the snapshot's `disks[*].sha256` for the disk, and recorded in the manifest."),
			"size_bytes":     fixedInt64("How many bytes the backup volume holds (its qcow2 file)."),
			"capacity_bytes": fixedInt64("The disk's virtual size: what a disk restored from the backup has."),
			"volume_path":    fixedString("Path of the backup volume on its host."),
			"vm_uuid":        fixedString("UUID of the VM the snapshot was taken of."),
			"vm_name":        fixedString("Name of that VM when the backup was made."),
			"source_volume":  fixedString("`<pool>/<volume>` of the snapshot's copy of the disk that was backed up, on the snapshot's host."),
			"created_at":     fixedString("When the backup was made (RFC 3339, UTC), as its manifest records it."),
		},
		Blocks: imageTimeoutsBlocks(ctx, "How long copying the snapshot's disk and reading the copy back may take. Default `60m`."),
	}
}

// ModifyPlan refuses, at plan time, a disk the snapshot does not have
// (when the snapshot exists already), and warns of a pool the target host
// does not have now (a kohaku_pool of the same configuration may make it).
func (r *backupResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var plan backupModel
	if !r.data.createPlan(ctx, req, &plan, &resp.Diagnostics) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, backupPlanCheck)
	defer cancel()
	if !plan.Snapshot.IsUnknown() && !plan.Disk.IsUnknown() {
		if host, uuid, name, err := parseSnapshotID(plan.Snapshot.ValueString()); err == nil {
			if src, err := r.data.fleet.Host(host); err == nil {
				_, _, err := backup.Locate(ctx, src, uuid, name, plan.Disk.ValueString())
				switch {
				case errors.Is(err, backup.ErrUnknownDisk):
					resp.Diagnostics.AddAttributeError(path.Root("disk"), "Snapshot has no such disk", sentence(err))
				case errors.Is(err, backup.ErrNoSnapshot):
					resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Snapshot is not on its host", sentence(err)+
						" Take the snapshot again (terraform apply -replace on the kohaku_snapshot).")
				}
			}
		}
	}
	if plan.Host.IsUnknown() || plan.Pool.IsUnknown() {
		return
	}
	dst, err := r.data.fleet.Host(plan.Host.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("host"), "Unknown host", err.Error())
		return
	}
	pools, err := dst.ActivePoolNames(ctx)
	if err == nil && !slices.Contains(pools, plan.Pool.ValueString()) {
		resp.Diagnostics.AddAttributeWarning(path.Root("pool"), "Storage pool not found",
			fmt.Sprintf("%s has no active storage pool %q now; its pools are %s. Unless a kohaku_pool of this "+
				"configuration makes it before the backup, the apply will fail.", dst.Endpoint().Redacted(),
				plan.Pool.ValueString(), strings.Join(pools, ", ")))
	}
}

func (r *backupResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan backupModel
	ctx, cancel, dst := r.data.openCreate(ctx, req, &plan, &plan.Host, &plan.Timeouts, imageCopyCreateTimeout, &resp.Diagnostics)
	defer cancel()
	if dst == nil {
		return
	}
	srcHost, uuid, snap, err := parseSnapshotID(plan.Snapshot.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Invalid snapshot id", err.Error())
		return
	}
	src := r.data.client(srcHost, &resp.Diagnostics)
	if src == nil {
		return
	}
	pool, name := plan.Pool.ValueString(), plan.Name.ValueString()
	where := imageID(plan.Host.ValueString(), pool, name)
	b, err := backup.Make(ctx, src, dst, backup.Request{
		VM: uuid, Snapshot: snap, Disk: plan.Disk.ValueString(), SourceHost: srcHost, Pool: pool, Name: name,
		Progress: func(line string) { tflog.Info(ctx, "backup: "+line, map[string]any{"backup": where}) },
	})
	switch {
	case errors.Is(err, backup.ErrUnknownDisk):
		resp.Diagnostics.AddAttributeError(path.Root("disk"), "Snapshot has no such disk", sentence(err)+" Nothing was copied.")
		return
	case errors.Is(err, backup.ErrNoSnapshot):
		resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Snapshot is not on its host", sentence(err)+" Nothing was copied.")
		return
	case err != nil:
		addError(&resp.Diagnostics, fmt.Sprintf("Backing up disk %s of snapshot %s to %s", plan.Disk.ValueString(), plan.Snapshot.ValueString(), where), err)
		return
	}
	plan.ID = types.StringValue(where)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	setAttributes(ctx, resp.State.SetAttribute, backupComputed(b), &resp.Diagnostics)
}

// backupModel is a kohaku_backup in Terraform's plan and state.
type backupModel struct {
	ID            types.String   `tfsdk:"id"`
	Host          types.String   `tfsdk:"host"`
	Pool          types.String   `tfsdk:"pool"`
	Name          types.String   `tfsdk:"name"`
	Snapshot      types.String   `tfsdk:"snapshot"`
	Disk          types.String   `tfsdk:"disk"`
	SHA256        types.String   `tfsdk:"sha256"`
	SizeBytes     types.Int64    `tfsdk:"size_bytes"`
	CapacityBytes types.Int64    `tfsdk:"capacity_bytes"`
	VolumePath    types.String   `tfsdk:"volume_path"`
	VMUUID        types.String   `tfsdk:"vm_uuid"`
	VMName        types.String   `tfsdk:"vm_name"`
	SourceVolume  types.String   `tfsdk:"source_volume"`
	CreatedAt     types.String   `tfsdk:"created_at"`
	Timeouts      timeouts.Value `tfsdk:"timeouts"`
}

// backupComputed is what a backup's manifest and volume give its state.
func backupComputed(b *backup.Backup) map[string]attr.Value {
	return map[string]attr.Value{
		"sha256": types.StringValue(b.SHA256), "size_bytes": types.Int64Value(b.Bytes),
		"capacity_bytes": types.Int64Value(b.CapacityBytes), "volume_path": types.StringValue(b.Path),
		"vm_uuid": types.StringValue(b.VMUUID), "vm_name": types.StringValue(b.VMName),
		"source_volume": types.StringValue(b.From), "created_at": types.StringValue(b.Created),
	}
}

// backupImported is the state of the backup b on host as an import reads
// it: every attribute but the timeouts, the snapshot and disk as its
// manifest records them.
func backupImported(host string, b *backup.Backup) map[string]attr.Value {
	v := backupComputed(b)
	v["host"] = types.StringNull()
	if host != "" {
		v["host"] = types.StringValue(host)
	}
	v["id"], v["pool"], v["name"] = types.StringValue(imageID(host, b.Pool, b.Volume)), types.StringValue(b.Pool), types.StringValue(b.Volume)
	v["snapshot"], v["disk"] = types.StringValue(snapshotID(b.FromHost, b.VMUUID, b.Snapshot)), types.StringValue(b.Disk)
	return v
}

// setAttributes sets each of values with set (a state's or a list
// result's SetAttribute).
func setAttributes(ctx context.Context, set func(context.Context, path.Path, any) diag.Diagnostics, values map[string]attr.Value, diags *diag.Diagnostics) {
	for name, v := range values {
		diags.Append(set(ctx, path.Root(name), v)...)
	}
}

func (r *backupResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state backupModel
	c := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	b, err := backup.Open(ctx, c, state.Pool.ValueString(), state.Name.ValueString())
	if errors.Is(err, backup.ErrGone) || errors.Is(err, backup.ErrNotBackup) {
		tflog.Info(ctx, "backup is gone or lost its manifest; removing it from state so the next apply makes it again",
			map[string]any{"id": state.ID.ValueString(), "why": err.Error()})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, "Reading backup "+state.ID.ValueString(), err)
		return
	}
	setAttributes(ctx, resp.State.SetAttribute, backupComputed(b), &resp.Diagnostics)
}

// Update changes only the timeouts; everything else replaces.
func (r *backupResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	updateTimeouts(ctx, req, resp)
}

func (r *backupResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state backupModel
	ctx, cancel, c := r.data.openDelete(ctx, req, &state, &state.Host, &state.Timeouts, imageDeleteTimeout, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	if err := backup.Delete(ctx, c, state.Pool.ValueString(), state.Name.ValueString()); err != nil {
		addError(&resp.Diagnostics, "Deleting backup "+state.ID.ValueString(), err)
	}
}

// ImportState takes `<pool>/<name>` or `<host>/<pool>/<name>`, reads the
// manifest and the whole volume back, and refuses a volume that is no
// backup or no longer matches its manifest.
func (r *backupResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, pool, name, ok := splitVolumeID(req.ID)
	if !ok {
		resp.Diagnostics.AddError("Invalid import id", fmt.Sprintf("%q is not a backup id: want `<pool>/<name>`, or "+
			"`<host>/<pool>/<name>` on a host of the provider's hosts map, e.g. backups/db-data.backup.qcow2 (a kohaku_backup's id)", req.ID))
		return
	}
	c := r.data.client(host, &resp.Diagnostics)
	if c == nil {
		return
	}
	b, err := backup.Open(ctx, c, pool, name)
	if err == nil {
		err = backup.Verify(ctx, c, b)
	}
	if err != nil {
		addError(&resp.Diagnostics, "Importing backup "+req.ID, err)
		return
	}
	setAttributes(ctx, resp.State.SetAttribute, backupImported(host, b), &resp.Diagnostics)
}
