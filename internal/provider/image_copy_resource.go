package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/imagelife"
)

var (
	_ resource.ResourceWithConfigure      = (*imageCopyResource)(nil)
	_ resource.ResourceWithValidateConfig = (*imageCopyResource)(nil)
)

const imageCopyCreateTimeout = 60 * time.Minute

// streamedCopyDoc says, in a resource's description, how a volume copied
// between hosts travels and is checked (imagelife.Copy).
const streamedCopyDoc = "(libvirt's stream API on both connections, one stream packet in memory, no tool or network " +
	"path between the hosts), hashed as it is read, then read back from the target and compared; a copy that does " +
	"not match is deleted and fails the create"

func newImageCopyResource() resource.Resource { return &imageCopyResource{} }

type imageCopyResource struct {
	configuredResource
}

type imageCopyModel struct {
	ID           types.String   `tfsdk:"id"`
	Host         types.String   `tfsdk:"host"`
	Pool         types.String   `tfsdk:"pool"`
	Name         types.String   `tfsdk:"name"`
	Source       types.String   `tfsdk:"source"`
	SourceDigest types.String   `tfsdk:"source_digest"`
	Digest       types.String   `tfsdk:"digest"`
	Format       types.String   `tfsdk:"format"`
	VirtualSize  types.Int64    `tfsdk:"virtual_size_bytes"`
	VolumePath   types.String   `tfsdk:"volume_path"`
	Timeouts     timeouts.Value `tfsdk:"timeouts"`
}

func (r *imageCopyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_image_copy"
}

