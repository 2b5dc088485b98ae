package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/volkind"
)

var _ list.ListResourceWithConfigure = (*imageListResource)(nil)

// imageListResource lists the volumes of a host that are disk images a
// kohaku_image could hold, for `terraform query` (Terraform 1.14 and
// later).
type imageListResource struct {
	configuredResource
}

func newImageListResource() list.ListResource { return &imageListResource{} }

func (l *imageListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_image"
}

func (l *imageListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = volumeListSchema("Lists the volumes of a host's storage pools that are disk images a kohaku_image " +
		"could hold, whether Kohaku uploaded them or not, for `terraform query` (Terraform 1.14 or later). A volume " +
		"is recognised by its content, never its name: a qcow2 image that stands alone (no backing file, no " +
		"external data file, not encrypted) or a raw disk image with an MBR or GPT partition table. Left out are " +
		"a VM's boot disk (a qcow2 overlay on its base image), any volume a domain has as a writable disk (a " +
		"VM's data disk or boot volume is that VM's, and destroying an image deletes its volume), and seeds. Each result carries the kohaku_image " +
		"identity (host, pool and name), so `terraform query -generate-config-out=FILE` writes a kohaku_image " +
		"block and an import block for each: applying them adopts the volumes without uploading them again. " +
		"The generated blocks have no `source`, which cannot be read back from a volume; set it before a change " +
		"that would replace the image.")
}

func (l *imageListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	listVolumes(ctx, l.data, req, stream, volkind.Image, true, func(ctx context.Context, _ hosts.Host, v hosts.VolumeHead, r *list.ListResult) {
		var m imageResourceModel
		r.Diagnostics.Append(r.Resource.Get(ctx, &m)...)
		if r.Diagnostics.HasError() {
			return
		}
		m.readVolume(&v.VolumeDetail)
		r.Diagnostics.Append(r.Resource.Set(ctx, &m)...)
	})
}
