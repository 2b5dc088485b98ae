package provider

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

type vmDataDiskModel struct {
	Name    types.String `tfsdk:"name"`
	SizeGiB types.Int64  `tfsdk:"size_gib"`
	Volume  types.String `tfsdk:"volume"`
	Pool    types.String `tfsdk:"pool"`
	Format  types.String `tfsdk:"format"`
	Keep    types.Bool   `tfsdk:"keep"`
	Serial  types.String `tfsdk:"serial"`
	Source  types.String `tfsdk:"source"`
}

var vmDataDiskAttrTypes = map[string]attr.Type{
	"name": types.StringType, "size_gib": types.Int64Type, "volume": types.StringType, "pool": types.StringType,
	"format": types.StringType, "keep": types.BoolType, "serial": types.StringType, "source": types.StringType,
}

func dataDisksSchema() schema.Attribute {
	return schema.ListNestedAttribute{
		Optional: true,
		Description: "Disks besides the boot disk, each attached as a virtio disk whose `serial` names it in the " +
			"guest as `/dev/disk/by-id/virtio-<serial>`, the same on every boot (the `vdb`, `vdc`, ... names " +
			"follow the order disks were attached in and are not stable). Each is either a new volume " +
			"(`size_gib`, in `pool`, named `<vm name>-<name>.<format>`), which Kohaku creates empty and " +
			"deletes with the VM unless `keep` is true, a new volume restored from a backup (`source`), " +
			"likewise the VM's, or an existing `volume` in `pool`, which Kohaku attaches and never deletes. Disks are added and removed in place, with the same UUID: on a " +
			"running VM they are hot-plugged and unplugged (the guest sees the disk come and go, nothing " +
			"restarts; unmount a disk in the guest before removing it), on a stopped VM the domain is " +
			"redefined and the guest sees them at its next start. Removing a new, not kept, disk from the " +
			"list deletes its volume (the plan warns). A disk is matched by `serial`: changing anything of " +
			"an entry but `keep` is refused at plan; remove it and add it under another name instead. Disks " +
			"Kohaku did not attach (given by hand or another tool) are left as they are.",
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				Required: true,
				Description: "Name of the disk within the VM, unique among its data disks: the default `serial`, and part of " +
					"the new volume's name. Letters, digits, '.', '_' and '-', at most 20 characters.",
				Validators: []validator.String{stringvalidator.LengthBetween(1, domain.MaxSerialLen)},
			},
			"size_gib": schema.Int64Attribute{
				Optional:    true,
				Description: "Size in GiB of a new, empty volume. Exactly one of `size_gib`, `volume` and `source` is set.",
				Validators:  []validator.Int64{int64validator.AtLeast(1)},
			},
			"volume": schema.StringAttribute{
				Optional: true,
				Description: "Name of an existing volume in `pool` to attach as it is; Kohaku never deletes it. " +
					"Exactly one of `size_gib`, `volume` and `source` is set.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"pool": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Default:     stringdefault.StaticString(vmDefaultPool),
				Description: "Storage pool of the new volume, or that holds `volume`. Default `default`.",
				Validators:  []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"format": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Default:     stringdefault.StaticString(string(domain.DiskQCOW2)),
				Description: "`qcow2` (default) or `raw`: the new volume's format, or the format of the existing `volume`.",
				Validators:  []validator.String{stringvalidator.OneOf(string(domain.DiskQCOW2), string(domain.DiskRaw))},
			},
			"keep": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				Description: "Keep the new volume when the disk is removed or the VM destroyed (default false: " +
					"it is deleted with them). Only with `size_gib` or `source`; an existing `volume` is always kept.",
			},
			"source": schema.StringAttribute{
				Optional: true,
				Description: "A backup to restore into a new volume: the `id` of a `kohaku_backup` on the VM's host, " +
					"e.g. `kohaku_backup.db.id` (`<pool>/<volume>`, or `<host>/<pool>/<volume>` on a host of the " +
					"`hosts` map). The host copies it into a new qcow2 volume in `pool`, named " +
					"`<vm name>-<name>.qcow2`, of the backup's virtual size: a volume of the VM's, deleted with it " +
					"unless `keep` is true, while the backup itself is only read, never attached, written or " +
					"deleted. A backup on another host is refused at plan; back up to the VM's host instead. " +
					"Exactly one of `size_gib`, `volume` and `source` is set; `format` is `qcow2`.",
				Validators: []validator.String{volumeOrHostVolumeID{}},
			},
			"serial": schema.StringAttribute{
				Optional: true,
				Description: "Serial the guest sees, as `/dev/disk/by-id/virtio-<serial>`. Default: `name`. " +
					"Letters, digits, '.', '_' and '-', at most 20 characters.",
			},
		}},
	}
}

