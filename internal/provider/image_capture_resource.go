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
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/capture"
	"github.com/kohaku/terraform-provider-kohaku/internal/imagelife"
)

var (
	_ resource.ResourceWithConfigure  = (*imageCaptureResource)(nil)
	_ resource.ResourceWithModifyPlan = (*imageCaptureResource)(nil)
)

const (
	imageCaptureCreateTimeout   = 30 * time.Minute
	imageCaptureShutdownDefault = "5m"
	// imageCaptureSealTimeout bounds the seal command in the guest.
	imageCaptureSealTimeout = 2 * time.Minute
	// imageCapturePlanCheck bounds the plan-time look at the VM's disk.
	imageCapturePlanCheck = 30 * time.Second
)

func newImageCaptureResource() resource.Resource { return &imageCaptureResource{} }

type imageCaptureResource struct {
	configuredResource
}

type imageCaptureModel struct {
	ID              types.String   `tfsdk:"id"`
	Host            types.String   `tfsdk:"host"`
	Pool            types.String   `tfsdk:"pool"`
	Name            types.String   `tfsdk:"name"`
	VM              types.String   `tfsdk:"vm"`
	Seal            types.Bool     `tfsdk:"seal"`
	ShutdownTimeout types.String   `tfsdk:"shutdown_timeout"`
	Digest          types.String   `tfsdk:"digest"`
	Sealed          types.Bool     `tfsdk:"sealed"`
	SourceVolume    types.String   `tfsdk:"source_volume"`
	Format          types.String   `tfsdk:"format"`
	VirtualSize     types.Int64    `tfsdk:"virtual_size_bytes"`
	VolumePath      types.String   `tfsdk:"volume_path"`
	Timeouts        timeouts.Value `tfsdk:"timeouts"`
}

func (r *imageCaptureResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_image_capture"
}

func (r *imageCaptureResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A golden image captured from a VM's boot disk: a base image like a downloaded `kohaku_image`, " +
			"with the same `id` form, so a VM takes it as `disk = { image = kohaku_image_capture.<name>.id }` on " +
			"that host. Create seals the guest (see `seal`), shuts a running VM down cleanly (never forced: a VM " +
			"that does not power off within `shutdown_timeout` is left running and nothing is captured), flattens " +
			"its boot disk with the base image under it into a new standalone qcow2 volume (libvirt's " +
			"`qemu-img convert` on the host), reads that volume back for its `digest`, and starts the VM again " +
			"when it was running, also when a step failed. `kohaku_image_copy` places it on other hosts.\n\n" +
			"The capture is made once: later changes to the VM do not change it; `terraform apply -replace` " +
			"captures again. Destroy deletes the volume, and is refused while VMs' overlays are backed by it. " +
			"A VM whose boot disk is not a volume of a storage pool (a block device, a file outside every pool) " +
			"or that has no boot disk is refused at plan time when the VM exists already. " +
			"Drift: a volume deleted out of band is captured again by the next apply.",
		Attributes: attributes(imageCaptureInputs(replace), imageCaptureResults()),
		Blocks:     imageTimeoutsBlocks(ctx, "How long the whole capture may take: seal, shutdown, flatten, digest and restart. Default `30m`."),
	}
}

