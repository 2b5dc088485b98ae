package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// ValidateConfig runs the domain package's checks on the configuration at
// plan time and reports each problem on the attribute it is about. Values not
// known yet are skipped; they are checked again when Create builds the domain.
func (r *vmResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg vmModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in := cfg.specFrom(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	validateDiskChoice(cfg.disk(ctx, &resp.Diagnostics), &in, resp)
	var errs domain.ValidationErrors
	if err := domain.Validate(in.Spec); err != nil && !errors.As(err, &errs) {
		resp.Diagnostics.AddError("Invalid VM configuration", err.Error())
		return
	}
	for _, e := range errs {
		if in.skips(e.Path) {
			continue
		}
		p := in.schemaPath(e.Path)
		detail := fmt.Sprintf("%s: %s.", schemaPathString(p, e.Path), e.Problem)
		if e.Example != "" {
			detail += " For example: " + e.Example + "."
		}
		if p.Equal(path.Empty()) {
			resp.Diagnostics.AddError("Invalid VM configuration", detail)
		} else {
			resp.Diagnostics.AddAttributeError(p, "Invalid "+schemaPathString(p, e.Path), detail)
		}
	}

	// A GPU bound on another host cannot be passed to this VM.
	if !cfg.Host.IsUnknown() {
		gpus, _ := stringSet(cfg.GPUs)
		for _, g := range gpus {
			if host, _ := parseGPUID(g); host != "" && host != cfg.Host.ValueString() {
				where := "the provider's default host"
				if h := cfg.Host.ValueString(); h != "" {
					where = fmt.Sprintf("host %q", h)
				}
				resp.Diagnostics.AddAttributeError(path.Root("gpus").AtSetValue(types.StringValue(g)), "GPU on another host",
					fmt.Sprintf("%q is bound on host %q, but this VM is on %s. A VM can only use GPUs of its own host: set host = %q, or use a kohaku_gpu_binding on this VM's host.", g, host, where, host))
			}
		}
	}
}

// validateDiskChoice checks that the disk names exactly one source and that
// the overlay-only settings come with an overlay.
func validateDiskChoice(d *vmDiskModel, in *specInput, resp *resource.ValidateConfigResponse) {
	if d == nil {
		return
	}
	example := `disk = { base_pool = "images", base_volume = "debian-12.qcow2" } for a new overlay on an image, or disk = { pool = "default", volume = "web-1.qcow2" } for an existing volume`
	switch {
	case d.BaseVolume.IsUnknown() || d.Volume.IsUnknown():
	case !d.BaseVolume.IsNull() && !d.Volume.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("disk").AtName("volume"), "Conflicting disk sources",
			"disk: set either base_volume (the VM gets its own overlay on that image) or volume (an existing volume, used as it is), not both. For example: "+example+".")
	case d.BaseVolume.IsNull() && d.Volume.IsNull():
		in.unknownAt("disk.volume") // reported here, better than the domain check would
		resp.Diagnostics.AddAttributeError(path.Root("disk"), "Missing disk source",
			"disk: set base_volume (the VM gets its own overlay on that image) or volume (an existing volume, used as it is). For example: "+example+".")
	case d.BaseVolume.IsNull():
		for name, v := range map[string]attr.Value{"base_pool": d.BasePool, "size_gib": d.SizeGiB} {
			if !v.IsNull() {
				resp.Diagnostics.AddAttributeError(path.Root("disk").AtName(name), "Setting without an overlay",
					fmt.Sprintf("disk.%s only applies to an overlay on a base image (disk.base_volume); an existing volume (disk.volume) is used as it is. Remove %s, or use base_volume instead of volume.", name, name))
			}
		}
	}
}

// skips reports whether an error at domain path p is about a value not known
// yet (or an element holding one).
func (in *specInput) skips(p string) bool {
	for _, u := range in.Unknown {
		if p == u || strings.HasPrefix(p, u+".") || strings.HasPrefix(p, u+"[") {
			return true
		}
	}
	return false
}

var domainPathRE = regexp.MustCompile(`^([a-z_]+)(?:\[(\d+)\])?(?:\.([a-z_]+))?$`)

// schemaPath maps a domain package attribute path (network_interface[1].mac,
// hostdev[0], disk.volume, seed.pool, ...) onto kohaku_vm's schema.
func (in *specInput) schemaPath(dp string) path.Path {
	m := domainPathRE.FindStringSubmatch(dp)
	if m == nil {
		return path.Empty()
	}
	top, sub := m[1], m[3]
	idx := -1
	if m[2] != "" {
		idx, _ = strconv.Atoi(m[2])
	}
	switch top {
	case "disk":
		switch sub {
		case "pool":
			return path.Root("disk").AtName("pool")
		case "volume":
			if in.DiskMode == "base_volume" {
				return path.Root("disk").AtName("base_volume")
			}
			return path.Root("disk").AtName("volume")
		}
		return path.Root("disk")
	case "seed":
		return path.Root("seed_id")
	case "network_interface", "shared_folder":
		if idx < 0 {
			return path.Root(top)
		}
		p := path.Root(top).AtListIndex(idx)
		if sub != "" {
			p = p.AtName(sub)
		}
		return p
	case "hostdev":
		if idx >= 0 && idx < len(in.Hostdevs) {
			o := in.Hostdevs[idx]
			return path.Root(o.Attr).AtSetValue(types.StringValue(o.Value))
		}
		return path.Root("hostdevs")
	case "name", "type", "vcpu", "memory_mib", "machine", "firmware", "cpu_mode", "kernel", "initrd", "cmdline", "serial_log_path":
		return path.Root(top)
	}
	return path.Empty()
}

// schemaPathString names an attribute for a message, e.g. network_interface[1].mac.
func schemaPathString(p path.Path, fallback string) string {
	if p.Equal(path.Empty()) {
		return fallback
	}
	var b strings.Builder
	for _, s := range p.Steps() {
		switch s := s.(type) {
		case path.PathStepAttributeName:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(string(s))
		case path.PathStepElementKeyInt:
			fmt.Fprintf(&b, "[%d]", int64(s))
		case path.PathStepElementKeyValue:
			fmt.Fprintf(&b, "[%s]", s.Value.String())
		}
	}
	return b.String()
}

// volumeIDValidator accepts "<pool>/<volume>".
type volumeIDValidator struct{ what string }

var _ validator.String = volumeIDValidator{}

func (v volumeIDValidator) Description(context.Context) string {
	return v.what + " of the form <pool>/<volume>, for example \"default/web-1-seed.iso\""
}

func (v volumeIDValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v volumeIDValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, _, ok := parseVolumeID(req.ConfigValue.ValueString()); !ok {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(),
			fmt.Sprintf("%q is not %s of the form <pool>/<volume>. Use the id of the kohaku_seed resource, for example seed_id = kohaku_seed.web.id (which looks like \"default/web-1-seed.iso\").", req.ConfigValue.ValueString(), v.what))
	}
}

// nonNegativeDurationValidator accepts a Go duration of zero or more.
type nonNegativeDurationValidator struct{}

var _ validator.String = nonNegativeDurationValidator{}

func (nonNegativeDurationValidator) Description(context.Context) string {
	return "a Go duration of zero or more, such as \"0s\", \"30s\" or \"2m\""
}

func (v nonNegativeDurationValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (nonNegativeDurationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	d, err := time.ParseDuration(req.ConfigValue.ValueString())
	if err != nil || d < 0 {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%q is not a duration of zero or more. Write it as a Go duration, for example \"0s\", \"30s\" or \"2m\".", req.ConfigValue.ValueString()))
	}
}
