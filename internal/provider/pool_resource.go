package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/netpool"
)

var (
	_ resource.ResourceWithConfigure   = (*poolResource)(nil)
	_ resource.ResourceWithImportState = (*poolResource)(nil)
)

func newPoolResource() resource.Resource { return &poolResource{} }

type poolResource struct {
	configuredResource
}

type poolModel struct {
	ID           types.String `tfsdk:"id"`
	Host         types.String `tfsdk:"host"`
	Name         types.String `tfsdk:"name"`
	Path         types.String `tfsdk:"path"`
	Autostart    types.Bool   `tfsdk:"autostart"`
	Active       types.Bool   `tfsdk:"active"`
	ForceDestroy types.Bool   `tfsdk:"force_destroy"`
}

// absPathRegexp matches an absolute path.
var absPathRegexp = regexp.MustCompile(`^/[^\x00]*$`)

// netpoolTimeout bounds each operation on a pool or network.
const netpoolTimeout = 2 * time.Minute

func (r *poolResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pool"
}

func (r *poolResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A libvirt storage pool of type `dir`: a directory on the host whose files are volumes, where " +
			"`kohaku_image`, `kohaku_seed` and `kohaku_vm` keep theirs. Create defines the pool, makes its directory " +
			"when it is missing (an existing directory is used as it is, with what it holds), starts it and marks " +
			"it to start with the host, so a bare host needs no `virsh pool-define`. LVM and other pool types are " +
			"not modelled (importing one is refused). A pool found gone from the host is removed from state and created again by the next " +
			"apply; one found stopped shows as a change of `active`, and apply starts it in place.\n\n" +
			"Destroy refuses a pool that still holds any volume (Kohaku cannot tell its own from someone else's " +
			"once the resources that made them are gone), naming the volumes, unless `force_destroy = true`: then " +
			"every volume in the pool is deleted, the pool stopped, its directory removed (only when it is empty " +
			"afterwards; a directory that still holds files libvirt does not list is kept, with a warning) and " +
			"its definition undefined. A change of `host`, `name` or `path` replaces the pool (and so is refused " +
			"while it holds volumes); `autostart` and `force_destroy` change in place.\n\n" +
			"A pool made without Kohaku (libvirt's `default`, virsh pool-define's) is adopted by an import by name " +
			"(`<host>/<name>` for a host of the `hosts` map) or by identity (`host` and `name`), or through the " +
			"kohaku_pool list resource and `terraform query`; adopting never redefines the pool, so what Kohaku does " +
			"not model (permissions, labels) stays as it is.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The pool's id: its `name`, or `<host>/<name>` when `host` is set.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"host": schema.StringAttribute{
				Optional: true,
				Description: "Key of the provider's `hosts` map whose pool this is; empty means the default " +
					"connection. A change replaces the pool.",
				PlanModifiers: replace,
			},
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "The pool's name on the host, as `base_pool`, `pool` and `virsh pool-list` use it. A change replaces the pool.",
				Validators:    []validator.String{stringvalidator.LengthAtLeast(1), stringvalidator.NoneOfCaseInsensitive(".", "..")},
				PlanModifiers: replace,
			},
			"path": schema.StringAttribute{
				Required: true,
				Description: "The absolute path of the pool's directory on the host, e.g. `/var/lib/libvirt/images/vms`; " +
					"made when missing. A change replaces the pool.",
				Validators: []validator.String{stringvalidator.RegexMatches(absPathRegexp,
					"must be an absolute path on the host, such as /var/lib/libvirt/images/vms")},
				PlanModifiers: replace,
			},
			"autostart": schema.BoolAttribute{
				Optional:    true,
				Computed:    true,
				Default:     booldefault.StaticBool(true),
				Description: "Whether the host starts the pool at boot. Default: `true`. Changes in place.",
			},
			"active": schema.BoolAttribute{
				Computed: true,
				Default:  booldefault.StaticBool(true),
				Description: "Whether the pool is started, as the last refresh found it. Always planned `true`: a pool " +
					"stopped behind Terraform's back shows as a change, and apply starts it again.",
			},
			"force_destroy": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				Description: "Whether destroy may delete the volumes the pool still holds, all of them, whoever made " +
					"them. Default: `false`, which refuses to destroy a pool that is not empty. Kept in state only " +
					"(set it and apply before the destroy); changes in place.",
			},
		},
	}
}

