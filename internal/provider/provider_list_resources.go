package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/provider"
)

var _ provider.ProviderWithListResources = (*kohakuProvider)(nil)

// ListResources are what `terraform query` lists (Terraform 1.14 and
// later); each shares its name and identity with a managed resource.
func (p *kohakuProvider) ListResources(_ context.Context) []func() list.ListResource {
	return []func() list.ListResource{
		newVMListResource,
		newImageListResource,
		newSeedListResource,
		newGPUBindingListResource,
		newPoolListResource,
		newNetworkListResource,
		newSnapshotListResource,
		newBackupListResource,
	}
}
