package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
)

// providerDataFrom unpacks what Configure stored; nil means the provider is
// not configured yet (validate, or early plan), which callers must tolerate.
func providerDataFrom(data any, diags *diag.Diagnostics) *providerData {
	if data == nil {
		return nil
	}
	pd, ok := data.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("Expected *providerData, got %T. This is a bug in the provider; please report it.", data))
		return nil
	}
	return pd
}

// client picks the connection for a resource's host argument.
func (pd *providerData) client(host string, diags *diag.Diagnostics) hosts.Host {
	if pd == nil {
		diags.AddError("Provider not configured", "The kohaku provider was not configured before use. This is a bug in the provider; please report it.")
		return nil
	}
	c, err := pd.fleet.Host(host)
	if err != nil {
		diags.AddError("Unknown host", err.Error())
		return nil
	}
	return c
}

// open is how a CRUD method that talks to its host starts, once its model
// is read: the operation's deadline from its timeouts block (timeout, with
// the diagnostics of reading it) and the connection for its host
// argument. c is nil after a diagnostic; cancel is always safe to defer.
func (pd *providerData) open(ctx context.Context, host string, timeout time.Duration, d diag.Diagnostics, diags *diag.Diagnostics) (_ context.Context, cancel context.CancelFunc, c hosts.Host) {
	diags.Append(d...)
	if diags.HasError() {
		return ctx, func() {}, nil
	}
	ctx, cancel = context.WithTimeout(ctx, timeout)
	return ctx, cancel, pd.client(host, diags)
}

// openCreate is how a Create starts: the plan read into m (host and t
// point into m at its host and timeouts), and the connection for its host
// within the create timeout (def when the configuration sets none). c is
// nil after a diagnostic; cancel is always safe to defer.
func (pd *providerData) openCreate(ctx context.Context, req resource.CreateRequest, m any, host *types.String, t *timeouts.Value, def time.Duration, diags *diag.Diagnostics) (_ context.Context, cancel context.CancelFunc, c hosts.Host) {
	return pd.openFrom(ctx, req.Plan, m, host, func() (time.Duration, diag.Diagnostics) { return t.Create(ctx, def) }, diags)
}

// openDelete is openCreate for a Delete: the state, the delete timeout.
func (pd *providerData) openDelete(ctx context.Context, req resource.DeleteRequest, m any, host *types.String, t *timeouts.Value, def time.Duration, diags *diag.Diagnostics) (_ context.Context, cancel context.CancelFunc, c hosts.Host) {
	return pd.openFrom(ctx, req.State, m, host, func() (time.Duration, diag.Diagnostics) { return t.Delete(ctx, def) }, diags)
}

// openFrom reads m from a plan or state, then opens its host within the
// timeout limit reads from m.
func (pd *providerData) openFrom(ctx context.Context, from modelGetter, m any, host *types.String, limit func() (time.Duration, diag.Diagnostics), diags *diag.Diagnostics) (context.Context, context.CancelFunc, hosts.Host) {
	diags.Append(from.Get(ctx, m)...)
	if diags.HasError() {
		return ctx, func() {}, nil
	}
	timeout, d := limit()
	return pd.open(ctx, host.ValueString(), timeout, d, diags)
}

// createPlan reads the plan of a create into m, for a ModifyPlan's look at
// the host before anything is made: false when there is nothing to look at
// (a destroy, an update, a provider not configured yet) or after a
// diagnostic.
func (pd *providerData) createPlan(ctx context.Context, req resource.ModifyPlanRequest, m any, diags *diag.Diagnostics) bool {
	if req.Plan.Raw.IsNull() || !req.State.Raw.IsNull() || pd == nil {
		return false
	}
	diags.Append(req.Plan.Get(ctx, m)...)
	return !diags.HasError()
}

// updateTimeouts is the Update of a resource whose every attribute but its
// timeouts replaces it: the state as it was, with the planned timeouts.
func updateTimeouts(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var t timeouts.Value
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("timeouts"), &t)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.State.Raw = req.State.Raw.Copy()
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("timeouts"), t)...)
}