func poolSpec(m poolModel) netpool.PoolSpec {
	return netpool.PoolSpec{Name: m.Name.ValueString(), Path: m.Path.ValueString(), Autostart: m.Autostart.ValueBool()}
}

// setPoolState records what the host has.
func setPoolState(m *poolModel, p netpool.Pool) {
	m.ID = types.StringValue(hostScopedID(m.Host.ValueString(), p.Name))
	m.Name = types.StringValue(p.Name)
	m.Path = types.StringValue(p.Path)
	m.Autostart = types.BoolValue(p.Autostart)
	m.Active = types.BoolValue(p.Active)
	if m.ForceDestroy.IsNull() || m.ForceDestroy.IsUnknown() {
		m.ForceDestroy = types.BoolValue(false) // after import
	}
}

func (r *poolResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.apply(ctx, req.Plan, &resp.State, &resp.Diagnostics, "Creating", netpool.CreatePool)
}

// apply is Create's and Update's one sequence: the plan, the host, the
// lifecycle's operation, the state read back from what it returned.
func (r *poolResource) apply(ctx context.Context, from modelGetter, state stateSetter,
	diags *diag.Diagnostics, verb string, op func(context.Context, netpool.PoolHost, netpool.PoolSpec) (netpool.Pool, error)) {
	var plan poolModel
	h := r.data.modelClient(ctx, from, &plan, &plan.Host, diags)
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, netpoolTimeout)
	defer cancel()
	p, err := op(ctx, h, poolSpec(plan))
	if err != nil {
		addError(diags, verb+" storage pool "+plan.Name.ValueString()+" failed", err)
		return
	}
	setPoolState(&plan, p)
	diags.Append(state.Set(ctx, &plan)...)
}

func (r *poolResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state poolModel
	h := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if h == nil {
		return
	}
	p, err := netpool.ReadPool(ctx, h, state.Name.ValueString())
	if !foundOnHost(ctx, resp, "storage pool", state.Name.ValueString(), p != nil, err) {
		return
	}
	if !p.Modelled() {
		resp.Diagnostics.AddError("Storage pool "+p.Name+" is not a directory pool",
			fmt.Sprintf("It is of type %s; kohaku_pool holds directory pools only, since destroying one removes its target. "+
				"Leave this pool out of the configuration (kohaku_image, kohaku_seed and kohaku_vm can use it by name).", p.Type))
		return
	}
	setPoolState(&state, *p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update starts a pool found stopped and sets autostart; force_destroy
// lives in state only.
func (r *poolResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.apply(ctx, req.Plan, &resp.State, &resp.Diagnostics, "Updating", netpool.UpdatePool)
}

func (r *poolResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state poolModel
	h := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, netpoolTimeout)
	defer cancel()
	name := state.Name.ValueString()
	removed, err := netpool.DeletePool(ctx, h, name, state.ForceDestroy.ValueBool())
	var notEmpty *netpool.NotEmptyError
	switch {
	case errors.As(err, &notEmpty):
		resp.Diagnostics.AddAttributeError(path.Root("force_destroy"), "Storage pool "+name+" is not empty", err.Error())
	case err != nil:
		addError(&resp.Diagnostics, "Removing storage pool "+name+" failed", err)
	case removed.KeptDirectory != "":
		resp.Diagnostics.AddWarning("Storage pool "+name+" removed, its directory kept", removed.KeptDirectory)
	}
}

func (r *poolResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, "storage pool", "default", req, resp)
}

// importByName sets id, name and host from <name> or <host>/<name>.
func importByName(ctx context.Context, what, example string, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, name, ok := parseNameImportID(req.ID)
	if !ok {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q: import a %s by its name on the host, e.g. %s, "+
			"or as <host>/<name> for a host of the provider's hosts map, e.g. gpu2/%s.", req.ID, what, example, example))
		return
	}
	importHostScoped(ctx, resp, "name", host, name)
}

// parseNameImportID splits <name> or <host>/<name>; false when a part is
// empty.
func parseNameImportID(raw string) (host, name string, ok bool) {
	name = raw
	if i := strings.LastIndex(raw, "/"); i >= 0 {
		host, name = raw[:i], raw[i+1:]
		if host == "" {
			return "", "", false
		}
	}
	return host, name, name != ""
}
