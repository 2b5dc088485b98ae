package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/image"
	"github.com/kohaku/terraform-provider-kohaku/internal/imagelife"
)

var (
	_ resource.ResourceWithConfigure   = (*imageResource)(nil)
	_ resource.ResourceWithImportState = (*imageResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*imageResource)(nil)
)

const (
	imageCreateTimeout = 60 * time.Minute
	imageDeleteTimeout = 5 * time.Minute
	// imageProgressEvery is how often a long transfer logs its progress.
	imageProgressEvery = 10 * time.Second
)

func newImageResource() resource.Resource { return &imageResource{} }

type imageResource struct {
	configuredResource
}

type imageResourceModel struct {
	ID          types.String   `tfsdk:"id"`
	Host        types.String   `tfsdk:"host"`
	Pool        types.String   `tfsdk:"pool"`
	Name        types.String   `tfsdk:"name"`
	Source      types.String   `tfsdk:"source"`
	Checksum    types.String   `tfsdk:"checksum"`
	ChecksumURL types.String   `tfsdk:"checksum_url"`
	SigURL      types.String   `tfsdk:"checksum_signature_url"`
	SigKeys     types.String   `tfsdk:"checksum_signing_keys"`
	SignedBy    types.String   `tfsdk:"checksum_signed_by"`
	AllowHTTP   types.Bool     `tfsdk:"allow_http_checksum_url"`
	MaxGiB      types.Int64    `tfsdk:"max_decompressed_gib"`
	MaxRatio    types.Int64    `tfsdk:"max_compression_ratio"`
	Digest      types.String   `tfsdk:"digest"`
	Verified    types.Bool     `tfsdk:"verified"`
	Format      types.String   `tfsdk:"format"`
	VirtualSize types.Int64    `tfsdk:"virtual_size_bytes"`
	Size        types.Int64    `tfsdk:"size_bytes"`
	Compression types.String   `tfsdk:"compression"`
	VolumePath  types.String   `tfsdk:"volume_path"`
	Timeouts    timeouts.Value `tfsdk:"timeouts"`
}

func (r *imageResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_image"
}

var (
	digestRE      = regexp.MustCompile(`^(sha256:[0-9a-fA-F]{64}|sha512:[0-9a-fA-F]{128})$`)
	imageSourceRE = regexp.MustCompile(`^(https?://\S+|file://\S+|[^:]+)$`)
)

func (r *imageResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A base disk image in a libvirt storage pool, made from a vendor's cloud image: downloaded " +
			"(or read from a local file) on the machine running Terraform, verified against its published " +
			"checksum while it streams, decompressed (xz, gzip, zstd, bzip2, and a tar holding one disk image, " +
			"recognised by content), checked (qcow2 or raw only; a qcow2 naming a backing file or an external " +
			"data file is refused) and uploaded through libvirt's stream API over the host's existing " +
			"connection, so remote hosts need no tool and no download of their own. " +
			"Downloads are cached on the Terraform machine by digest (provider `image_cache_dir`), so " +
			"`for_each` over the hosts of the `hosts` map downloads once and uploads to every host. Memory " +
			"stays bounded whatever the image size. " +
			"A VM takes it as `disk = { image = kohaku_image.<name>.id }` and boots it through firmware (`firmware = \"bios\"` or `\"uefi\"`, no `kernel`).\n\n" +
			"Drift: a volume deleted out of band is recreated by the next apply; a changed capacity or format " +
			"is reported as a warning. Content changed in place with the same size is not detected (reading " +
			"a multi-GiB image on every refresh would cost more than it saves).",
		Attributes: attributes(
			imageSourceAttributes(replace),
			imageCheckAttributes(),
			imageResultAttributes(keep),
		),
		Blocks: imageTimeoutsBlocks(ctx, "How long downloading, verifying and uploading may take. Default `60m` (multi-GiB images over slow links)."),
	}
}

