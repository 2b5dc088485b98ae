package provider

import (
	"context"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/backup"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
	"github.com/kohaku/terraform-provider-kohaku/internal/volkind"
)

// The list resources of kohaku_image and kohaku_seed share their
// configuration and their walk over a host's pools; they differ in the
// kind of volume they keep and in the state an import of one reads.

type volumeListModel struct {
	Host       types.String `tfsdk:"host"`
	Pool       types.String `tfsdk:"pool"`
	NamePrefix types.String `tfsdk:"name_prefix"`
}

// volumeListSchema is the configuration of a volume list; what says what is
// listed and how it is recognised.
func volumeListSchema(what string) schema.Schema {
	return schema.Schema{
		Description: what,
		Attributes: map[string]schema.Attribute{
			"host": listHostAttribute,
			"pool": schema.StringAttribute{
				Optional:    true,
				Description: "Only volumes of this storage pool. Default: every active pool of the host.",
			},
			"name_prefix": schema.StringAttribute{
				Optional:    true,
				Description: "Only volumes whose name starts with this. Default: every volume.",
			},
		},
	}
}

// volumeResult fills a list result with the volume's identity and, when
// asked, its state.
type volumeResult func(ctx context.Context, c hosts.Host, v hosts.VolumeHead, r *list.ListResult)

// backupVolumes is the kind of volume listVolumes keeps for kohaku_backup:
// a volume with a backup's manifest beside it, whatever its first bytes.
// Every other kind leaves backups and their manifests out.
const backupVolumes volkind.Kind = -1

// listVolumes streams the volumes of the configured pools that hold kind,
// as recognised from their first bytes (backups: by their manifests). With
// skipDisks, volumes a domain has as a writable disk are left out: they
// are that VM's.
func listVolumes(ctx context.Context, data *providerData, req list.ListRequest, stream *list.ListResultsStream, kind volkind.Kind, skipDisks bool, fill volumeResult) {
	var cfg volumeListModel
	c, diags := listConfig(ctx, data, req, stream, &cfg, &cfg.Host)
	if c == nil {
		return
	}
	pools := []string{cfg.Pool.ValueString()}
	if cfg.Pool.ValueString() == "" {
		var err error
		if pools, err = c.ActivePoolNames(ctx); err != nil {
			listFailed(stream, diags, "Listing the storage pools of "+c.Endpoint().Redacted(), err)
			return
		}
	}
	disks := map[string]bool{}
	if skipDisks {
		uses, err := c.WritableDisks(ctx)
		if err != nil {
			listFailed(stream, diags, "Listing the disks of the domains of "+c.Endpoint().Redacted(), err)
			return
		}
		for _, u := range uses {
			disks["path "+u.Path] = u.Path != ""
			disks["volume "+u.Pool+"/"+u.Volume] = u.Volume != ""
		}
	}
	host := listedHost(cfg.Host)
	stream.Results = func(push func(list.ListResult) bool) {
		sent := int64(0)
		for _, pool := range pools {
			vols, err := c.VolumeHeads(ctx, pool, cfg.NamePrefix.ValueString(), volkind.HeadBytes)
			if err != nil {
				var d diag.Diagnostics
				addError(&d, "Listing the volumes of pool "+pool+" on "+c.Endpoint().Redacted(), err)
				push(list.ListResult{Diagnostics: d})
				return
			}
			names := make([]string, 0, len(vols))
			for _, v := range vols {
				names = append(names, v.Name)
			}
			backups := backup.Named(names)
			for _, v := range vols {
				if req.Limit > 0 && sent >= req.Limit {
					return
				}
				if _, manifest := backup.IsManifest(v.Name); manifest || slices.Contains(backups, v.Name) != (kind == backupVolumes) {
					continue
				}
				if kind != backupVolumes && volkind.Recognise(v.Head, v.CapacityBytes).Kind != kind ||
					disks["path "+v.Path] || disks["volume "+v.Pool+"/"+v.Name] {
					continue
				}
				if snapshot.IsCopyVolume(v.Name) { // a kohaku_snapshot's, not an image
					continue
				}
				r := req.NewListResult(ctx)
				r.DisplayName = v.Pool + "/" + v.Name
				r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("host"), host)...)
				r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("pool"), v.Pool)...)
				r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("name"), v.Name)...)
				if req.IncludeResource && !r.Diagnostics.HasError() {
					// What an import by pool and name leaves in state before
					// its first read, every other attribute null, then the read.
					r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("id"), v.Pool+"/"+v.Name)...)
					r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("pool"), v.Pool)...)
					r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("name"), v.Name)...)
					r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("host"), host)...)
					if !r.Diagnostics.HasError() {
						fill(ctx, c, v, &r)
					}
				}
				sent++
				if !push(r) {
					return
				}
			}
		}
	}
}
