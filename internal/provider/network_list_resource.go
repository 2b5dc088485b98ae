package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/netpool"
)

var _ list.ListResourceWithConfigure = (*networkListResource)(nil)

// networkListResource lists the networks of a host, for `terraform query`
// (Terraform 1.14 and later).
type networkListResource struct {
	configuredResource
}

func newNetworkListResource() list.ListResource { return &networkListResource{} }

func (l *networkListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_network"
}

func (l *networkListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = hostListSchema("Lists the networks of a host that a kohaku_network can hold, started or not, " +
		"whether a kohaku_network made them or not (libvirt's `default`, virsh net-define's), for `terraform query` " +
		"(Terraform 1.14 or later). Left out are networks of a mode kohaku_network does not have (`hostdev`, " +
		"`passthrough`, `private`, `vepa`) and ones whose addresses or DHCP it cannot hold (reservations without a " +
		"DHCP range). Each result carries the kohaku_network identity (host and name), so `terraform query " +
		"-generate-config-out=FILE` writes a kohaku_network block and an import block for each: applying them " +
		"adopts the networks as they are, and the next plan is empty. Adoption never redefines a network: what " +
		"kohaku_network does not model (DNS entries, MTU, port groups, a second address range) stays as it is " +
		"through every later change; a network found stopped plans a change of `active`, and apply starts it.")
}

func (l *networkListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	listNamed(ctx, l.data, req, stream, "networks", func(ctx context.Context, c hosts.Host, prefix string) ([]netpool.Network, error) {
		return netpool.ListNetworks(ctx, c, prefix)
	}, func(n netpool.Network) string { return n.Name }, func(ctx context.Context, n netpool.Network, r *list.ListResult) {
		var m networkModel
		r.Diagnostics.Append(r.Resource.Get(ctx, &m)...)
		if r.Diagnostics.HasError() {
			return
		}
		setNetworkState(ctx, &m, n, &r.Diagnostics)
		r.Diagnostics.Append(r.Resource.Set(ctx, &m)...)
	})
}