// imageSourceAttributes are where the image comes from and where it is stored.
func imageSourceAttributes(replace []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"id": schema.StringAttribute{
			Computed: true,
			Description: "`<pool>/<volume name>` on the provider's default host, `<host>/<pool>/<volume name>` on a host of the `hosts` map (the forms import takes): what a VM's `disk.image` takes. " +
				"Known at plan time, so a VM that names an image of another host is refused before anything is made.",
			PlanModifiers: []planmodifier.String{imageIDFromPlan()},
		},
		"host": schema.StringAttribute{
			Optional:      true,
			Description:   "Key of the provider's `hosts` map to store the image on; empty means the default connection. A change replaces the image.",
			PlanModifiers: replace,
		},
		"pool": schema.StringAttribute{
			Required:      true,
			Description:   "Storage pool to create the volume in, e.g. `default`. A change replaces the image.",
			PlanModifiers: replace,
			Validators:    []validator.String{stringvalidator.LengthAtLeast(1)},
		},
		"name": schema.StringAttribute{
			Required: true,
			Description: "Volume name, e.g. `debian-12-genericcloud-amd64.qcow2`. A volume of that name " +
				"that Kohaku did not create is never overwritten: the create fails instead. A change " +
				"replaces the image.",
			PlanModifiers: replace,
			Validators:    []validator.String{stringvalidator.LengthAtLeast(1), stringvalidator.RegexMatches(regexp.MustCompile(`^[^/]+$`), "must be a volume name without `/`, e.g. `debian-12.qcow2`")},
		},
		"source": schema.StringAttribute{
			Optional: true, Sensitive: true,
			Description: "Where the image comes from: an `https://` or `http://` URL (redirects followed, " +
				"except from https to http), " +
				"a `file://` URL, or a path on the machine running Terraform (relative to the working " +
				"directory), e.g. " +
				"`https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2`. " +
				"Compression and format are recognised by content, not by name. Required to create the image; " +
				"an image that was imported (or adopted through `terraform query`) may leave it out until it " +
				"is to be replaced, since its source cannot be read back from the volume. A change replaces " +
				"the image (after import, setting it does not). Sensitive, since a URL may carry a password: " +
				"plans do not show it, and messages show it without the password.",
			PlanModifiers: []planmodifier.String{replaceUnlessImported()},
			Validators: []validator.String{stringvalidator.RegexMatches(imageSourceRE,
				"must be an http:// or https:// URL, a file:// URL or a local path, e.g. `https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2`")},
		},
	}
}

