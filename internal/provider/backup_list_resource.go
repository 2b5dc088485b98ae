package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/backup"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
)

var _ list.ListResourceWithConfigure = (*backupListResource)(nil)

// backupListResource lists the backups kept on a host, for `terraform
// query` (Terraform 1.14 and later).
type backupListResource struct {
	configuredResource
}

func newBackupListResource() list.ListResource { return &backupListResource{} }

func (l *backupListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_backup"
}

func (l *backupListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = volumeListSchema("Lists the backups kept in a host's storage pools, for `terraform query` " +
		"(Terraform 1.14 or later): each volume with a backup's manifest (`<name>.kohaku-backup`) beside it, " +
		"whichever configuration's kohaku_backup made it, with what its manifest records (the snapshot, disk and " +
		"digest). A volume without its manifest, such as a copy cut off before it was verified, is not listed. " +
		"Each result carries the kohaku_backup identity (host, pool and name), so `terraform query " +
		"-generate-config-out=FILE` writes a kohaku_backup block and an import block for each: applying them " +
		"adopts the backups without copying anything (the import reads each volume back against its manifest).")
}

func (l *backupListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	listVolumes(ctx, l.data, req, stream, backupVolumes, false, func(ctx context.Context, c hosts.Host, v hosts.VolumeHead, r *list.ListResult) {
		var host types.String
		r.Diagnostics.Append(r.Identity.GetAttribute(ctx, path.Root("host"), &host)...)
		b, err := backup.Open(ctx, c, v.Pool, v.Name)
		if err != nil {
			addError(&r.Diagnostics, "Reading backup "+v.Pool+"/"+v.Name, err)
			return
		}
		setAttributes(ctx, r.Resource.SetAttribute, backupImported(host.ValueString(), b), &r.Diagnostics)
	})
}