func imageCaptureInputs(replace []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"id": schema.StringAttribute{
			Computed: true,
			Description: "`<pool>/<volume name>` on the provider's default host, `<host>/<pool>/<volume name>` on a " +
				"host of the `hosts` map: what a VM's `disk.image` and `kohaku_image_copy`'s `source` take. Known at plan time.",
			PlanModifiers: []planmodifier.String{imageIDFromPlan()},
		},
		"host": schema.StringAttribute{
			Optional:      true,
			Description:   "Key of the provider's `hosts` map the VM is on, and the image is made on; empty means the default connection. A change replaces the image.",
			PlanModifiers: replace,
		},
		"pool": schema.StringAttribute{
			Required:      true,
			Description:   "Storage pool to create the image volume in, e.g. `default`. A change replaces the image.",
			PlanModifiers: replace,
			Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
		},
		"name": schema.StringAttribute{
			Required: true,
			Description: "Volume name of the image, e.g. `golden-cuda.qcow2`. A volume of that name that Kohaku did " +
				"not create is never overwritten: the create fails instead. A change replaces the image.",
			PlanModifiers: replace,
			Validators: []validator.String{stringvalidator.LengthAtLeast(1), stringvalidator.RegexMatches(regexp.MustCompile(`^[^/]+$`),
				"must be a volume name without `/`, e.g. `golden.qcow2`")},
		},
		"vm": schema.StringAttribute{
			Required: true,
			Description: "The VM to capture: a `kohaku_vm`'s `id` (its UUID), or a domain's name or UUID on `host`. " +
				"Its boot disk (`vda`) is captured: an overlay Kohaku made, or an existing volume of a pool (`disk.volume`), " +
				"qcow2 or raw. A change replaces the image (captures again).",
			PlanModifiers: replace,
			Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
		},
		"seal": schema.BoolAttribute{
			Optional: true, Computed: true,
			Default: booldefault.StaticBool(true),
			Description: "Whether to seal the guest before the capture, so clones boot as new instances. Default " +
				"`true`: through the QEMU guest agent, in the running guest, `cloud-init clean --logs --seed` (with " +
				"`--machine-id` where the guest's cloud-init has it, 23.1 on: Debian 13's 25.1, not Debian 12's 22.4, " +
				"where `/etc/machine-id` is emptied instead) and the SSH host keys removed; systemd and cloud-init " +
				"make new ones at the next boot. This also applies to the captured VM itself when it is started " +
				"again: it boots as a new instance of its own seed (new host keys, machine-id; cloud-init runs its " +
				"first-boot modules again). A VM that is not running, has no guest agent channel or whose agent does " +
				"not answer is captured unsealed with a warning (`sealed` is `false`): seal it yourself before, e.g. " +
				"with the same commands in a `runcmd`. A seal that runs and fails, or an agent that refuses " +
				"`guest-exec`, fails the create before the VM is stopped. `false` captures the disk as it is. A change " +
				"applies to the next capture and replaces nothing.",
			PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
		},
		"shutdown_timeout": schema.StringAttribute{
			Optional: true, Computed: true,
			Default: stringdefault.StaticString(imageCaptureShutdownDefault),
			Description: "How long a running VM gets to power off when asked (through the guest agent, else ACPI), " +
				"as a Go duration. Default `" + imageCaptureShutdownDefault + "`. A VM still running then is never " +
				"forced off: the create fails and the VM keeps running. A change applies to the next capture and replaces nothing.",
			Validators: []validator.String{positiveDuration},
		},
	}
}

func imageCaptureResults() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"digest": fixedString("`sha256:<hex>` of the image volume's bytes, read back from the host after the flatten. " +
			"`kohaku_image_copy` checks copies against it (`source_digest`)."),
		"sealed": schema.BoolAttribute{
			Computed: true, PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			Description: "Whether the seal ran in the guest and succeeded.",
		},
		"source_volume":      fixedString("The VM's boot volume that was captured, `<pool>/<volume>`."),
		"format":             fixedString("Format of the image volume: `qcow2`."),
		"virtual_size_bytes": fixedInt64("The image's virtual size: that of the VM's boot disk."),
		"volume_path":        fixedString("Path of the volume on the host."),
	}
}

// ModifyPlan refuses, at plan time, a capture of a VM that exists and whose
// boot disk cannot be captured. A VM not made yet is checked at apply.
func (r *imageCaptureResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var plan imageCaptureModel
	if !r.data.createPlan(ctx, req, &plan, &resp.Diagnostics) || plan.VM.IsUnknown() || plan.Host.IsUnknown() {
		return
	}
	c, err := r.data.fleet.Host(plan.Host.ValueString())
	if err != nil {
		return // the create says so
	}
	ctx, cancel := context.WithTimeout(ctx, imageCapturePlanCheck)
	defer cancel()
	if _, err := capture.BootDisk(ctx, c, plan.VM.ValueString()); errors.Is(err, capture.ErrNotCapturable) {
		resp.Diagnostics.AddAttributeError(path.Root("vm"), "VM cannot be captured", sentence(err)+
			" Capture a VM whose boot disk is an overlay Kohaku made (disk.image or disk.base_volume) or a volume of a storage pool (disk.volume).")
	}
}

