package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/volkind"
)

var _ list.ListResourceWithConfigure = (*seedListResource)(nil)

// seedListResource lists the volumes of a host that are cloud-init seeds,
// for `terraform query` (Terraform 1.14 and later).
type seedListResource struct {
	configuredResource
}

func newSeedListResource() list.ListResource { return &seedListResource{} }

func (l *seedListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_seed"
}

func (l *seedListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = volumeListSchema("Lists the volumes of a host's storage pools that are cloud-init seeds, whether " +
		"a kohaku_seed wrote them or another tool (cloud-localds, genisoimage, virt-install), for `terraform query` " +
		"(Terraform 1.14 or later). A volume is recognised by its content, never its name: an ISO 9660 image whose " +
		"volume label is `cidata` (NoCloud) or `config-2` (ConfigDrive), read from the first 64 KiB of the volume. " +
		"Each result carries the kohaku_seed identity (host, pool and name), so `terraform query " +
		"-generate-config-out=FILE` writes a kohaku_seed block and an import block for each: applying them adopts " +
		"the seeds as they are, without writing them again. A seed's inputs (users, network, user data) cannot be " +
		"read back from the ISO; the generated blocks carry what can (format, instance ID and report settings).")
}

func (l *seedListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	listVolumes(ctx, l.data, req, stream, volkind.Seed, false, func(ctx context.Context, c hosts.Host, _ hosts.VolumeHead, r *list.ListResult) {
		var m seedResourceModel
		r.Diagnostics.Append(r.Resource.Get(ctx, &m)...)
		if r.Diagnostics.HasError() {
			return
		}
		if readSeed(ctx, c, &m, &r.Diagnostics) {
			return // removed since it was listed
		}
		r.Diagnostics.Append(r.Resource.Set(ctx, &m)...)
	})
}
