package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// vmModel is kohaku_vm's state and plan. Nested values are kept as framework
// values because configurations may leave them unknown until apply.
type vmModel struct {
	ID                types.String   `tfsdk:"id"`
	UUID              types.String   `tfsdk:"uuid"`
	Host              types.String   `tfsdk:"host"`
	HostChange        types.String   `tfsdk:"host_change"`
	Name              types.String   `tfsdk:"name"`
	Type              types.String   `tfsdk:"type"`
	VCPU              types.Int64    `tfsdk:"vcpu"`
	MemoryMiB         types.Int64    `tfsdk:"memory_mib"`
	Machine           types.String   `tfsdk:"machine"`
	Firmware          types.String   `tfsdk:"firmware"`
	CPUMode           types.String   `tfsdk:"cpu_mode"`
	Disk              types.Object   `tfsdk:"disk"`
	Kernel            types.String   `tfsdk:"kernel"`
	Initrd            types.String   `tfsdk:"initrd"`
	Cmdline           types.String   `tfsdk:"cmdline"`
	SeedID            types.String   `tfsdk:"seed_id"`
	NetworkInterfaces types.List     `tfsdk:"network_interface"`
	SharedFolders     types.List     `tfsdk:"shared_folder"`
	DataDisks         types.List     `tfsdk:"data_disks"`
	GPUs              types.Set      `tfsdk:"gpus"`
	Hostdevs          types.Set      `tfsdk:"hostdevs"`
	Mdevs             types.Set      `tfsdk:"mdevs"`
	PCIMMIO64GiB      types.Int64    `tfsdk:"pci_mmio64_gib"`
	NUMAPlacement     types.String   `tfsdk:"numa_placement"`
	NUMANodes         types.List     `tfsdk:"numa_nodes"`
	Hugepages         types.Object   `tfsdk:"hugepages"`
	CPUTopology       types.Object   `tfsdk:"cpu_topology"`
	GuestAgent        types.Bool     `tfsdk:"guest_agent"`
	SerialLogPath     types.String   `tfsdk:"serial_log_path"`
	Autostart         types.Bool     `tfsdk:"autostart"`
	Running           types.Bool     `tfsdk:"running"`
	ShutdownTimeout   types.String   `tfsdk:"shutdown_timeout"`
	DestroyShutdown   types.String   `tfsdk:"destroy_shutdown"`
	OverlayVolume     types.String   `tfsdk:"overlay_volume"`
	WaitFor           types.String   `tfsdk:"wait_for"`
	OnReadyFailure    types.String   `tfsdk:"on_ready_failure"`
	OnConfigMismatch  types.String   `tfsdk:"on_config_mismatch"`
	Guest             types.Object   `tfsdk:"guest"`
	Placement         types.Object   `tfsdk:"placement"`
	PlacedGPUs        types.List     `tfsdk:"placed_gpus"`
	PinnedCPUs        types.List     `tfsdk:"pinned_cpus"`
	Timeouts          timeouts.Value `tfsdk:"timeouts"`
}

type vmDiskModel struct {
	Image      types.String `tfsdk:"image"`
	BaseVolume types.String `tfsdk:"base_volume"`
	BasePool   types.String `tfsdk:"base_pool"`
	Volume     types.String `tfsdk:"volume"`
	Pool       types.String `tfsdk:"pool"`
	SizeGiB    types.Int64  `tfsdk:"size_gib"`
}

type vmNICModel struct {
	Type   types.String `tfsdk:"type"`
	Source types.String `tfsdk:"source"`
	Model  types.String `tfsdk:"model"`
	MAC    types.String `tfsdk:"mac"`
}

type vmShareModel struct {
	Source     types.String `tfsdk:"source"`
	Tag        types.String `tfsdk:"tag"`
	Driver     types.String `tfsdk:"driver"`
	AccessMode types.String `tfsdk:"access_mode"`
	ReadOnly   types.Bool   `tfsdk:"read_only"`
}