// imageCheckAttributes are how the image is verified and what it may grow to.
func imageCheckAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"checksum": schema.StringAttribute{
			Optional: true,
			Description: "Expected digest of the source as downloaded (before decompression), " +
				"`sha256:<hex>` or `sha512:<hex>`. Verified while the image streams; a mismatch fails the " +
				"create naming both digests and leaves no volume. Conflicts with `checksum_url`. " +
				"Setting it later to the `digest` already recorded does not replace the image; any other change does.",
			PlanModifiers: []planmodifier.String{replaceUnlessDigestMatches()},
			Validators: []validator.String{
				stringvalidator.RegexMatches(digestRE, "must be `sha256:` followed by 64 hex digits or `sha512:` followed by 128, e.g. `sha256:"+strings.Repeat("0", 64)+"`"),
				stringvalidator.ConflictsWith(path.MatchRoot("checksum_url")),
			},
		},
		"checksum_url": schema.StringAttribute{
			Optional: true, Sensitive: true,
			Description: "URL (or local path) of the vendor's checksum file, e.g. " +
				"`https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS`: GNU (`<hex>  <name>`) " +
				"or BSD (`SHA256 (<name>) = <hex>`) style, SHA-256 or SHA-512; the line for the source's " +
				"file name is used. " +
				"Without `checksum` or `checksum_url` the image is not verified: its digest is recorded and the create warns. A change replaces the image (after import, setting it does not). " +
				"Sensitive, like `source`.",
			PlanModifiers: []planmodifier.String{replaceUnlessImported()},
			Validators: []validator.String{stringvalidator.RegexMatches(imageSourceRE,
				"must be an http:// or https:// URL, a file:// URL or a local path, e.g. `https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS`")},
		},
		"checksum_signature_url": schema.StringAttribute{
			Optional: true,
			Description: "URL (or local path) of a detached OpenPGP signature of the `checksum_url` file, " +
				"ASCII-armored or binary, e.g. Debian's " +
				"`https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS.sign` or Ubuntu's " +
				"`SHA256SUMS.gpg`. The checksum file must carry a valid signature by one of " +
				"`checksum_signing_keys` (a file signed by several keys needs one of them), else the create " +
				"fails before the image is downloaded. Needs `checksum_url` and `checksum_signing_keys`; plain " +
				"http is refused as for `checksum_url`. Leave it out for a clear-signed checksum file " +
				"(`-----BEGIN PGP SIGNED MESSAGE-----`), whose signature is inline. " +
				"A change applies to the next create and replaces nothing.",
			Validators: []validator.String{
				stringvalidator.RegexMatches(imageSourceRE,
					"must be an http:// or https:// URL, a file:// URL or a local path, e.g. `https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS.sign`"),
				stringvalidator.AlsoRequires(path.MatchRoot("checksum_url"), path.MatchRoot("checksum_signing_keys")),
			},
		},
		"checksum_signing_keys": schema.StringAttribute{
			Optional: true,
			Description: "ASCII-armored OpenPGP public keys (one or more `-----BEGIN PGP PUBLIC KEY BLOCK-----` " +
				"blocks, e.g. `file(\"debian-cloud.asc\")`) that the `checksum_url` file must be signed by: " +
				"through `checksum_signature_url`, or inline when the file is clear-signed, and then only the " +
				"signed text is read. A signature by another key, a checksum file changed after signing, or an " +
				"expired or revoked key fails the create before the image is downloaded; " +
				"`checksum_signed_by` records the key that signed. Checked at plan time. Needs `checksum_url`. " +
				"Without it, signatures are not checked. A change applies to the next create and replaces nothing.",
			Validators: []validator.String{
				signingKeysValidator{},
				stringvalidator.AlsoRequires(path.MatchRoot("checksum_url")),
			},
		},
		"allow_http_checksum_url": schema.BoolAttribute{
			Optional: true,
			Description: "Whether `checksum_url` may be a plain `http://` URL. Default `false`: such a " +
				"URL is refused, since anyone on the path could replace the checksum file and the image " +
				"together. When allowed, the digest is still compared (catching corruption) but `verified` " +
				"is `false` and the create warns. A plain http URL on the loopback (`localhost`, " +
				"`127.0.0.0/8`, `::1`) never leaves the machine: it needs no permission and verifies. " +
				"Redirects from https to http are refused either way. " +
				"A change applies to the next create and replaces nothing.",
		},
		"max_decompressed_gib": schema.Int64Attribute{
			Optional: true,
			Description: fmt.Sprintf("Bound on the decompressed image (or the tar archive holding it) in GiB. "+
				"A source that decompresses past it is refused while it streams, before more is written, "+
				"and nothing is left in the cache: a small hostile file cannot fill the disk of the "+
				"machine running Terraform or the host's pool. Default `%d`; raise it for a genuine "+
				"image that is larger. A change applies to the next create and replaces nothing.", image.DefaultMaxSize>>30),
			Validators: []validator.Int64{int64validator.AtLeast(1)},
		},
		"max_compression_ratio": schema.Int64Attribute{
			Optional: true,
			Description: fmt.Sprintf("Bound on decompressed bytes per downloaded byte, checked once %d MiB "+
				"came out; a source past it is refused as a decompression bomb. Default `%d` (cloud images "+
				"compress by well under 100). A change applies to the next create and replaces nothing.",
				image.RatioGrace>>20, image.DefaultMaxRatio),
			Validators: []validator.Int64{int64validator.AtLeast(1)},
		},
	}
}