func (r *imageCopyResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A copy of an image (a `kohaku_image`, a `kohaku_image_capture`, or another copy) on another " +
			"host of the `hosts` map, or in another pool: streamed from the source host's pool through the machine " +
			"running Terraform into the target's " + streamedCopyDoc + ". Its `id` has the " +
			"`kohaku_image` form, so VMs on that host take it as `disk = { image = kohaku_image_copy.<name>.id }`; " +
			"with `for_each` over the hosts, one copy per host. Destroy deletes the copy, and is refused while VMs' " +
			"overlays are backed by it. Drift: a copy deleted out of band is copied again by the next apply.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "`<pool>/<volume name>` on the provider's default host, `<host>/<pool>/<volume name>` on a host of the `hosts` map: what a VM's `disk.image` takes. Known at plan time.",
				PlanModifiers: []planmodifier.String{imageIDFromPlan()},
			},
			"host": schema.StringAttribute{
				Optional:      true,
				Description:   "Key of the provider's `hosts` map to copy the image to; empty means the default connection. A change replaces the copy.",
				PlanModifiers: replace,
			},
			"pool": schema.StringAttribute{
				Required:      true,
				Description:   "Storage pool of the copy on `host`, e.g. `default`. A change replaces the copy.",
				PlanModifiers: replace,
				Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"name": schema.StringAttribute{
				Required: true,
				Description: "Volume name of the copy. A volume of that name that Kohaku did not create is never " +
					"overwritten: the create fails instead. A change replaces the copy.",
				PlanModifiers: replace,
				Validators: []validator.String{stringvalidator.LengthAtLeast(1), stringvalidator.RegexMatches(regexp.MustCompile(`^[^/]+$`),
					"must be a volume name without `/`, e.g. `golden.qcow2`")},
			},
			"source": schema.StringAttribute{
				Required: true,
				Description: "The `id` of the image to copy, e.g. `kohaku_image_capture.golden.id`: `<pool>/<volume>` on " +
					"the default host or `<host>/<pool>/<volume>`. A standalone volume (an overlay is refused: its base " +
					"would not travel). A change replaces the copy.",
				PlanModifiers: replace,
				Validators:    []validator.String{volumeOrHostVolumeID{}},
			},
			"source_digest": schema.StringAttribute{
				Optional: true,
				Description: "`sha256:<hex>` the source volume must read as, e.g. `kohaku_image_capture.golden.digest`: " +
					"a source changed since it was captured is not spread to other hosts (the create fails and leaves " +
					"no copy). Not a `kohaku_image`'s `digest`, which is that of its download before decompression. " +
					"Without it, the copy is still verified against what was read. A change (a capture made again) " +
					"replaces the copy.",
				PlanModifiers: replace,
				Validators: []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^sha256:[0-9a-f]{64}$`),
					"must be `sha256:` followed by 64 lower-case hex digits, as kohaku_image_capture's digest is")},
			},
			"digest":             fixedString("`sha256:<hex>` of the volume's bytes, as read from the source and read back from the copy."),
			"format":             fixedString("Format of the copy: the source's, `qcow2` or `raw`."),
			"virtual_size_bytes": fixedInt64("The image's virtual size."),
			"volume_path":        fixedString("Path of the copy on its host."),
		},
		Blocks: imageTimeoutsBlocks(ctx, "How long the copy and its verification may take. Default `60m`."),
	}
}

// ValidateConfig refuses a copy onto its own source.
func (r *imageCopyResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m imageCopyModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Source.IsUnknown() || m.Host.IsUnknown() || m.Pool.IsUnknown() || m.Name.IsUnknown() {
		return
	}
	if m.Source.ValueString() == imageID(m.Host.ValueString(), m.Pool.ValueString(), m.Name.ValueString()) {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Copy onto its source",
			fmt.Sprintf("The copy would be %s, its own source. Choose another host, pool or name.", m.Source.ValueString()))
	}
}

func (r *imageCopyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan imageCopyModel
	ctx, cancel, dst := r.data.openCreate(ctx, req, &plan, &plan.Host, &plan.Timeouts, imageCopyCreateTimeout, &resp.Diagnostics)
	defer cancel()
	if dst == nil {
		return
	}
	srcHost, srcPool, srcName, _ := splitVolumeID(plan.Source.ValueString())
	src := r.data.client(srcHost, &resp.Diagnostics)
	if src == nil {
		return
	}
	pool, name := plan.Pool.ValueString(), plan.Name.ValueString()
	tflog.Info(ctx, "copying image", map[string]any{"source": plan.Source.ValueString(), "to": plan.Host.ValueString() + "/" + pool + "/" + name})
	got, err := imagelife.Copy(ctx, src, srcPool, srcName, dst, pool, name, plan.SourceDigest.ValueString())
	if errors.Is(err, imagelife.ErrSourceChanged) {
		resp.Diagnostics.AddAttributeError(path.Root("source_digest"), "Source image changed", sentence(err)+
			" Nothing was left on the target. Capture the image again (or fix source_digest) before copying it.")
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Copying image %s to %s", plan.Source.ValueString(), imageID(plan.Host.ValueString(), pool, name)), err)
		return
	}
	plan.ID = types.StringValue(imageID(plan.Host.ValueString(), pool, name))
	plan.Digest = types.StringValue(got.Digest.String())
	plan.setVolume(got.Volume)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (m *imageCopyModel) setVolume(v *imagelife.Volume) {
	m.VolumePath = types.StringValue(v.Path)
	m.VirtualSize = types.Int64Value(v.CapacityBytes)
	m.Format = types.StringValue(v.Format)
}

func (r *imageCopyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state imageCopyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	vol := r.data.readImageVolume(ctx, state.Host.ValueString(), state.Pool.ValueString(), state.Name.ValueString(), "image copy",
		"image copy is gone; removing it from state so the next apply copies again", resp)
	if vol == nil {
		return
	}
	state.setVolume(vol)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update changes only the timeouts; everything else replaces the copy.
func (r *imageCopyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state imageCopyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Digest, plan.Format, plan.VirtualSize, plan.VolumePath = state.Digest, state.Format, state.VirtualSize, state.VolumePath
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *imageCopyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state imageCopyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.data.deleteImage(ctx, state.Host.ValueString(), state.Pool.ValueString(), state.Name.ValueString(), state.Timeouts, &resp.Diagnostics)
}

// volumeOrHostVolumeID accepts an image id: `<pool>/<volume>` or
// `<host>/<pool>/<volume>`.
type volumeOrHostVolumeID struct{}

func (volumeOrHostVolumeID) Description(context.Context) string {
	return "an image id, `<pool>/<volume>` or `<host>/<pool>/<volume>`"
}

func (v volumeOrHostVolumeID) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (volumeOrHostVolumeID) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, _, _, ok := splitVolumeID(req.ConfigValue.ValueString()); !ok {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid image id",
			fmt.Sprintf("%q is not an image id. Use the id of a kohaku_image, kohaku_image_capture or kohaku_image_copy, e.g. "+
				"kohaku_image_capture.golden.id, which is <pool>/<volume> (\"default/golden.qcow2\") on the provider's default "+
				"host or <host>/<pool>/<volume> (\"gpu2/default/golden.qcow2\") on a host of the hosts map.", req.ConfigValue.ValueString()))
	}
}