var (
	vmDiskAttrTypes = map[string]attr.Type{
		"image": types.StringType, "base_volume": types.StringType, "base_pool": types.StringType,
		"volume": types.StringType, "pool": types.StringType, "size_gib": types.Int64Type,
	}
	vmNICAttrTypes = map[string]attr.Type{
		"type": types.StringType, "source": types.StringType, "model": types.StringType, "mac": types.StringType,
	}
	vmShareAttrTypes = map[string]attr.Type{
		"source": types.StringType, "tag": types.StringType, "driver": types.StringType,
		"access_mode": types.StringType, "read_only": types.BoolType,
	}
)

// Defaults the schema declares, also used when import fills attributes the
// domain cannot tell.
const (
	vmDefaultPool            = "default"
	vmDefaultShutdownTimeout = "30s"
	vmDefaultVCPU            = 1
	vmDefaultMemoryMiB       = 1024
)

// overlayName is the name of the overlay volume a VM's disk gets.
func overlayName(vm string) string { return vm + "-root.qcow2" }

// parseVolumeID splits "<pool>/<volume>", the form of seed ids and of
// overlay_volume.
func parseVolumeID(id string) (pool, volume string, ok bool) {
	pool, volume, ok = strings.Cut(id, "/")
	if !ok || pool == "" || volume == "" || strings.Contains(volume, "/") {
		return "", "", false
	}
	return pool, volume, true
}

// overlay reports whether the disk is a new overlay on a base image
// (image, or base_pool/base_volume) rather than an existing volume.
func (d *vmDiskModel) overlay() bool { return !d.Image.IsNull() || !d.BaseVolume.IsNull() }

// base is the image the overlay is backed by, from image or from
// base_pool/base_volume; nil when the disk is an existing volume or the
// value is not known or not well formed.
func (d *vmDiskModel) base() *domain.VolumeRef {
	if !d.Image.IsNull() {
		if _, pool, vol, ok := splitVolumeID(d.Image.ValueString()); ok && !d.Image.IsUnknown() {
			return &domain.VolumeRef{Pool: pool, Volume: vol}
		}
		return nil
	}
	if d.BaseVolume.IsNull() || d.BaseVolume.IsUnknown() || d.BasePool.IsUnknown() {
		return nil
	}
	pool := d.BasePool.ValueString()
	if pool == "" {
		pool = vmDefaultPool
	}
	return &domain.VolumeRef{Pool: pool, Volume: d.BaseVolume.ValueString()}
}

// hostPhrase names a host of the hosts map, or the default connection
// ("" is the provider's default host), in a message.
func hostPhrase(h string) string {
	if h == "" {
		return "the provider's default host"
	}
	return fmt.Sprintf("host %q", h)
}

// imageHostProblem says why a kohaku_image id cannot back a VM on vmHost
// ("" is the provider's default connection); empty when it can.
func imageHostProblem(vmHost, imageID string) string {
	host, pool, vol, ok := splitVolumeID(imageID)
	if !ok {
		return fmt.Sprintf("%q is not a kohaku_image id. Use the image's id, e.g. image = "+
			"kohaku_image.debian12.id, which is <pool>/<volume> (\"default/debian-12.qcow2\") on the provider's "+
			"default host or <host>/<pool>/<volume> (\"gpu2/default/debian-12.qcow2\") on a host of the hosts "+
			"map.", imageID)
	}
	if host == vmHost {
		return ""
	}
	fix := fmt.Sprintf("the id of a kohaku_image with host = %q", vmHost)
	if vmHost == "" {
		fix = "the id of a kohaku_image without host"
	}
	return fmt.Sprintf("image %q (pool %q, volume %q) is on %s, but this VM is on %s: an overlay can only be "+
		"backed by an image in a pool of its own host. Use %s (with for_each over hosts: image = "+
		"kohaku_image.debian12[each.key].id), or put the VM on the image's host.", imageID, pool, vol, hostPhrase(host), hostPhrase(vmHost), fix)
}

func (m *vmModel) disk(ctx context.Context, diags *diag.Diagnostics) *vmDiskModel {
	if m.Disk.IsNull() || m.Disk.IsUnknown() {
		return nil
	}
	var d vmDiskModel
	diags.Append(m.Disk.As(ctx, &d, objectAsOptions)...)
	return &d
}