// imageResultAttributes are what the image turned out to be, and the operations' timeouts.
func imageResultAttributes(keep []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"digest": schema.StringAttribute{
			Computed:      true,
			Description:   "Digest of the source as downloaded, `sha256:<hex>` (or `sha512:<hex>` when the expected checksum is SHA-512). Unknown after import.",
			PlanModifiers: keep,
		},
		"verified": schema.BoolAttribute{
			Computed:      true,
			PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			Description: "Whether the digest was checked against `checksum`, an https `checksum_url`, or a " +
				"`checksum_url` whose signature by one of `checksum_signing_keys` was verified (one fetched " +
				"over plain http without a verified signature, see `allow_http_checksum_url`, does not count).",
		},
		"checksum_signed_by": schema.StringAttribute{
			Computed:      true,
			PlanModifiers: keep,
			Description: "Fingerprint (upper-case hex, 40 digits for the usual v4 keys) of the primary key, among " +
				"`checksum_signing_keys`, whose signature on the checksum file was verified when the image " +
				"was created; null when no signature was checked.",
		},
		"format": schema.StringAttribute{
			Computed:      true,
			Description:   "Format of the volume: `qcow2` or `raw`, recognised from the image's content. A raw image is uploaded as its data only: stretches of zeros of 1 MiB or more stay holes in the volume, so a 20 GiB raw disk holding 2 GiB costs about 2 GiB of the pool.",
			PlanModifiers: keep,
		},
		"virtual_size_bytes": schema.Int64Attribute{
			Computed:      true,
			PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			Description:   "The image's virtual size (the volume's capacity): the disk size a VM sees before its overlay grows it.",
		},
		"size_bytes": schema.Int64Attribute{
			Computed:      true,
			PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			Description:   "Bytes uploaded: the decompressed image file's size.",
		},
		"compression": schema.StringAttribute{
			Computed:      true,
			PlanModifiers: keep,
			Description:   "How the source was packed, as recognised from its content: empty, `xz`, `gzip`, `zstd`, `bzip2`, with `+tar` when a tar archive held the image (e.g. `xz+tar`), or `tar`.",
		},
		"volume_path": schema.StringAttribute{
			Computed:      true,
			Description:   "Path of the volume on the host.",
			PlanModifiers: keep,
		},
	}
}

// ModifyPlan refuses, on source's line, a plan that would upload the image
// without a source: a create, or the replacement of an image imported
// without one.
func (r *imageResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var source types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("source"), &source)...)
	if !source.IsNull() {
		return
	}
	switch {
	case req.State.Raw.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("source"), "Missing source",
			"Creating an image needs its source: an https:// URL, a file:// URL or a local path, e.g. "+
				"source = \"https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2\". "+
				"Only an image that is imported may leave it out.")
	case len(resp.RequiresReplace) > 0:
		resp.Diagnostics.AddAttributeError(path.Root("source"), "Missing source",
			fmt.Sprintf("This plan replaces the image (%s changed), which uploads it again from its source, but the "+
				"image was imported without one. Set source to where the image comes from.", resp.RequiresReplace[0]))
	}
}

func (r *imageResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan imageResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Create(ctx, imageCreateTimeout)
	ctx, cancel, c := r.data.open(ctx, plan.Host.ValueString(), timeout, d, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	pool, name, source := plan.Pool.ValueString(), plan.Name.ValueString(), plan.Source.ValueString()
	shown := image.Redact(source) // for messages and logs: no password, no presigned query
	freq, err := plan.fetchRequest()
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("checksum"), "Invalid checksum", err.Error())
		return
	}
	freq.Progress = progressLogger(ctx, "downloading image", map[string]any{"source": shown})
	res, err := r.data.images.Fetch(ctx, freq)
	if err != nil {
		addFetchError(&resp.Diagnostics, &plan, shown, err)
		return
	}
	defer res.Release()
	f, err := res.Open()
	if err != nil {
		resp.Diagnostics.AddError("Reading the cached image", err.Error())
		return
	}
	defer f.Close()
	tflog.Info(ctx, "uploading image", map[string]any{"source": shown, "pool": pool, "name": name, "format": res.Format, "bytes": res.Size, "virtual_size": res.VirtualSize, "from_cache": !res.Downloaded})
	up := progressLogger(ctx, "uploading image", map[string]any{"pool": pool, "name": name})
	vol, err := imagelife.Upload(ctx, c, pool, name, res, f, func(sent int64) { up(image.Progress{Done: sent, Total: res.Size}) })
	if errors.Is(err, image.ErrChecksumMismatch) {
		// A local image used in place is hashed as it uploads: the
		// upload failed at its last chunk and its volume was deleted.
		addFetchError(&resp.Diagnostics, &plan, shown, err)
		return
	}
	if errors.Is(err, image.ErrCacheEntryChanged) {
		resp.Diagnostics.AddAttributeError(path.Root("source"), "Cached image changed: "+shown, sentence(err)+
			" Apply again: the image is downloaded and verified afresh.")
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Uploading image %s to %s/%s", shown, pool, name), err)
		return
	}
	addVerifyWarnings(&resp.Diagnostics, &plan, shown, res)
	plan.ID = types.StringValue(imageID(plan.Host.ValueString(), pool, name))
	plan.setFetched(res)
	plan.setVolume(vol)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// fetchRequest is what Fetch is asked for this image.
