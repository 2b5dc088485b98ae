package provider

import (
	"context"
	"fmt"
	"strings"

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
	vmHost := cfg.Host
	if !cfg.Placement.IsNull() {
		vmHost = types.StringUnknown() // chosen at create, where the image is
		validatePlacement(ctx, &cfg, &resp.Diagnostics)
	}
	validateDiskChoice(cfg.disk(ctx, &resp.Diagnostics), vmHost, &in, resp)
	validateWaitConfig(&cfg, &resp.Diagnostics)
	validateDataDisks(cfg.dataDisks(ctx, &resp.Diagnostics), vmHost, &resp.Diagnostics)
	addValidationErrors(&resp.Diagnostics, domain.Validate(in.Spec), in.report())
	if cfg.Disk.IsNull() && cfg.Kernel.IsNull() {
		// libvirt boots such a domain (from a CD-ROM or the network), and
		// domains other tools made are often so; a new one is usually a
		// mistake.
		resp.Diagnostics.AddAttributeWarning(path.Root("disk"), "Nothing to boot from",
			"The VM has no disk and no kernel: its firmware can boot it only from a CD-ROM or the network. "+
				"For a VM that boots an operating system, set disk (for example disk = { image = "+
				"kohaku_image.debian12.id }) or kernel and initrd for direct kernel boot.")
	}

	// A GPU bound on another host cannot be passed to this VM.
	if !cfg.Host.IsUnknown() {
		gpus, _ := stringSet(cfg.GPUs)
		for _, g := range gpus {
			if host, _ := vmlife.ParseGPUID(g); host != "" && host != cfg.Host.ValueString() {
				resp.Diagnostics.AddAttributeError(path.Root("gpus").AtSetValue(types.StringValue(g)), "GPU on another host",
					fmt.Sprintf("%q is bound on host %q, but this VM is on %s. A VM can only use GPUs of its "+
						"own host: set host = %q, or use a kohaku_gpu_binding on this VM's host.", g, host, hostPhrase(cfg.Host.ValueString()), host))
			}
		}
	}
}

// validateDiskChoice checks that the disk names exactly one source, that
// an image id is well formed and on the VM's host, and that the
// overlay-only settings come with an overlay.
func validateDiskChoice(d *vmDiskModel, vmHost types.String, in *specInput, resp *resource.ValidateConfigResponse) {
	if d == nil {
		return
	}
	example := `disk = { image = kohaku_image.debian12.id } or disk = { base_pool = "default", base_volume = ` +
		`"debian-12.qcow2" } for a new overlay on an image, or disk = { pool = "default", volume = ` +
		`"web-1.qcow2" } for an existing volume`
	if d.Image.IsUnknown() || d.BaseVolume.IsUnknown() || d.Volume.IsUnknown() {
		return
	}
	var set []string
	for _, c := range []struct {
		name string
		v    types.String
	}{{"image", d.Image}, {"base_volume", d.BaseVolume}, {"volume", d.Volume}} {
		if !c.v.IsNull() {
			set = append(set, c.name)
		}
	}
	switch {
	case len(set) > 1:
		resp.Diagnostics.AddAttributeError(path.Root("disk").AtName(set[1]), "Conflicting disk sources",
			fmt.Sprintf("disk sets %s: set only one of image or base_volume (the VM gets its own overlay on "+
				"that image) or volume (an existing volume, used as it is). For example: %s.", strings.Join(set, " and "), example))
		return
	case len(set) == 0:
		in.unknownAt("disk.volume") // reported here, better than the domain check would
		resp.Diagnostics.AddAttributeError(path.Root("disk"), "Missing disk source",
			"disk: set image or base_volume (the VM gets its own overlay on that image) or volume (an existing volume, used as it is). For example: "+example+".")
		return
	}
	switch set[0] {
	case "image":
		if !d.BasePool.IsNull() {
			resp.Diagnostics.AddAttributeError(path.Root("disk").AtName("base_pool"), "Setting without base_volume",
				"disk.base_pool names the pool of base_volume; with image, the pool is part of the image's id. Remove base_pool.")
		}
		if vmHost.IsUnknown() {
			return
		}
		if p := imageHostProblem(vmHost.ValueString(), d.Image.ValueString()); p != "" {
			summary := "Image on another host"
			if _, _, _, ok := splitVolumeID(d.Image.ValueString()); !ok {
				summary = "Invalid disk.image"
			}
			in.unknownAt("disk.volume")
			resp.Diagnostics.AddAttributeError(path.Root("disk").AtName("image"), summary, p)
		}
	case "volume":
		for name, v := range map[string]attr.Value{"base_pool": d.BasePool} {
			if !v.IsNull() {
				resp.Diagnostics.AddAttributeError(path.Root("disk").AtName(name), "Setting without an overlay",
					fmt.Sprintf("disk.%s only applies to an overlay on a base image (disk.image or "+
						"disk.base_volume); an existing volume (disk.volume) is used as it is. Remove %s, or "+
						"use image or base_volume instead of volume.", name, name))
			}
		}
	}
}