func (m *vmModel) nics(ctx context.Context, diags *diag.Diagnostics) []vmNICModel {
	if m.NetworkInterfaces.IsNull() || m.NetworkInterfaces.IsUnknown() {
		return nil
	}
	var out []vmNICModel
	diags.Append(m.NetworkInterfaces.ElementsAs(ctx, &out, false)...)
	return out
}

func (m *vmModel) shares(ctx context.Context, diags *diag.Diagnostics) []vmShareModel {
	if m.SharedFolders.IsNull() || m.SharedFolders.IsUnknown() {
		return nil
	}
	var out []vmShareModel
	diags.Append(m.SharedFolders.ElementsAs(ctx, &out, false)...)
	return out
}

// stringSet returns a set's known elements and whether any was unknown.
func stringSet(s types.Set) (vals []string, unknown bool) {
	if s.IsUnknown() {
		return nil, true
	}
	for _, e := range s.Elements() {
		v, ok := e.(types.String)
		if !ok || v.IsUnknown() {
			unknown = true
			continue
		}
		if !v.IsNull() {
			vals = append(vals, v.ValueString())
		}
	}
	return vals, unknown
}

// specInput is a Spec built from a plan or config, with the domain-package
// attribute paths whose values were not known yet (their errors are skipped)
// and, per domain hostdev index, the schema attribute it came from.
type specInput struct {
	Spec     domain.Spec
	Unknown  []string
	Hostdevs []hostdevOrigin
	// DiskMode is "base_volume" (a new overlay on an image, named by
	// image or base_volume), "volume" or "" (no disk).
	DiskMode string
	// NewDisks are the data disks whose volumes Kohaku makes.
	NewDisks []vmlife.NewDisk
}

type hostdevOrigin struct {
	Attr  string // gpus or hostdevs
	Value string // the element as written
}

// unknownAt records that a value at a domain path is not known yet.
func (in *specInput) unknownAt(p string) { in.Unknown = append(in.Unknown, p) }

// str returns a string attribute's value; unknown values record p and
// yield placeholder, which is valid wherever it is used.
func (in *specInput) str(v types.String, p, placeholder string) string {
	if v.IsUnknown() {
		in.unknownAt(p)
		return placeholder
	}
	return v.ValueString()
}

func (in *specInput) int(v types.Int64, p string, placeholder int) int {
	if v.IsUnknown() {
		in.unknownAt(p)
		return placeholder
	}
	if v.IsNull() {
		return placeholder
	}
	return int(v.ValueInt64())
}