func (m *imageResourceModel) fetchRequest() (image.Request, error) {
	freq := image.Request{
		Source: m.Source.ValueString(), ChecksumURL: m.ChecksumURL.ValueString(), AllowHTTPChecksumURL: m.AllowHTTP.ValueBool(),
		ChecksumSignatureURL: m.SigURL.ValueString(), ChecksumSigningKeys: m.SigKeys.ValueString(),
	}
	if !m.MaxGiB.IsNull() {
		freq.Limits.MaxSize = m.MaxGiB.ValueInt64() << 30
	}
	if !m.MaxRatio.IsNull() {
		freq.Limits.MaxRatio = m.MaxRatio.ValueInt64()
	}
	if s := m.Checksum.ValueString(); s != "" {
		dg, err := image.ParseDigest(s)
		if err != nil {
			return image.Request{}, err
		}
		freq.Checksum = &dg
	}
	return freq, nil
}

// addFetchError reports a failed Fetch on the attribute that explains it.
func addFetchError(diags *diag.Diagnostics, m *imageResourceModel, shown string, err error) {
	mismatch := errors.Is(err, image.ErrChecksumMismatch)
	switch {
	case errors.Is(err, image.ErrSignature):
		at := path.Root("checksum_url")
		if !m.SigURL.IsNull() {
			at = path.Root("checksum_signature_url")
		}
		diags.AddAttributeError(at, "Checksum file signature not verified", sentence(err)+
			" Nothing was downloaded or uploaded. If the vendor now signs with another key, add it to "+
			"checksum_signing_keys once its fingerprint is checked; otherwise the checksum file is not the vendor's.")
	case mismatch && m.ChecksumURL.ValueString() != "":
		diags.AddAttributeError(path.Root("checksum_url"), "Image checksum mismatch", sentence(err)+" Nothing was left in the pool.")
	case mismatch:
		diags.AddAttributeError(path.Root("checksum"), "Image checksum mismatch", sentence(err)+" Nothing was left in the pool.")
	case errors.Is(err, image.ErrLimit):
		diags.AddAttributeError(path.Root("source"), "Image refused: "+shown, sentence(err)+
			" Nothing was left in the pool. If the image is genuine, raise `max_decompressed_gib` or `max_compression_ratio`.")
	default:
		diags.AddAttributeError(path.Root("source"), "Cannot get image "+shown, sentence(err)+" Nothing was left in the pool.")
	}
}

// addVerifyWarnings warns when the uploaded image was not verified.
func addVerifyWarnings(diags *diag.Diagnostics, m *imageResourceModel, shown string, res *image.Result) {
	switch {
	case res.ChecksumOverHTTP: // never with a verified signature
		diags.AddAttributeWarning(path.Root("checksum_url"), "Image checked over plain http only",
			fmt.Sprintf("%s matched the digest in %s, which came over plain http: that catches a corrupted "+
				"download, but someone on the path could have replaced both, so `verified` is false. Its digest "+
				"is %s; use an https checksum_url, or set checksum = %q from a source you trust.",
				shown, image.Redact(m.ChecksumURL.ValueString()), res.Digest, res.Digest.String()))
	case !res.Verified:
		diags.AddAttributeWarning(path.Root("checksum"), "Image not verified",
			fmt.Sprintf("%s was uploaded without a checksum to compare with; its digest is %s. Set checksum = "+
				"%q (or checksum_url to the vendor's SHA256SUMS/SHA512SUMS) so that a corrupted or substituted "+
				"download fails instead.", shown, res.Digest, res.Digest.String()))
	}
}