// fixedString is a computed attribute set when the resource is made, or
// read back, and kept from state in later plans.
func fixedString(description string) schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: description,
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

// fixedInt64 is fixedString for a number.
func fixedInt64(description string) schema.Int64Attribute {
	return schema.Int64Attribute{Computed: true, Description: description,
		PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()}}
}

// modelGetter is a request's plan, state or configuration.
type modelGetter interface {
	Get(ctx context.Context, target any) diag.Diagnostics
}

// modelClient is how a CRUD method, a data source's Read or an action
// starts when it needs only its model and its host: it reads m from a
// request's plan, state or configuration and connects to the host m names
// (host points into m); nil after a diagnostic.
func (pd *providerData) modelClient(ctx context.Context, from modelGetter, m any, host *types.String, diags *diag.Diagnostics) hosts.Host {
	diags.Append(from.Get(ctx, m)...)
	if diags.HasError() {
		return nil
	}
	return pd.client(host.ValueString(), diags)
}

// validatedDuration is an optional duration attribute that its validator
// has checked, or def when it is null.
func validatedDuration(v types.String, def time.Duration) time.Duration {
	if v.IsNull() {
		return def
	}
	d, _ := time.ParseDuration(v.ValueString()) // validated
	return d
}

// addError turns an error from the packages below into a diagnostic whose
// summary says what failed and whose detail says what to do. Each note
// (what was kept, what happens next) follows the error as a paragraph.
func addError(diags *diag.Diagnostics, summary string, err error, notes ...string) {
	detail := err.Error()
	for _, n := range notes {
		detail += "\n\n" + n
	}
	if host, ok := hosts.Unreachable(err); ok {
		diags.AddError("Cannot use libvirt host "+host, fmt.Sprintf("%s failed: %s", summary, detail))
		return
	}
	diags.AddError(summary, detail)
}

// attributes joins a schema's attributes, written in parts (one function a
// group of attributes, so no schema function needs scrolling), into one
// map. A name in two parts is a bug, and panics at the first Schema call,
// which every unit test makes.
func attributes(parts ...map[string]schema.Attribute) map[string]schema.Attribute {
	all := map[string]schema.Attribute{}
	for _, p := range parts {
		for name, a := range p {
			if _, ok := all[name]; ok {
				panic("schema attribute " + name + " is defined twice")
			}
			all[name] = a
		}
	}
	return all
}

// hostScopedID is id, prefixed by the host key when set.
func hostScopedID(host, id string) string {
	if host == "" {
		return id
	}
	return host + "/" + id
}

// importHostScoped sets an import's state from its parsed ID: id, the
// attribute attr that names the object on its host (key), and host when
// the object is on a host of the hosts map.
func importHostScoped(ctx context.Context, resp *resource.ImportStateResponse, attr, host, key string) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), hostScopedID(host, key))...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(attr), key)...)
	if host != "" {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("host"), host)...)
	}
}

// foundOnHost is Read's check of what it read from the host: false after
// the read failed (an error naming what and key) or found nothing (a
// warning, and the resource removed from state so that the next apply
// creates it again).
func foundOnHost(ctx context.Context, resp *resource.ReadResponse, what, key string, found bool, err error) bool {
	if err != nil {
		addError(&resp.Diagnostics, "Reading "+what+" "+key, err)
		return false
	}
	if !found {
		resp.Diagnostics.AddWarning(strings.ToUpper(what[:1])+what[1:]+" "+key+" is gone",
			"The host no longer has it, so it was removed from state; the next apply creates it again.")
		resp.State.RemoveResource(ctx)
		return false
	}
	return true
}

// configuredResource, configuredDataSource and configuredAction hold what
// the provider's Configure made, for the resources (and list resources),
// data sources and actions that embed them: their Configure is the same
// unpacking everywhere.
type configuredResource struct{ data *providerData }

func (c *configuredResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

type configuredDataSource struct{ data *providerData }

func (c *configuredDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

type configuredAction struct{ data *providerData }

func (c *configuredAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	c.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}