func (m *vmModel) dataDisks(ctx context.Context, diags *diag.Diagnostics) []vmDataDiskModel {
	if m.DataDisks.IsNull() || m.DataDisks.IsUnknown() {
		return nil
	}
	var out []vmDataDiskModel
	diags.Append(m.DataDisks.ElementsAs(ctx, &out, false)...)
	return out
}

// serial is the disk's serial: its own, or its name.
func (d *vmDataDiskModel) serial() types.String {
	if d.Serial.IsNull() {
		return d.Name
	}
	return d.Serial
}

// dataVolumeName is the name of the volume a new data disk gets.
func dataVolumeName(vm, disk, format string) string {
	if format == "" {
		format = string(domain.DiskQCOW2)
	}
	return vm + "-" + disk + "." + format
}

// dataDiskSpecs maps the data_disks entries onto the domain's data disks
// and the volumes to make, recording values not known yet.
func (m *vmModel) dataDiskSpecs(ctx context.Context, in *specInput, diags *diag.Diagnostics) []vmlife.NewDisk {
	if m.DataDisks.IsUnknown() {
		in.unknownAt("data_disks")
		return nil
	}
	var made []vmlife.NewDisk
	for i, d := range m.dataDisks(ctx, diags) {
		p := fmt.Sprintf("data_disks[%d]", i)
		if d.Name.IsUnknown() || d.Volume.IsUnknown() || d.Pool.IsUnknown() || d.Format.IsUnknown() || d.serial().IsUnknown() || d.SizeGiB.IsUnknown() || d.Source.IsUnknown() {
			in.unknownAt(p)
		}
		format := domain.DiskFormat(d.Format.ValueString())
		pool := d.Pool.ValueString()
		if d.Pool.IsNull() {
			pool = vmDefaultPool
		}
		dd := domain.DataDisk{Source: domain.Source{Pool: pool}, Format: format, Serial: d.serial().ValueString()}
		if !d.Volume.IsNull() {
			dd.Volume = d.Volume.ValueString()
		} else {
			dd.Volume = dataVolumeName(in.Spec.Name, d.Name.ValueString(), string(format))
			nd := vmlife.NewDisk{Serial: dd.Serial, Volume: domain.VolumeRef{Pool: pool, Volume: dd.Volume},
				Format: domain.DiskFormat(cmpOr(string(format), string(domain.DiskQCOW2))), SizeBytes: d.SizeGiB.ValueInt64() << 30, Keep: d.Keep.ValueBool()}
			if _, srcPool, srcName, ok := splitVolumeID(d.Source.ValueString()); ok && !d.Source.IsNull() {
				nd.From = &domain.VolumeRef{Pool: srcPool, Volume: srcName}
			}
			made = append(made, nd)
		}
		in.Spec.DataDisks = append(in.Spec.DataDisks, dd)
	}
	return made
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// validateDataDisks checks what the schema cannot: exactly one of
// size_gib, volume and source, keep only with a new volume, a backup
// restored as qcow2 from the VM's own host (vmHost), unique names.
func validateDataDisks(disks []vmDataDiskModel, vmHost types.String, diags *diag.Diagnostics) {
	seen := map[string]bool{}
	for i, d := range disks {
		at := path.Root("data_disks").AtListIndex(i)
		if !d.SizeGiB.IsUnknown() && !d.Volume.IsUnknown() && !d.Source.IsUnknown() &&
			btoi(!d.SizeGiB.IsNull())+btoi(!d.Volume.IsNull())+btoi(!d.Source.IsNull()) != 1 {
			diags.AddAttributeError(at, "Data disk needs one of size_gib, volume and source",
				"Each data disk is either a new, empty volume (size_gib = 100), a new volume restored from a backup "+
					"(source = kohaku_backup.db.id) or an existing one (volume = \"dataset.qcow2\"): set exactly one of them.")
		}
		if !d.Volume.IsNull() && !d.Keep.IsNull() && !d.Keep.IsUnknown() {
			diags.AddAttributeError(at.AtName("keep"), "keep applies to new volumes",
				"An existing volume is never deleted by Kohaku; keep only applies to a new volume (size_gib or source). Remove keep.")
		}
		if !d.Source.IsNull() && !d.Source.IsUnknown() {
			validateRestoreSource(d, at, vmHost, diags)
		}
		if n := d.Name.ValueString(); !d.Name.IsUnknown() {
			if seen[n] {
				diags.AddAttributeError(at.AtName("name"), "Duplicate data disk name", fmt.Sprintf("Another data disk is named %q: names must be unique within the VM.", n))
			}
			seen[n] = true
		}
	}
}

// dataDisksFromDomain maps the domain's data disks back onto data_disks:
// the prior entries (plan or state) whose serial the domain has, as they
// are, then the disks Kohaku recorded attaching that no prior entry names.
// Disks Kohaku did not attach are not listed.
func dataDisksFromDomain(ctx context.Context, st *domainView, prior *vmModel, diags *diag.Diagnostics) types.List {
	o := st.Observed
	var recorded []string
	if o.Metadata != nil {
		recorded = o.Metadata.DataDisks
	}
	have := func(serial string) bool {
		return slices.ContainsFunc(o.Spec.DataDisks, func(d domain.DataDisk) bool { return d.Serial == serial })
	}
	var elems []attr.Value
	named := map[string]bool{}
	for _, d := range prior.dataDisks(ctx, diags) {
		s := d.serial().ValueString()
		named[s] = true
		if !have(s) {
			continue
		}
		v, dd := types.ObjectValueFrom(ctx, vmDataDiskAttrTypes, d)
		diags.Append(dd...)
		elems = append(elems, v)
	}
	for _, d := range o.Spec.DataDisks {
		if named[d.Serial] || !slices.Contains(recorded, d.Serial) {
			continue
		}
		v, dd := types.ObjectValueFrom(ctx, vmDataDiskAttrTypes, vmDataDiskModel{
			Name: types.StringValue(d.Serial), SizeGiB: types.Int64Null(), Volume: types.StringValue(d.Volume),
			Pool: types.StringValue(d.Pool), Format: types.StringValue(string(cmpOrFormat(d.Format))), Keep: types.BoolValue(false),
			Serial: types.StringNull(), Source: types.StringNull(),
		})
		diags.Append(dd...)
		elems = append(elems, v)
	}
	return listOrPrior(elems, vmDataDiskAttrTypes, prior.DataDisks, diags)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// validateRestoreSource refuses a data disk restored from a backup on
// another host than the VM's, or as anything but qcow2 (the host's copy
// is qcow2).
func validateRestoreSource(d vmDataDiskModel, at path.Path, vmHost types.String, diags *diag.Diagnostics) {
	host, _, _, ok := splitVolumeID(d.Source.ValueString())
	if ok && !vmHost.IsUnknown() && host != vmHost.ValueString() {
		diags.AddAttributeError(at.AtName("source"), "Backup on another host",
			fmt.Sprintf("The backup %s is on %s, and the VM on %s: a disk is restored by its own host, from a volume "+
				"there. Back the snapshot up to the VM's host (kohaku_backup's host) and restore that backup.",
				d.Source.ValueString(), hostLabel(host), hostLabel(vmHost.ValueString())))
	}
	if !d.Format.IsNull() && !d.Format.IsUnknown() && d.Format.ValueString() != string(domain.DiskQCOW2) {
		diags.AddAttributeError(at.AtName("format"), "A restored disk is qcow2",
			"A data disk restored from a backup (source) is a qcow2 copy of it: remove format, or set it to \"qcow2\".")
	}
}

func cmpOrFormat(f domain.DiskFormat) domain.DiskFormat {
	if f == "" {
		return domain.DiskQCOW2
	}
	return f
}

// planDataDisks refuses in-place changes of a data disk other than keep,
// and warns when the plan deletes a data disk's volume: a new, not kept,
// disk removed from the list.
func planDataDisks(ctx context.Context, plan, state *vmModel, diags *diag.Diagnostics) {
	if plan.DataDisks.IsUnknown() {
		return
	}
	planned := map[string]vmDataDiskModel{}
	for _, d := range plan.dataDisks(ctx, diags) {
		planned[d.Name.ValueString()] = d
	}
	for i, s := range state.dataDisks(ctx, diags) {
		p, ok := planned[s.Name.ValueString()]
		if !ok {
			if s.Volume.IsNull() && !s.Keep.ValueBool() {
				diags.AddAttributeWarning(path.Root("data_disks").AtListIndex(i), "Data disk volume will be deleted",
					fmt.Sprintf("The data disk %q is removed from VM %s, and its volume %s/%s, which Kohaku created, is "+
						"deleted with everything on it. To keep the volume, set keep = true on the disk and apply "+
						"before removing it.", s.Name.ValueString(), state.Name.ValueString(), s.Pool.ValueString(),
						dataVolumeName(state.Name.ValueString(), s.Name.ValueString(), s.Format.ValueString())))
			}
			continue
		}
		if p.SizeGiB.IsUnknown() || p.Volume.IsUnknown() || p.Pool.IsUnknown() || p.Format.IsUnknown() || p.serial().IsUnknown() || p.Source.IsUnknown() {
			continue
		}
		if !p.SizeGiB.Equal(s.SizeGiB) || !p.Volume.Equal(s.Volume) || !p.Pool.Equal(s.Pool) || !p.Format.Equal(s.Format) || !p.serial().Equal(s.serial()) || !p.Source.Equal(s.Source) {
			diags.AddAttributeError(path.Root("data_disks"), "Data disk cannot change in place",
				fmt.Sprintf("The data disk %q changes its size, volume, source, pool, format or serial. A data disk is "+
					"attached and detached whole, never changed in place: remove it and add a disk under "+
					"another name (a new, not kept, volume is then deleted), or keep this entry as it is.", s.Name.ValueString()))
		}
	}
}