// specFrom turns a plan or config into a domain.Spec. Null values mean the
// schema's defaults (the plan has them filled in; config does not).
func (m *vmModel) specFrom(ctx context.Context, diags *diag.Diagnostics) specInput {
	in := specInput{}
	s := &in.Spec
	s.Name = in.str(m.Name, "name", "placeholder")
	s.UUID = m.UUID.ValueString()
	s.Type = domain.Type(in.str(m.Type, "type", ""))
	s.VCPU = in.int(m.VCPU, "vcpu", vmDefaultVCPU)
	s.MemoryMiB = in.int(m.MemoryMiB, "memory_mib", vmDefaultMemoryMiB)
	s.Machine = domain.Machine(in.str(m.Machine, "machine", ""))
	s.Firmware = domain.Firmware(in.str(m.Firmware, "firmware", ""))
	s.CPUMode = domain.CPUMode(in.str(m.CPUMode, "cpu_mode", ""))
	s.PCIMMIO64GiB = in.int(m.PCIMMIO64GiB, "pci_mmio64_gib", 0)
	m.numaSpec(ctx, &in, diags)
	s.Kernel = in.str(m.Kernel, "kernel", "/unknown")
	s.Initrd = in.str(m.Initrd, "initrd", "/unknown")
	s.Cmdline = in.str(m.Cmdline, "cmdline", "")
	s.SerialLogPath = in.str(m.SerialLogPath, "serial_log_path", "")
	s.NoGuestAgent = !m.GuestAgent.IsNull() && !m.GuestAgent.IsUnknown() && !m.GuestAgent.ValueBool()

	switch {
	case m.Disk.IsUnknown():
		in.unknownAt("disk")
		s.Disk = &domain.Disk{Source: domain.Source{Pool: "unknown", Volume: "unknown"}}
		in.DiskMode = "unknown"
	case !m.Disk.IsNull():
		d := m.disk(ctx, diags)
		if d == nil {
			break
		}
		pool := in.str(d.Pool, "disk.pool", vmDefaultPool)
		if pool == "" && d.Pool.IsNull() {
			pool = vmDefaultPool
		}
		disk := &domain.Disk{Source: domain.Source{Pool: pool}}
		switch {
		case d.overlay():
			in.DiskMode = "base_volume"
			in.str(d.BaseVolume, "disk.volume", "")
			in.str(d.Image, "disk.volume", "")
			disk.Volume = overlayName(s.Name)
			disk.Format = domain.DiskQCOW2
		default:
			in.DiskMode = "volume"
			disk.Volume = in.str(d.Volume, "disk.volume", "unknown")
		}
		s.Disk = disk
	}

	in.NewDisks = m.dataDiskSpecs(ctx, &in, diags)

	if m.SeedID.IsUnknown() {
		in.unknownAt("seed")
		s.Seed = &domain.Seed{Source: domain.Source{Pool: "unknown", Volume: "unknown"}}
	} else if !m.SeedID.IsNull() {
		pool, vol, ok := parseVolumeID(m.SeedID.ValueString())
		if !ok {
			in.unknownAt("seed") // the seed_id validator reports the form
			pool, vol = "unknown", "unknown"
		}
		s.Seed = &domain.Seed{Source: domain.Source{Pool: pool, Volume: vol}}
		s.Owner.SeedID = m.SeedID.ValueString()
	}

	if m.NetworkInterfaces.IsUnknown() {
		in.unknownAt("network_interface")
	}
	for i, n := range m.nics(ctx, diags) {
		p := fmt.Sprintf("network_interface[%d]", i)
		if n.Type.IsUnknown() || n.Source.IsUnknown() || n.Model.IsUnknown() {
			in.unknownAt(p)
		}
		nic := domain.NIC{
			Type:   domain.NICType(n.Type.ValueString()),
			Source: n.Source.ValueString(),
			Model:  n.Model.ValueString(),
		}
		if !n.MAC.IsUnknown() {
			nic.MAC = n.MAC.ValueString()
		}
		s.NICs = append(s.NICs, nic)
	}

	if m.SharedFolders.IsUnknown() {
		in.unknownAt("shared_folder")
	}
	for i, sf := range m.shares(ctx, diags) {
		p := fmt.Sprintf("shared_folder[%d]", i)
		if sf.Source.IsUnknown() || sf.Tag.IsUnknown() || sf.Driver.IsUnknown() || sf.AccessMode.IsUnknown() || sf.ReadOnly.IsUnknown() {
			in.unknownAt(p)
		}
		s.SharedFolders = append(s.SharedFolders, domain.SharedFolder{
			Source:     sf.Source.ValueString(),
			Tag:        sf.Tag.ValueString(),
			Driver:     domain.ShareDriver(sf.Driver.ValueString()),
			AccessMode: domain.AccessMode(sf.AccessMode.ValueString()),
			ReadOnly:   sf.ReadOnly.ValueBool(),
		})
	}

	gpus, gpuUnknown := stringSet(m.GPUs)
	raw, rawUnknown := stringSet(m.Hostdevs)
	if gpuUnknown || rawUnknown {
		in.unknownAt("hostdev")
	}
	for _, g := range gpus {
		_, addr := vmlife.ParseGPUID(g)
		s.Hostdevs = append(s.Hostdevs, addr)
		in.Hostdevs = append(in.Hostdevs, hostdevOrigin{Attr: "gpus", Value: g})
	}
	if m.PlacedGPUs.IsUnknown() {
		in.unknownAt("hostdev")
	}
	for _, a := range placedAddresses(m.PlacedGPUs) {
		s.Hostdevs = append(s.Hostdevs, a.String())
		in.Hostdevs = append(in.Hostdevs, hostdevOrigin{Attr: "placed_gpus", Value: a.String()})
	}
	for _, h := range raw {
		s.Hostdevs = append(s.Hostdevs, h)
		in.Hostdevs = append(in.Hostdevs, hostdevOrigin{Attr: "hostdevs", Value: h})
	}
	mdevs, mdevUnknown := stringSet(m.Mdevs)
	if mdevUnknown {
		in.unknownAt("mdev")
	}
	s.Mdevs = mdevs
	return in
}

