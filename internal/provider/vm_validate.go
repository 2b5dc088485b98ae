package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
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
	validateWaitConfig(&cfg, &resp.Diagnostics)
	addValidationErrors(&resp.Diagnostics, domain.Validate(in.Spec), in.report())

	// A GPU bound on another host cannot be passed to this VM.
	if !cfg.Host.IsUnknown() {
		gpus, _ := stringSet(cfg.GPUs)
		for _, g := range gpus {
			if host, _ := vmlife.ParseGPUID(g); host != "" && host != cfg.Host.ValueString() {
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
