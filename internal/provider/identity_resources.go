package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// The resources with their identity. Each embeds the resource, so every
// interface the resource implements (plan modification, validation, state
// upgrades) is served as before, and adds the identity schema and the
// identity derived from state after the resource's own create, read,
// update and import.

var (
	_ resource.ResourceWithIdentity       = vmWithIdentity{}
	_ resource.ResourceWithImportState    = vmWithIdentity{}
	_ resource.ResourceWithModifyPlan     = vmWithIdentity{}
	_ resource.ResourceWithIdentity       = seedWithIdentity{}
	_ resource.ResourceWithIdentity       = imageWithIdentity{}
	_ resource.ResourceWithModifyPlan     = imageWithIdentity{}
	_ resource.ResourceWithIdentity       = gpuBindingWithIdentity{}
	_ resource.ResourceWithIdentity       = mdevWithIdentity{}
	_ resource.ResourceWithModifyPlan     = mdevWithIdentity{}
	_ resource.ResourceWithIdentity       = poolWithIdentity{}
	_ resource.ResourceWithIdentity       = networkWithIdentity{}
	_ resource.ResourceWithValidateConfig = networkWithIdentity{}
)

type vmWithIdentity struct{ *vmResource }

func newVMResourceWithIdentity() resource.Resource {
	r, _ := newVMResource().(*vmResource) // TestIdentityWrappers checks it is not nil
	return vmWithIdentity{r}
}

// Metadata marks the VM's identity mutable: a move changes its host.
func (r vmWithIdentity) Metadata(ctx context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	r.vmResource.Metadata(ctx, req, resp)
	resp.ResourceBehavior.MutableIdentity = true
}

func (vmWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	vmIdentity.schema(resp)
}

func (r vmWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.vmResource.Create(ctx, req, resp)
	vmIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r vmWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.vmResource.Read(ctx, req, resp)
	vmIdentity.afterRead(ctx, req, resp)
}

func (r vmWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.vmResource.Update(ctx, req, resp)
	vmIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r vmWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	vmIdentity.importState(ctx, req, resp, r.vmResource.ImportState)
}

type seedWithIdentity struct{ *seedResource }

func newSeedResourceWithIdentity() resource.Resource {
	r, _ := newSeedResource().(*seedResource) // TestIdentityWrappers checks it is not nil
	return seedWithIdentity{r}
}

func (seedWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	volumeIdentity.schema(resp)
}

func (r seedWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.seedResource.Create(ctx, req, resp)
	volumeIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r seedWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.seedResource.Read(ctx, req, resp)
	volumeIdentity.afterRead(ctx, req, resp)
}

func (r seedWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.seedResource.Update(ctx, req, resp)
	volumeIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r seedWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	volumeIdentity.importState(ctx, req, resp, r.seedResource.ImportState)
}

type imageWithIdentity struct{ *imageResource }

func newImageResourceWithIdentity() resource.Resource {
	r, _ := newImageResource().(*imageResource) // TestIdentityWrappers checks it is not nil
	return imageWithIdentity{r}
}

func (imageWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	volumeIdentity.schema(resp)
}

func (r imageWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.imageResource.Create(ctx, req, resp)
	volumeIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r imageWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.imageResource.Read(ctx, req, resp)
	volumeIdentity.afterRead(ctx, req, resp)
}

func (r imageWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.imageResource.Update(ctx, req, resp)
	volumeIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r imageWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	volumeIdentity.importState(ctx, req, resp, r.imageResource.ImportState)
}

type gpuBindingWithIdentity struct{ *gpuBindingResource }

func newGPUBindingResourceWithIdentity() resource.Resource {
	r, _ := newGPUBindingResource().(*gpuBindingResource) // TestIdentityWrappers checks it is not nil
	return gpuBindingWithIdentity{r}
}

func (gpuBindingWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	gpuBindingIdentity.schema(resp)
}

func (r gpuBindingWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.gpuBindingResource.Create(ctx, req, resp)
	gpuBindingIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r gpuBindingWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.gpuBindingResource.Read(ctx, req, resp)
	gpuBindingIdentity.afterRead(ctx, req, resp)
}

func (r gpuBindingWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.gpuBindingResource.Update(ctx, req, resp)
	gpuBindingIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r gpuBindingWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	gpuBindingIdentity.importState(ctx, req, resp, r.gpuBindingResource.ImportState)
}

type mdevWithIdentity struct{ *mdevResource }

func newMdevResourceWithIdentity() resource.Resource {
	r, _ := newMdevResource().(*mdevResource) // TestIdentityWrappers checks it is not nil
	return mdevWithIdentity{r}
}

func (mdevWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	mdevIdentity.schema(resp)
}

func (r mdevWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.mdevResource.Create(ctx, req, resp)
	mdevIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r mdevWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.mdevResource.Read(ctx, req, resp)
	mdevIdentity.afterRead(ctx, req, resp)
}

func (r mdevWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.mdevResource.Update(ctx, req, resp)
	mdevIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r mdevWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	mdevIdentity.importState(ctx, req, resp, r.mdevResource.ImportState)
}

type poolWithIdentity struct{ *poolResource }

func newPoolResourceWithIdentity() resource.Resource {
	r, _ := newPoolResource().(*poolResource) // TestIdentityWrappers checks it is not nil
	return poolWithIdentity{r}
}

func (poolWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	poolIdentity.schema(resp)
}

func (r poolWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.poolResource.Create(ctx, req, resp)
	poolIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r poolWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.poolResource.Read(ctx, req, resp)
	poolIdentity.afterRead(ctx, req, resp)
}

func (r poolWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.poolResource.Update(ctx, req, resp)
	poolIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r poolWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	poolIdentity.importState(ctx, req, resp, r.poolResource.ImportState)
}

type networkWithIdentity struct{ *networkResource }

func newNetworkResourceWithIdentity() resource.Resource {
	r, _ := newNetworkResource().(*networkResource) // TestIdentityWrappers checks it is not nil
	return networkWithIdentity{r}
}

func (networkWithIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	networkIdentity.schema(resp)
}

func (r networkWithIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.networkResource.Create(ctx, req, resp)
	networkIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r networkWithIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	r.networkResource.Read(ctx, req, resp)
	networkIdentity.afterRead(ctx, req, resp)
}

func (r networkWithIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.networkResource.Update(ctx, req, resp)
	networkIdentity.fromState(ctx, resp.State, resp.Identity, &resp.Diagnostics)
}

func (r networkWithIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	networkIdentity.importState(ctx, req, resp, r.networkResource.ImportState)
}
