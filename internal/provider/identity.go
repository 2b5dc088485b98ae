package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// identitySpec is a resource's identity (Terraform 1.12 and later): string
// attributes that are also attributes of its state, of which the first is
// always host, and the import ID they make. Identity is derived from the
// state after every create, read, update and import, so it never disagrees
// with what the resource's own CRUD wrote.
type identitySpec struct {
	// attrs are the identity's attributes, each a state attribute of the
	// same name; host is implied first.
	attrs []identityAttr
	// importID is the import ID the resource's ImportState accepts, from the
	// identity's values (host is "" for the provider's default host).
	importID func(v map[string]string) string
}

type identityAttr struct {
	name        string
	description string
}

const identityHostDescription = "The key of the provider's `hosts` map the resource lives on; null for the provider's default host."

func (s identitySpec) schema(resp *resource.IdentitySchemaResponse) {
	attrs := map[string]identityschema.Attribute{
		"host": identityschema.StringAttribute{OptionalForImport: true, Description: identityHostDescription},
	}
	for _, a := range s.attrs {
		attrs[a.name] = identityschema.StringAttribute{RequiredForImport: true, Description: a.description}
	}
	resp.IdentitySchema = identityschema.Schema{Attributes: attrs}
}

func (s identitySpec) names() []string {
	names := []string{"host"}
	for _, a := range s.attrs {
		names = append(names, a.name)
	}
	return names
}

// fromState sets identity from state; the host is null for the default
// host whether state holds null or "". A null state leaves identity as it
// is.
func (s identitySpec) fromState(ctx context.Context, state tfsdk.State, identity *tfsdk.ResourceIdentity, diags *diag.Diagnostics) {
	if identity == nil || state.Raw.IsNull() {
		return
	}
	for _, name := range s.names() {
		var v types.String
		diags.Append(state.GetAttribute(ctx, path.Root(name), &v)...)
		if v.ValueString() == "" {
			v = types.StringNull()
		}
		diags.Append(identity.SetAttribute(ctx, path.Root(name), v)...)
	}
}

// afterRead sets identity from the state Read leaves, or, when Read removed
// the resource (it is gone from the host), from the state before: the
// framework wants an identity after every read, and a CLI that keeps none
// (before Terraform 1.12, OpenTofu) sends none to keep.
func (s identitySpec) afterRead(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if resp.State.Raw.IsNull() {
		s.fromState(ctx, req.State, resp.Identity, &resp.Diagnostics)
		return
	}
	s.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

// values reads the identity's attributes; a required one that is empty is
// an error on its own attribute.
func (s identitySpec) values(ctx context.Context, identity *tfsdk.ResourceIdentity, diags *diag.Diagnostics) map[string]string {
	v := map[string]string{}
	for _, name := range s.names() {
		var val types.String
		diags.Append(identity.GetAttribute(ctx, path.Root(name), &val)...)
		v[name] = val.ValueString()
		if name != "host" && v[name] == "" {
			diags.AddAttributeError(path.Root(name), "Missing identity attribute",
				fmt.Sprintf("Importing by identity needs %s; give every one of %s.", name, strings.Join(s.names()[1:], ", ")))
		}
	}
	return v
}

// importState imports by ID, or by identity (an import block's identity)
// through the import ID the identity makes, then sets the identity.
func (s identitySpec) importState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse,
	inner func(context.Context, resource.ImportStateRequest, *resource.ImportStateResponse),
) {
	if req.ID == "" && req.Identity != nil && !req.Identity.Raw.IsNull() {
		v := s.values(ctx, req.Identity, &resp.Diagnostics)
		if resp.Diagnostics.HasError() {
			return
		}
		req.ID = s.importID(v)
	}
	inner(ctx, req, resp)
	if !resp.Diagnostics.HasError() {
		s.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
	}
}

var (
	vmIdentity = identitySpec{
		attrs: []identityAttr{{"uuid", "The libvirt domain's UUID."}},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["uuid"])
		},
	}
	volumeIdentity = identitySpec{
		attrs: []identityAttr{
			{"pool", "The libvirt storage pool that holds the volume."},
			{"name", "The volume's name in its pool."},
		},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["pool"]+"/"+v["name"])
		},
	}
	mdevIdentity = identitySpec{
		attrs: []identityAttr{{"uuid", "The mediated device's UUID, in lower case."}},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["uuid"])
		},
	}
	gpuBindingIdentity = identitySpec{
		attrs: []identityAttr{{"address", "The bound PCI function's address, DDDD:BB:SS.F."}},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["address"])
		},
	}
	gpuSRIOVIdentity = identitySpec{
		attrs: []identityAttr{{"gpu", "The GPU's (physical function's) PCI address, DDDD:BB:SS.F."}},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["gpu"])
		},
	}
	vgpuIdentity = identitySpec{
		attrs: []identityAttr{
			{"gpu", "The GPU's (physical function's) PCI address, DDDD:BB:SS.F."},
			{"address", "The VF's PCI address, DDDD:BB:SS.F."},
		},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["gpu"]+"/"+v["address"])
		},
	}
	poolIdentity = identitySpec{
		attrs: []identityAttr{{"name", "The storage pool's name on the host."}},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["name"])
		},
	}
	networkIdentity = identitySpec{
		attrs: []identityAttr{{"name", "The network's name on the host."}},
		importID: func(v map[string]string) string {
			return hostScopedID(v["host"], v["name"])
		},
	}
)