// nullIfEmpty keeps a null prior value null when libvirt reports nothing.
func nullIfEmpty(observed string, prior types.String) types.String {
	if observed == "" && (prior.IsNull() || prior.IsUnknown()) {
		return types.StringNull()
	}
	return types.StringValue(observed)
}

// fromDomain fills m from what libvirt reports, keeping the prior values the
// domain cannot tell (host, disk inputs, timeouts) and the prior spelling of
// values that mean the same (null vs empty, PCI address case).
func (m *vmModel) fromDomain(ctx context.Context, st *domainView, prior *vmModel, diags *diag.Diagnostics) {
	o := st.Observed.Spec
	m.ID = types.StringValue(st.Status.UUID)
	m.UUID = types.StringValue(st.Status.UUID)
	m.Host = prior.Host
	m.Name = types.StringValue(o.Name)
	m.Type = types.StringValue(string(o.Type))
	m.VCPU = types.Int64Value(int64(o.VCPU))
	m.MemoryMiB = types.Int64Value(int64(o.MemoryMiB))
	m.Machine = types.StringValue(string(o.Machine))
	m.Firmware = types.StringValue(string(o.Firmware))
	m.CPUMode = types.StringValue(string(o.CPUMode))
	m.PCIMMIO64GiB = types.Int64Null()
	if o.PCIMMIO64GiB > 0 {
		m.PCIMMIO64GiB = types.Int64Value(int64(o.PCIMMIO64GiB))
	}
	m.numaFromDomain(o, prior)
	m.Kernel = nullIfEmpty(o.Kernel, prior.Kernel)
	m.Initrd = nullIfEmpty(o.Initrd, prior.Initrd)
	m.Cmdline = nullIfEmpty(o.Cmdline, prior.Cmdline)
	m.GuestAgent = types.BoolValue(!o.NoGuestAgent)
	m.SerialLogPath = types.StringValue(o.SerialLogPath)
	m.Autostart = types.BoolValue(st.Status.Autostart)
	m.Running = types.BoolValue(st.Status.Active)
	m.ShutdownTimeout = prior.ShutdownTimeout
	if m.ShutdownTimeout.IsNull() || m.ShutdownTimeout.IsUnknown() {
		m.ShutdownTimeout = types.StringValue(vmDefaultShutdownTimeout)
	}
	// How destroy stops the guest lives only in Terraform, like the timeout.
	m.DestroyShutdown = prior.DestroyShutdown
	if m.DestroyShutdown.IsNull() || m.DestroyShutdown.IsUnknown() {
		m.DestroyShutdown = types.StringValue(string(vmlife.DestroyAuto))
	}
	m.HostChange = prior.HostChange
	if m.HostChange.IsNull() || m.HostChange.IsUnknown() {
		m.HostChange = types.StringValue(hostChangeMove)
	}
	m.Timeouts = prior.Timeouts
	// Readiness settings and the guest's report live only in Terraform.
	m.WaitFor, m.OnReadyFailure, m.Guest = prior.WaitFor, prior.OnReadyFailure, prior.Guest
	if m.WaitFor.IsNull() || m.WaitFor.IsUnknown() {
		m.WaitFor = types.StringValue(waitAuto)
	}
	if m.OnReadyFailure.IsNull() || m.OnReadyFailure.IsUnknown() {
		m.OnReadyFailure = types.StringValue(keepOnFailure)
	}
	m.OnConfigMismatch = prior.OnConfigMismatch
	if m.OnConfigMismatch.IsNull() || m.OnConfigMismatch.IsUnknown() {
		m.OnConfigMismatch = types.StringValue(mismatchWarn)
	}
	if m.Guest.IsUnknown() {
		m.Guest = nullGuest()
	}

	// Seed: the CD-ROM's pool/volume is the kohaku_seed id.
	m.SeedID = types.StringNull()
	if o.Seed != nil {
		switch {
		case o.Seed.Pool != "" || o.Seed.Volume != "":
			m.SeedID = types.StringValue(o.Seed.Pool + "/" + o.Seed.Volume)
		case o.Seed.Path != "":
			m.SeedID = types.StringValue(o.Seed.Path)
		}
	}

	// Disk and overlay.
	m.OverlayVolume = types.StringNull()
	if st.Overlay != nil {
		m.OverlayVolume = types.StringValue(st.Overlay.Pool + "/" + st.Overlay.Volume)
	}
	m.Disk = diskFromDomain(ctx, o.Disk, st, prior, diags)

	// NICs.
	var nics []attr.Value
	for _, n := range o.NICs {
		src := types.StringValue(n.Source)
		if n.Type == domain.NICUser && n.Source == "" {
			src = types.StringNull()
		}
		v, d := types.ObjectValueFrom(ctx, vmNICAttrTypes, vmNICModel{
			Type: types.StringValue(string(n.Type)), Source: src,
			Model: types.StringValue(n.Model), MAC: types.StringValue(n.MAC),
		})
		diags.Append(d...)
		nics = append(nics, v)
	}
	m.NetworkInterfaces = listOrPrior(nics, vmNICAttrTypes, prior.NetworkInterfaces, diags)

	var shares []attr.Value
	for _, sf := range o.SharedFolders {
		v, d := types.ObjectValueFrom(ctx, vmShareAttrTypes, vmShareModel{
			Source: types.StringValue(sf.Source), Tag: types.StringValue(sf.Tag),
			Driver: types.StringValue(string(sf.Driver)), AccessMode: types.StringValue(string(sf.AccessMode)),
			ReadOnly: types.BoolValue(sf.ReadOnly),
		})
		diags.Append(d...)
		shares = append(shares, v)
	}
	m.SharedFolders = listOrPrior(shares, vmShareAttrTypes, prior.SharedFolders, diags)
	m.DataDisks = dataDisksFromDomain(ctx, st, prior, diags)

	// PCI devices: the functions of a prior gpus entry's IOMMU group (as
	// create or update recorded it) are that entry, the rest are hostdevs.
	// The GPUs placement chose are attributed the same way, and reported
	// under placed_gpus, which keeps the choice.
	priorGPUs, _ := stringSet(prior.GPUs)
	placed := map[string]bool{}
	for _, a := range placedAddresses(prior.PlacedGPUs) {
		placed[a.String()] = true
		priorGPUs = append(priorGPUs, a.String())
	}
	priorRaw, _ := stringSet(prior.Hostdevs)
	gpuVals, rawVals := attributeHostdevs(o.Hostdevs, priorGPUs, priorRaw, st.GPUGroups)
	var gpus, raw []attr.Value
	for _, g := range gpuVals {
		if !placed[g] {
			gpus = append(gpus, types.StringValue(g))
		}
	}
	for _, h := range rawVals {
		raw = append(raw, types.StringValue(h))
	}
	m.GPUs = setOrPrior(gpus, prior.GPUs, diags)
	m.Hostdevs = setOrPrior(raw, prior.Hostdevs, diags)
	var mdevs []attr.Value
	for _, u := range o.Mdevs {
		mdevs = append(mdevs, types.StringValue(u))
	}
	m.Mdevs = setOrPrior(mdevs, prior.Mdevs, diags)
	// The request and the choice live only in Terraform: an imported VM
	// has neither.
	m.Placement, m.PlacedGPUs = prior.Placement, prior.PlacedGPUs
	if m.Placement.IsUnknown() || m.Placement.IsNull() {
		m.Placement = types.ObjectNull(vmPlacementAttrTypes)
	}
	if m.PlacedGPUs.IsUnknown() || m.PlacedGPUs.IsNull() {
		m.PlacedGPUs = types.ListNull(types.StringType)
	}
	pins := []attr.Value{}
	for _, c := range o.CPUPins {
		pins = append(pins, types.Int64Value(int64(c)))
	}
	m.PinnedCPUs = types.ListValueMust(types.Int64Type, pins)
}

