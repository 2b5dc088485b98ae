package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// The resources with their identity. identified serves a resource with the
// identity schema and the identity derived from state after the resource's
// own create, read, update and import; every other call goes to the
// resource as it is. A generic type cannot embed its type parameter, so the
// optional interfaces a resource implements (plan modification, validation,
// state upgrades) are served by planned or by the resource's own wrapper
// type below, and TestIdentityWrappers checks that each wrapper implements
// exactly the framework interfaces its resource does.

var (
	_ resource.ResourceWithIdentity         = vmWithIdentity{}
	_ resource.ResourceWithImportState      = vmWithIdentity{}
	_ resource.ResourceWithModifyPlan       = vmWithIdentity{}
	_ resource.ResourceWithValidateConfig   = vmWithIdentity{}
	_ resource.ResourceWithIdentity         = seedWithIdentity{}
	_ resource.ResourceWithModifyPlan       = seedWithIdentity{}
	_ resource.ResourceWithValidateConfig   = seedWithIdentity{}
	_ resource.ResourceWithConfigValidators = seedWithIdentity{}
	_ resource.ResourceWithUpgradeState     = seedWithIdentity{}
	_ resource.ResourceWithIdentity         = planned[*imageResource]{}
	_ resource.ResourceWithModifyPlan       = planned[*imageResource]{}
	_ resource.ResourceWithIdentity         = planned[*gpuBindingResource]{}
	_ resource.ResourceWithModifyPlan       = planned[*gpuBindingResource]{}
	_ resource.ResourceWithIdentity         = planned[*mdevResource]{}
	_ resource.ResourceWithModifyPlan       = planned[*mdevResource]{}
	_ resource.ResourceWithIdentity         = planned[*gpuSRIOVResource]{}
	_ resource.ResourceWithModifyPlan       = planned[*gpuSRIOVResource]{}
	_ resource.ResourceWithIdentity         = planned[*vgpuResource]{}
	_ resource.ResourceWithModifyPlan       = planned[*vgpuResource]{}
	_ resource.ResourceWithIdentity         = identified[*poolResource]{}
	_ resource.ResourceWithIdentity         = planned[*backupResource]{}
	_ resource.ResourceWithModifyPlan       = planned[*backupResource]{}
	_ resource.ResourceWithIdentity         = networkWithIdentity{}
	_ resource.ResourceWithValidateConfig   = networkWithIdentity{}
)

// identifiable is what every resource with an identity implements.
type identifiable interface {
	resource.ResourceWithConfigure
	resource.ResourceWithImportState
}

// identified serves res with the identity spec describes.
type identified[R identifiable] struct {
	res  R
	spec identitySpec
	// mutable marks the identity mutable: the VM's changes its host on a
	// move.
	mutable bool
}

// withIdentity wraps the resource newResource makes.
func withIdentity[R identifiable](newResource func() resource.Resource, spec identitySpec) identified[R] {
	r, _ := newResource().(R) // TestIdentityWrappers checks it is not nil
	return identified[R]{res: r, spec: spec}
}

// unwrap is the resource served, for the tests.
func (r identified[R]) unwrap() resource.Resource { return r.res }

func (r identified[R]) Metadata(ctx context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	r.res.Metadata(ctx, req, resp)
	if r.mutable {
		resp.ResourceBehavior.MutableIdentity = true
	}
}

func (r identified[R]) Schema(ctx context.Context, req resource.SchemaRequest, resp *resource.SchemaResponse) {
	r.res.Schema(ctx, req, resp)
}

func (r identified[R]) Configure(ctx context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.res.Configure(ctx, req, resp)
}

func (r identified[R]) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	r.spec.schema(resp)
}

func (r identified[R]) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.res.Create(ctx, req, resp)
	r.spec.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r identified[R]) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.res.Read(ctx, req, resp)
	r.spec.afterRead(ctx, req, resp)
}

func (r identified[R]) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.res.Update(ctx, req, resp)
	r.spec.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r identified[R]) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	r.res.Delete(ctx, req, resp)
}

func (r identified[R]) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	r.spec.importState(ctx, req, resp, r.res.ImportState)
}

// planned is identified for a resource that modifies its plan.
type planned[R interface {
	identifiable
	resource.ResourceWithModifyPlan
}] struct {
	identified[R]
}

func (r planned[R]) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	r.res.ModifyPlan(ctx, req, resp)
}

type vmWithIdentity struct{ planned[*vmResource] }

func newVMResourceWithIdentity() resource.Resource {
	r := withIdentity[*vmResource](newVMResource, vmIdentity)
	r.mutable = true
	return vmWithIdentity{planned[*vmResource]{r}}
}

func (r vmWithIdentity) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	r.res.ValidateConfig(ctx, req, resp)
}

type seedWithIdentity struct{ planned[*seedResource] }

func newSeedResourceWithIdentity() resource.Resource {
	return seedWithIdentity{planned[*seedResource]{withIdentity[*seedResource](newSeedResource, volumeIdentity)}}
}

func (r seedWithIdentity) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	r.res.ValidateConfig(ctx, req, resp)
}

func (r seedWithIdentity) ConfigValidators(ctx context.Context) []resource.ConfigValidator {
	return r.res.ConfigValidators(ctx)
}

func (r seedWithIdentity) UpgradeState(ctx context.Context) map[int64]resource.StateUpgrader {
	return r.res.UpgradeState(ctx)
}

func newImageResourceWithIdentity() resource.Resource {
	return planned[*imageResource]{withIdentity[*imageResource](newImageResource, volumeIdentity)}
}

func newGPUBindingResourceWithIdentity() resource.Resource {
	return planned[*gpuBindingResource]{withIdentity[*gpuBindingResource](newGPUBindingResource, gpuBindingIdentity)}
}

func newMdevResourceWithIdentity() resource.Resource {
	return planned[*mdevResource]{withIdentity[*mdevResource](newMdevResource, mdevIdentity)}
}

func newGPUSRIOVResourceWithIdentity() resource.Resource {
	return planned[*gpuSRIOVResource]{withIdentity[*gpuSRIOVResource](newGPUSRIOVResource, gpuSRIOVIdentity)}
}

func newVGPUResourceWithIdentity() resource.Resource {
	return planned[*vgpuResource]{withIdentity[*vgpuResource](newVGPUResource, vgpuIdentity)}
}

func newBackupResourceWithIdentity() resource.Resource {
	return planned[*backupResource]{withIdentity[*backupResource](newBackupResource, volumeIdentity)}
}

func newPoolResourceWithIdentity() resource.Resource {
	return withIdentity[*poolResource](newPoolResource, poolIdentity)
}

type networkWithIdentity struct{ identified[*networkResource] }

func newNetworkResourceWithIdentity() resource.Resource {
	return networkWithIdentity{withIdentity[*networkResource](newNetworkResource, networkIdentity)}
}

func (r networkWithIdentity) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	r.res.ValidateConfig(ctx, req, resp)
}
