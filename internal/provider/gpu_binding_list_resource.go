package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var _ list.ListResourceWithConfigure = (*gpuBindingListResource)(nil)

// gpuBindingListResource lists the PCI functions of a host bound to
// vfio-pci, one result per IOMMU group, for `terraform query` (Terraform
// 1.14 and later).
type gpuBindingListResource struct {
	configuredResource
}

func newGPUBindingListResource() list.ListResource { return &gpuBindingListResource{} }

type gpuBindingListModel struct {
	Host types.String `tfsdk:"host"`
}

func (l *gpuBindingListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_gpu_binding"
}

func (l *gpuBindingListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Lists the PCI functions of a host that are bound to vfio-pci, whether a kohaku_gpu_binding " +
			"bound them or another tool (virsh nodedev-detach, driverctl, a boot option), for `terraform query` " +
			"(Terraform 1.14 or later). There is one result per IOMMU group, since one kohaku_gpu_binding holds a " +
			"whole group: it is known by the group's GPU (its first display function), or by its first function " +
			"on vfio-pci when the group has no display function, and its name lists the group's functions on " +
			"vfio-pci. Each result carries the kohaku_gpu_binding identity (host and address), so `terraform query " +
			"-generate-config-out=FILE` writes a kohaku_gpu_binding block and an import block for each: applying " +
			"them adopts the bindings without unbinding anything. The host driver a function had before it was " +
			"bound cannot be read back: destroying an adopted binding lets the kernel choose the driver.",
		Attributes: map[string]schema.Attribute{
			"host": listHostAttribute,
		},
	}
}

func (l *gpuBindingListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var cfg gpuBindingListModel
	c, diags := listConfig(ctx, l.data, req, stream, &cfg, &cfg.Host)
	if c == nil {
		return
	}
	inv, err := newBinder(ctx, c).Inventory(ctx)
	if err != nil {
		listFailed(stream, diags, "Reading the PCI devices of "+c.Endpoint().Redacted(), err)
		return
	}
	host := listedHost(cfg.Host)
	groups := inv.VFIOGroups()
	stream.Results = func(push func(list.ListResult) bool) {
		for i, g := range groups {
			if req.Limit > 0 && int64(i) >= req.Limit {
				return
			}
			if !push(l.result(ctx, inv, host, g, req)) {
				return
			}
		}
	}
}

// result is one bound group, read as an import of its lead would be.
func (l *gpuBindingListResource) result(ctx context.Context, inv *vfio.Inventory, host types.String, g vfio.BoundGroup, req list.ListRequest) list.ListResult {
	r := req.NewListResult(ctx)
	addrs := make([]string, 0, len(g.Bound))
	for _, d := range g.Bound {
		addrs = append(addrs, d.Address.String())
	}
	r.DisplayName = fmt.Sprintf("%s %s (%s)", g.Lead.Address, g.Lead.ClassName(), strings.Join(addrs, ", "))
	r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("host"), host)...)
	r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("address"), g.Lead.Address.String())...)
	if !req.IncludeResource || r.Diagnostics.HasError() {
		return r
	}
	// What an import by address leaves in state before its first read,
	// every other attribute null, then the read.
	r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("id"), bindingID(host.ValueString(), g.Lead.Address))...)
	r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("address"), g.Lead.Address.String())...)
	r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("host"), host)...)
	var m gpuBindingModel
	r.Diagnostics.Append(r.Resource.Get(ctx, &m)...)
	if r.Diagnostics.HasError() {
		return r
	}
	readBinding(ctx, inv, g.Lead.Address, &m, &r.Diagnostics)
	r.Diagnostics.Append(r.Resource.Set(ctx, &m)...)
	return r
}
