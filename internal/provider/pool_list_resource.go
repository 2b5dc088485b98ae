package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/netpool"
)

var _ list.ListResourceWithConfigure = (*poolListResource)(nil)

// poolListResource lists the directory pools of a host, for `terraform
// query` (Terraform 1.14 and later).
type poolListResource struct {
	configuredResource
}

func newPoolListResource() list.ListResource { return &poolListResource{} }

// hostListModel is the configuration of a list over one host.
type hostListModel struct {
	Host       types.String `tfsdk:"host"`
	NamePrefix types.String `tfsdk:"name_prefix"`
}

func hostListSchema(description string) schema.Schema {
	return schema.Schema{
		Description: description,
		Attributes: map[string]schema.Attribute{
			"host": listHostAttribute,
			"name_prefix": schema.StringAttribute{
				Optional:    true,
				Description: "Only those whose name starts with this. Default: every one.",
			},
		},
	}
}

func (l *poolListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pool"
}

func (l *poolListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = hostListSchema("Lists the storage pools of a host that a kohaku_pool can hold (type `dir`), " +
		"started or not, whether a kohaku_pool made them or not (libvirt's `default`, virt-install's, virsh " +
		"pool-define's), for `terraform query` (Terraform 1.14 or later). Pools of other types (LVM, iSCSI, disk) " +
		"are left out: destroying a kohaku_pool deletes its target. Each result carries the kohaku_pool identity " +
		"(host and name), so `terraform query -generate-config-out=FILE` writes a kohaku_pool block and an import " +
		"block for each: applying them adopts the pools as they are, and the next plan is empty. Adoption never " +
		"redefines a pool; a pool found stopped plans a change of `active`, and apply starts it.")
}

func (l *poolListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	listNamed(ctx, l.data, req, stream, "storage pools", func(ctx context.Context, c hosts.Host, prefix string) ([]netpool.Pool, error) {
		return netpool.ListPools(ctx, c, prefix)
	}, func(p netpool.Pool) string { return p.Name }, func(ctx context.Context, p netpool.Pool, r *list.ListResult) {
		var m poolModel
		r.Diagnostics.Append(r.Resource.Get(ctx, &m)...)
		if r.Diagnostics.HasError() {
			return
		}
		setPoolState(&m, p)
		r.Diagnostics.Append(r.Resource.Set(ctx, &m)...)
	})
}

// listNamed streams what read finds on the configured host under the
// configured name prefix, each known by its name on the host: the identity
// (host and name) and, when asked, the state an import by name leaves
// before its first read (id, name and host, every other attribute null) as
// fill completes it from what was read.
func listNamed[T any](ctx context.Context, data *providerData, req list.ListRequest, stream *list.ListResultsStream,
	what string, read func(context.Context, hosts.Host, string) ([]T, error), name func(T) string,
	fill func(context.Context, T, *list.ListResult),
) {
	var cfg hostListModel
	c, diags := listConfig(ctx, data, req, stream, &cfg, &cfg.Host)
	if c == nil {
		return
	}
	items, err := read(ctx, c, cfg.NamePrefix.ValueString())
	if err != nil {
		listFailed(stream, diags, "Listing the "+what+" of "+c.Endpoint().Redacted(), err)
		return
	}
	host := listedHost(cfg.Host)
	stream.Results = func(push func(list.ListResult) bool) {
		for i, it := range items {
			if req.Limit > 0 && int64(i) >= req.Limit {
				return
			}
			n := name(it)
			r := req.NewListResult(ctx)
			r.DisplayName = n
			r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("host"), host)...)
			r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("name"), n)...)
			if req.IncludeResource && !r.Diagnostics.HasError() {
				r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("id"), hostScopedID(host.ValueString(), n))...)
				r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("name"), n)...)
				r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("host"), host)...)
				if !r.Diagnostics.HasError() {
					fill(ctx, it, &r)
				}
			}
			if !push(r) {
				return
			}
		}
	}
}
