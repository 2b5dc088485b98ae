package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
)

var (
	_ list.ListResourceWithConfigure = (*snapshotListResource)(nil)
	_ resource.ResourceWithIdentity  = snapshotWithIdentity{}
)

// snapshotIdentity is a kohaku_snapshot's identity: the VM's UUID and the
// snapshot's name, which make its id.
var snapshotIdentity = identitySpec{
	attrs: []identityAttr{
		{"vm_uuid", "The UUID of the VM the snapshot was taken of."},
		{"name", "The snapshot's name."},
	},
	importID: func(v map[string]string) string {
		return hostScopedID(v["host"], v["vm_uuid"]+"/"+v["name"])
	},
}

// snapshotWithIdentity is kohaku_snapshot with its identity, as
// identity_resources.go serves the other resources.
type snapshotWithIdentity struct{ *snapshotResource }

func newSnapshotResourceWithIdentity() resource.Resource {
	r, _ := newSnapshotResource().(*snapshotResource) // TestSnapshotIdentity checks it is not nil
	return snapshotWithIdentity{r}
}

func (snapshotWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	snapshotIdentity.schema(resp)
}

func (r snapshotWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.snapshotResource.Create(ctx, req, resp)
	snapshotIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r snapshotWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.snapshotResource.Read(ctx, req, resp)
	snapshotIdentity.afterRead(ctx, req, resp)
}

func (r snapshotWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.snapshotResource.Update(ctx, req, resp)
	snapshotIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r snapshotWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	snapshotIdentity.importState(ctx, req, resp, r.snapshotResource.ImportState)
}

// snapshotListResource lists the snapshots of a host's VMs for `terraform
// query` (Terraform 1.14 and later).
type snapshotListResource struct {
	data *providerData
}

func newSnapshotListResource() list.ListResource { return &snapshotListResource{} }

type snapshotListModel struct {
	Host types.String `tfsdk:"host"`
	VM   types.String `tfsdk:"vm"`
}

func (l *snapshotListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_snapshot"
}

func (l *snapshotListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Lists the snapshots of a host's VMs, for `terraform query` (Terraform 1.14 or later): for each " +
			"VM whose every disk Kohaku can snapshot, each name with a copy of every one of its disks " +
			"(`<disk volume>.snap-<name>` beside the disk), whether a kohaku_snapshot made it in this " +
			"configuration or another. Each result carries the kohaku_snapshot identity (host, vm_uuid and name), " +
			"so `terraform query -generate-config-out=FILE` writes a kohaku_snapshot block and an import block " +
			"for each: applying them adopts the snapshots without copying anything.",
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:    true,
				Description: "The key of the provider's `hosts` map to list. Default: the provider's own host.",
			},
			"vm": schema.StringAttribute{
				Optional:    true,
				Description: "Only the snapshots of this VM: its domain name or UUID. Default: every VM of the host.",
			},
		},
	}
}

func (l *snapshotListResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	l.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

func (l *snapshotListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var cfg snapshotListModel
	var diags diag.Diagnostics
	diags.Append(req.Config.Get(ctx, &cfg)...)
	c := l.data.client(cfg.Host.ValueString(), &diags)
	if diags.HasError() {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	vms := []string{cfg.VM.ValueString()}
	if cfg.VM.ValueString() == "" {
		doms, err := c.ListDomains(ctx)
		if err != nil {
			addError(&diags, "Listing the domains of "+c.Endpoint().Redacted(), err)
			stream.Results = list.ListResultsStreamDiagnostics(diags)
			return
		}
		vms = vms[:0]
		for _, d := range doms {
			vms = append(vms, d.UUID)
		}
	}
	host := types.StringNull()
	if cfg.Host.ValueString() != "" {
		host = cfg.Host
	}
	stream.Results = func(push func(list.ListResult) bool) {
		sent := int64(0)
		for _, vm := range vms {
			t, names, err := snapshot.List(ctx, c, vm)
			if errors.Is(err, snapshot.ErrNotSnapshottable) {
				continue
			}
			if err != nil {
				var d diag.Diagnostics
				addError(&d, "Listing the snapshots of VM "+vm, err)
				push(list.ListResult{Diagnostics: d})
				return
			}
			for _, name := range names {
				if req.Limit > 0 && sent >= req.Limit {
					return
				}
				if !push(l.result(ctx, c, host, t.VM.Name, t.VM.UUID, name, req)) {
					return
				}
				sent++
			}
		}
	}
}

// result is one snapshot, read as an import of it would be.
func (l *snapshotListResource) result(ctx context.Context, c hosts.Host, host types.String, vmName, uuid, name string, req list.ListRequest) list.ListResult {
	r := req.NewListResult(ctx)
	r.DisplayName = fmt.Sprintf("%s/%s", vmName, name)
	r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("host"), host)...)
	r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("vm_uuid"), uuid)...)
	r.Diagnostics.Append(r.Identity.SetAttribute(ctx, path.Root("name"), name)...)
	if !req.IncludeResource || r.Diagnostics.HasError() {
		return r
	}
	s, err := snapshot.Open(ctx, c, uuid, name)
	if err != nil {
		addError(&r.Diagnostics, "Reading snapshot "+r.DisplayName, err)
		return r
	}
	m := snapshotModel{Host: host, Name: types.StringValue(name)}
	m.set(s)
	for attr, v := range map[string]any{
		"id": m.ID, "host": m.Host, "vm": types.StringValue(uuid), "name": m.Name, "vm_uuid": m.VMUUID,
		"disks": m.Disks, "consistency": m.Consistency, "created_at": types.StringNull(),
	} {
		r.Diagnostics.Append(r.Resource.SetAttribute(ctx, path.Root(attr), v)...)
	}
	return r
}