func (r *imageCaptureResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan imageCaptureModel
	ctx, cancel, c := r.data.openCreate(ctx, req, &plan, &plan.Host, &plan.Timeouts, imageCaptureCreateTimeout, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	shutdown, err := time.ParseDuration(plan.ShutdownTimeout.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("shutdown_timeout"), "Invalid shutdown_timeout", err.Error())
		return
	}
	pool, name, vm := plan.Pool.ValueString(), plan.Name.ValueString(), plan.VM.ValueString()
	res, err := capture.Capture(ctx, c, capture.Request{
		VM: vm, Pool: pool, Name: name, Seal: plan.Seal.ValueBool(),
		ShutdownTimeout: shutdown, SealTimeout: imageCaptureSealTimeout,
		Progress: func(s string) { tflog.Info(ctx, "capture: "+s, map[string]any{"vm": vm, "image": pool + "/" + name}) },
	})
	if errors.Is(err, capture.ErrNotCapturable) {
		resp.Diagnostics.AddAttributeError(path.Root("vm"), "VM cannot be captured", sentence(err)+" Nothing was changed.")
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Capturing VM %s into %s/%s", vm, pool, name), err)
		return
	}
	for _, w := range res.Warnings {
		resp.Diagnostics.AddAttributeWarning(path.Root("seal"), "Capture of "+res.Disk.VM.Name, w)
	}
	plan.ID = types.StringValue(imageID(plan.Host.ValueString(), pool, name))
	plan.Digest = types.StringValue(res.Digest.String())
	plan.Sealed = types.BoolValue(res.Sealed)
	plan.SourceVolume = types.StringValue(res.Disk.Pool + "/" + res.Disk.Name)
	plan.setVolume(res.Volume)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (m *imageCaptureModel) setVolume(v *imagelife.Volume) {
	m.VolumePath = types.StringValue(v.Path)
	m.VirtualSize = types.Int64Value(v.CapacityBytes)
	m.Format = types.StringValue(v.Format)
}

func (r *imageCaptureResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state imageCaptureModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	vol := r.data.readImageVolume(ctx, state.Host.ValueString(), state.Pool.ValueString(), state.Name.ValueString(), "captured image",
		"captured image volume is gone; removing it from state so the next apply captures again", resp)
	if vol == nil {
		return
	}
	state.setVolume(vol)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update changes only what needs no capture: seal, shutdown_timeout and
// the timeouts, which apply to the next capture.
func (r *imageCaptureResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state imageCaptureModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Digest, plan.Sealed, plan.SourceVolume = state.Digest, state.Sealed, state.SourceVolume
	plan.Format, plan.VirtualSize, plan.VolumePath = state.Format, state.VirtualSize, state.VolumePath
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *imageCaptureResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state imageCaptureModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.data.deleteImage(ctx, state.Host.ValueString(), state.Pool.ValueString(), state.Name.ValueString(), state.Timeouts, &resp.Diagnostics)
}

// imageTimeoutsBlocks are the blocks of kohaku_image, its copy, its
// capture and kohaku_backup: a timeouts block, create as create says, and
// the delete of the volume, which all four bound by imageDeleteTimeout.
func imageTimeoutsBlocks(ctx context.Context, create string) map[string]schema.Block {
	return map[string]schema.Block{"timeouts": timeouts.Block(ctx, timeouts.Opts{
		Create: true, Delete: true,
		CreateDescription: create,
		DeleteDescription: "How long deleting may take. Default `5m`.",
	})}
}

// readImageVolume reads the volume of an image resource (kohaku_image, its
// copy and its capture) for Read: nil after a diagnostic, or with the
// resource removed from state, logged with gone, when the volume is gone so
// that the next apply makes it again. what names the image in the error
// ("image copy").
func (pd *providerData) readImageVolume(ctx context.Context, host, pool, name, what, gone string, resp *resource.ReadResponse) *imagelife.Volume {
	c := pd.client(host, &resp.Diagnostics)
	if c == nil {
		return nil
	}
	vol, err := imagelife.Read(ctx, c, pool, name)
	if errors.Is(err, imagelife.ErrGone) {
		tflog.Info(ctx, gone, map[string]any{"pool": pool, "name": name})
		resp.State.RemoveResource(ctx)
		return nil
	}
	if err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Reading %s %s/%s", what, pool, name), err)
		return nil
	}
	return vol
}

// deleteImage is the destroy of an image copy or capture: its volume,
// within the delete timeout, as deleteImageVolume deletes it.
func (pd *providerData) deleteImage(ctx context.Context, host, pool, name string, t timeouts.Value, diags *diag.Diagnostics) {
	timeout, d := t.Delete(ctx, imageDeleteTimeout)
	ctx, cancel, c := pd.open(ctx, host, timeout, d, diags)
	defer cancel()
	if c == nil {
		return
	}
	deleteImageVolume(ctx, c, pool, name, diags)
}

// deleteImageVolume deletes an image's volume unless overlays use it, as
// kohaku_image's destroy does.
func deleteImageVolume(ctx context.Context, c imagelife.Host, pool, name string, diags *diag.Diagnostics) {
	err := imagelife.Delete(ctx, c, pool, name)
	var (
		inUse   *imagelife.InUseError
		listing *imagelife.BackingListError
	)
	switch {
	case errors.As(err, &inUse):
		diags.AddError("Image is in use",
			fmt.Sprintf("%s/%s is the backing image of %s: deleting it would break them silently. Destroy the "+
				"VMs (or delete the overlay volumes) that use it first; to keep the volume and stop managing "+
				"it, run terraform state rm on this resource instead.", pool, name, strings.Join(inUse.Users, ", ")))
	case errors.As(err, &listing):
		addError(diags, fmt.Sprintf("Deleting image %s/%s: listing the volumes backed by it", pool, name), listing.Err)
	case err != nil:
		addError(diags, fmt.Sprintf("Deleting image %s/%s", pool, name), err)
	}
}