// listOrPrior builds a list, keeping a prior null (or empty) list when there
// is nothing, so "not set" and "set to []" both round-trip.
func listOrPrior(elems []attr.Value, attrTypes map[string]attr.Type, prior types.List, diags *diag.Diagnostics) types.List {
	t := types.ObjectType{AttrTypes: attrTypes}
	if len(elems) == 0 && !prior.IsUnknown() && (prior.IsNull() || len(prior.Elements()) == 0) {
		if prior.IsNull() {
			return types.ListNull(t)
		}
		return types.ListValueMust(t, []attr.Value{})
	}
	if len(elems) == 0 {
		return types.ListValueMust(t, []attr.Value{})
	}
	v, d := types.ListValue(t, elems)
	diags.Append(d...)
	return v
}

func setOrPrior(elems []attr.Value, prior types.Set, diags *diag.Diagnostics) types.Set {
	if len(elems) == 0 {
		if prior.IsNull() || prior.IsUnknown() {
			return types.SetNull(types.StringType)
		}
		return types.SetValueMust(types.StringType, []attr.Value{})
	}
	v, d := types.SetValue(types.StringType, elems)
	diags.Append(d...)
	return v
}

// diskFromDomain maps the domain's boot disk back onto the disk attribute.
// When the disk is the one the prior state describes, the prior object is kept
// as is; when it differs (changed behind Terraform's back) the result differs
// from the configuration, so the plan replaces the VM.
func diskFromDomain(ctx context.Context, d *domain.Disk, st *domainView, prior *vmModel, diags *diag.Diagnostics) types.Object {
	null := types.ObjectNull(vmDiskAttrTypes)
	if d == nil {
		return null
	}
	if d.Path != "" && st.DiskVolume != nil {
		// A disk given by file path is the volume of the pool that holds it.
		byVolume := *d
		byVolume.Source = domain.Source{Pool: st.DiskVolume.Pool, Volume: st.DiskVolume.Volume}
		d = &byVolume
	}
	var pd *vmDiskModel
	if !prior.Disk.IsNull() && !prior.Disk.IsUnknown() {
		pd = prior.disk(ctx, diags)
	}
	if pd != nil {
		matches := false
		switch {
		case pd.overlay():
			matches = st.Overlay != nil && d.Pool == st.Overlay.Pool && d.Volume == st.Overlay.Volume
		default:
			matches = d.Pool == pd.Pool.ValueString() && d.Volume == pd.Volume.ValueString()
		}
		if matches {
			return prior.Disk
		}
	}
	out := vmDiskModel{
		Image:    types.StringNull(),
		BasePool: types.StringValue(vmDefaultPool),
		Pool:     types.StringValue(d.Pool),
		Volume:   types.StringValue(d.Volume),
		SizeGiB:  types.Int64Null(),
	}
	if d.Path != "" {
		out.Volume, out.Pool = types.StringValue(d.Path), types.StringValue("")
	}
	out.BaseVolume = types.StringNull()
	if st.Base != nil && st.Overlay != nil && d.Pool == st.Overlay.Pool && d.Volume == st.Overlay.Volume {
		// An overlay this resource created (known on import from the metadata).
		out.BaseVolume = types.StringValue(st.Base.Volume)
		out.BasePool = types.StringValue(st.Base.Pool)
		out.Volume = types.StringNull()
		if st.SizeGiB > 0 {
			out.SizeGiB = types.Int64Value(st.SizeGiB)
		}
	}
	if pd != nil && out.Volume.IsNull() {
		out.SizeGiB = pd.SizeGiB
	}
	v, dd := types.ObjectValueFrom(ctx, vmDiskAttrTypes, out)
	diags.Append(dd...)
	return v
}

// vmDestroyModes are the values of destroy_shutdown.
func vmDestroyModes() []string {
	out := make([]string, len(vmlife.DestroyModes))
	for i, m := range vmlife.DestroyModes {
		out[i] = string(m)
	}
	return out
}