// setFetched records what Fetch found out about the image.
func (m *imageResourceModel) setFetched(res *image.Result) {
	m.Digest = types.StringValue(res.Digest.String())
	m.Verified = types.BoolValue(res.Verified)
	m.SignedBy = types.StringNull()
	if res.SignedBy != "" {
		m.SignedBy = types.StringValue(res.SignedBy)
	}
	m.Compression = types.StringValue(res.Compression)
	m.Size = types.Int64Value(res.Size)
}

func (m *imageResourceModel) setVolume(v *imagelife.Volume) {
	m.VolumePath = types.StringValue(v.Path)
	m.VirtualSize = types.Int64Value(v.CapacityBytes)
	if v.Format != "" {
		m.Format = types.StringValue(v.Format)
	}
}

// progressLogger returns a Progress callback that logs at INFO at most
// every imageProgressEvery: bytes, rate and time left.
func progressLogger(ctx context.Context, msg string, fields map[string]any) func(image.Progress) {
	return progressLoggerClock(ctx, msg, fields, time.Now)
}

// progressLoggerClock is progressLogger with the clock given, for tests.
func progressLoggerClock(ctx context.Context, msg string, fields map[string]any, now func() time.Time) func(image.Progress) {
	start := now()
	last := start
	return func(p image.Progress) {
		t := now()
		if t.Sub(last) < imageProgressEvery {
			return
		}
		last = t
		elapsed := t.Sub(start)
		f := map[string]any{"done_mib": p.Done >> 20, "elapsed": elapsed.Round(time.Second).String()}
		for k, v := range fields {
			f[k] = v
		}
		rate := p.Rate
		if rate == 0 && elapsed > 0 {
			rate = float64(p.Done) / elapsed.Seconds()
		}
		f["rate_mib_s"] = fmt.Sprintf("%.1f", rate/(1<<20))
		if p.Total > 0 {
			f["total_mib"] = p.Total >> 20
			if rate > 0 {
				f["left"] = time.Duration(float64(p.Total-p.Done) / rate * float64(time.Second)).Round(time.Second).String()
			}
		}
		tflog.Info(ctx, msg, f)
	}
}

func (r *imageResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state imageResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pool, name := state.Pool.ValueString(), state.Name.ValueString()
	vol := r.data.readImageVolume(ctx, state.Host.ValueString(), pool, name, "image",
		"image volume is gone; removing it from state so the next apply recreates it", resp)
	if vol == nil {
		return
	}
	if !state.VirtualSize.IsNull() && state.VirtualSize.ValueInt64() != vol.CapacityBytes || !state.Format.IsNull() && vol.Format != "" && state.Format.ValueString() != vol.Format {
		resp.Diagnostics.AddWarning("Image volume changed outside Terraform",
			fmt.Sprintf("%s/%s was %s with a capacity of %d bytes and is now %s with %d bytes. VMs made from it "+
				"from now on see the changed image; taint this resource (terraform apply -replace) to restore "+
				"it from its source.",
				pool, name, state.Format.ValueString(), state.VirtualSize.ValueInt64(), vol.Format, vol.CapacityBytes))
	}
	state.readVolume(vol)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// readVolume records what the host says of the image's volume, as Read and
// the list resource do: an image imported or listed has no verification to
// its name.
func (m *imageResourceModel) readVolume(v *imagelife.Volume) {
	m.ID = types.StringValue(imageID(m.Host.ValueString(), m.Pool.ValueString(), m.Name.ValueString()))
	m.setVolume(v)
	if m.Verified.IsNull() {
		m.Verified = types.BoolValue(false)
	}
}

// Update only ever changes what needs no upload: the timeouts, or a
// checksum set to the digest already recorded (or an imported image's
// source), which the plan modifiers allow in place.
func (r *imageResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state imageResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Verified, plan.SignedBy = state.Verified, state.SignedBy
	if s := plan.Checksum.ValueString(); s != "" && strings.EqualFold(s, state.Digest.ValueString()) {
		plan.Verified = types.BoolValue(true)
	}
	plan.Size, plan.Compression = state.Size, state.Compression
	plan.VirtualSize = state.VirtualSize
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *imageResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state imageResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := state.Timeouts.Delete(ctx, imageDeleteTimeout)
	resp.Diagnostics.Append(d...)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	deleteImageVolume(ctx, c, state.Pool.ValueString(), state.Name.ValueString(), &resp.Diagnostics)
}

// ImportState takes `<pool>/<volume>` or `<host>/<pool>/<volume>`.
func (r *imageResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importVolume(ctx, req, resp, "an image", "default/debian-12.qcow2")
}

// importVolume sets id, pool, name and host of a resource that is a volume
// from `<pool>/<volume>` or `<host>/<pool>/<volume>`; what names the kind
// ("a seed") and example is a valid `<pool>/<volume>`.
func importVolume(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse, what, example string) {
	host, pool, name, ok := splitVolumeID(req.ID)
	if !ok {
		resp.Diagnostics.AddError("Invalid import ID",
			fmt.Sprintf("%q is not the ID of %s. Import it as <pool>/<volume>, e.g. %s, or <host>/<pool>/<volume> for a host of the provider's hosts map.", req.ID, what, example))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), pool+"/"+name)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("pool"), pool)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
	if host != "" {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("host"), host)...)
	}
}

