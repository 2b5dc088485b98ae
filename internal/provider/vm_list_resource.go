package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

var _ list.ListResourceWithConfigure = (*vmListResource)(nil)

// vmListResource lists a host's domains for `terraform query` (Terraform
// 1.14 and later), each with the kohaku_vm identity and, when asked, the
// state an import of it would read.
type vmListResource struct {
	configuredResource
}

func newVMListResource() list.ListResource { return &vmListResource{} }

type vmListModel struct {
	Host         types.String `tfsdk:"host"`
	NamePrefix   types.String `tfsdk:"name_prefix"`
	Running      types.Bool   `tfsdk:"running"`
	MadeByKohaku types.Bool   `tfsdk:"made_by_kohaku"`
}

func (l *vmListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vm"
}

func (l *vmListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Lists the libvirt domains of a host, whether Kohaku made them or not, for `terraform query` " +
			"(Terraform 1.14 or later). Each result carries the kohaku_vm identity (host and UUID), so " +
			"`terraform query -generate-config-out=FILE` writes a kohaku_vm block and an import block for " +
			"each: applying them adopts the domains without replacing them.",
		Attributes: map[string]schema.Attribute{
			"host": listHostAttribute,
			"name_prefix": schema.StringAttribute{
				Optional:    true,
				Description: "Only domains whose name starts with this. Default: every domain.",
			},
			"running": schema.BoolAttribute{
				Optional:    true,
				Description: "`true`: only domains that run (or are paused); `false`: only domains that are off. Default: both.",
			},
			"made_by_kohaku": schema.BoolAttribute{
				Optional: true,
				Description: "`true`: only domains a kohaku_vm defined (they carry Kohaku's metadata element); " +
					"`false`: only domains made otherwise (virsh, virt-manager, another tool). Default: both.",
			},
		},
	}
}

func (l *vmListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var cfg vmListModel
	c, diags := listConfig(ctx, l.data, req, stream, &cfg, &cfg.Host)
	if c == nil {
		return
	}
	doms, err := c.ListDomains(ctx)
	if err != nil {
		listFailed(stream, diags, "Listing the domains of "+c.Endpoint().Redacted(), err)
		return
	}
	stream.Results = func(push func(list.ListResult) bool) {
		sent := int64(0)
		for _, d := range doms {
			if req.Limit > 0 && sent >= req.Limit {
				return
			}
			if !strings.HasPrefix(d.Name, cfg.NamePrefix.ValueString()) ||
				(!cfg.Running.IsNull() && cfg.Running.ValueBool() != d.Active) {
				continue
			}
			result, keep := l.result(ctx, c, cfg, d, req)
			if !keep {
				continue
			}
			sent++
			if !push(result) {
				return
			}
		}
	}
}

// result reads one domain as an import of it would, and says whether the
// made_by_kohaku filter keeps it.
func (l *vmListResource) result(ctx context.Context, c hosts.Host, cfg vmListModel, d hosts.DomainSummary, req list.ListRequest) (list.ListResult, bool) {
	r := req.NewListResult(ctx)
	r.DisplayName = d.Name
	host := listedHost(cfg.Host)
	r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("host"), host)...)
	r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("uuid"), d.UUID)...)
	if cfg.MadeByKohaku.IsNull() && !req.IncludeResource {
		return r, true
	}
	view, err := vmlife.Read(ctx, c, d.DomainRef, nil, true)
	if err != nil {
		addError(&r.Diagnostics, "Reading domain "+d.Name, err)
		return r, true
	}
	if !cfg.MadeByKohaku.IsNull() && cfg.MadeByKohaku.ValueBool() != (view.Observed.Metadata != nil) {
		return r, false
	}
	if req.IncludeResource {
		// What an import by UUID leaves in state before its first read,
		// every other attribute null, then the read.
		r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("id"), d.UUID)...)
		r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("uuid"), d.UUID)...)
		r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root("host"), host)...)
		var prior, m vmModel
		r.Diagnostics.Append(r.Resource.Get(ctx, &prior)...)
		if r.Diagnostics.HasError() {
			return r, true
		}
		m.fromDomain(ctx, view, &prior, &r.Diagnostics)
		m.asGeneratedConfig(ctx, &r.Diagnostics)
		r.Diagnostics.Append(r.Resource.Set(ctx, &m)...)
	}
	return r, true
}

// asGeneratedConfig leaves out of a listed VM what the block `terraform
// query -generate-config-out` writes from it must not set, though an import
// reads it into state: base_pool of a disk that is no overlay, and keep of
// a data disk read as an existing volume (state holds their defaults, which
// the validators refuse in configuration beside volume). The import's plan
// then finds the same values from the schema's defaults, and plans no
// change.
func (m *vmModel) asGeneratedConfig(ctx context.Context, diags *diag.Diagnostics) {
	if disks := m.dataDisks(ctx, diags); len(disks) > 0 {
		for i := range disks {
			if !disks[i].Volume.IsNull() {
				disks[i].Keep = types.BoolNull()
			}
		}
		v, dd := types.ListValueFrom(ctx, types.ObjectType{AttrTypes: vmDataDiskAttrTypes}, disks)
		diags.Append(dd...)
		m.DataDisks = v
	}
	if m.Disk.IsNull() || m.Disk.IsUnknown() {
		return
	}
	d := m.disk(ctx, diags)
	if d == nil || d.overlay() {
		return
	}
	d.BasePool = types.StringNull()
	v, dd := types.ObjectValueFrom(ctx, vmDiskAttrTypes, d)
	diags.Append(dd...)
	m.Disk = v
}