// imageID is a kohaku_image's id: `<pool>/<volume>`, after `<host>/` for a
// host of the hosts map.
func imageID(host, pool, name string) string {
	if host != "" {
		return host + "/" + pool + "/" + name
	}
	return pool + "/" + name
}

// imageIDFromPlan makes the id known at plan time from host, pool and name,
// so a VM that uses the image can be checked before anything is made.
func imageIDFromPlan() planmodifier.String {
	return imageIDModifier{}
}

type imageIDModifier struct{}

func (imageIDModifier) Description(context.Context) string {
	return "The id follows from host, pool and name."
}

func (m imageIDModifier) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (imageIDModifier) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var host, pool, name types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("host"), &host)...)
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("pool"), &pool)...)
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("name"), &name)...)
	if host.IsUnknown() || pool.IsUnknown() || name.IsUnknown() {
		return
	}
	resp.PlanValue = types.StringValue(imageID(host.ValueString(), pool.ValueString(), name.ValueString()))
}

// splitVolumeID parses `<pool>/<volume>` or `<host>/<pool>/<volume>`.
func splitVolumeID(id string) (host, pool, name string, ok bool) {
	parts := strings.Split(id, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return "", parts[0], parts[1], true
	case len(parts) == 3 && parts[1] != "" && parts[2] != "":
		return parts[0], parts[1], parts[2], true
	}
	return "", "", "", false
}

// replaceUnlessImported requires replacement when the value changes, except
// when the prior state has none (an imported image learns its source).
func replaceUnlessImported() planmodifier.String {
	return stringplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
		var digest types.String
		req.State.GetAttribute(ctx, path.Root("digest"), &digest)
		resp.RequiresReplace = !(req.StateValue.IsNull() && digest.IsNull())
	}, "Replaces the image, unless it was imported and this is the first value set.", "Replaces the image, unless it was imported and this is the first value set.")
}

// replaceUnlessDigestMatches lets a checksum be added when it states the
// digest already recorded; any other change replaces the image.
func replaceUnlessDigestMatches() planmodifier.String {
	return stringplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
		var digest types.String
		req.State.GetAttribute(ctx, path.Root("digest"), &digest)
		if req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
			resp.RequiresReplace = false // dropping the checksum changes nothing on the host
			return
		}
		resp.RequiresReplace = !strings.EqualFold(req.PlanValue.ValueString(), digest.ValueString())
	}, "Replaces the image unless the new checksum is the digest already recorded.", "Replaces the image unless the new checksum is the digest already recorded.")
}

// sentence ends an error's text with a full stop, for a diagnostic that
// goes on.
func sentence(err error) string {
	msg := strings.TrimSpace(err.Error())
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
