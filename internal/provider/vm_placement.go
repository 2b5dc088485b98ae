package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/objectvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/kohaku/terraform-provider-kohaku/internal/capacity"
	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

var (
	vmPlacementGPUAttrTypes = map[string]attr.Type{
		"count": types.Int64Type, "model": types.StringType, "model_exact": types.BoolType,
		"vendor_id": types.StringType, "device_id": types.StringType, "min_memory_gib": types.Int64Type,
	}
	vmPlacementAttrTypes = map[string]attr.Type{
		"gpu":        types.ObjectType{AttrTypes: vmPlacementGPUAttrTypes},
		"numa_local": types.BoolType,
		"pin_cpus":   types.BoolType,
		"hosts":      types.ListType{ElemType: types.StringType},
		"policy":     types.StringType,
	}
)

type vmPlacementModel struct {
	GPU       types.Object `tfsdk:"gpu"`
	NUMALocal types.Bool   `tfsdk:"numa_local"`
	PinCPUs   types.Bool   `tfsdk:"pin_cpus"`
	Hosts     types.List   `tfsdk:"hosts"`
	Policy    types.String `tfsdk:"policy"`
}

type vmPlacementGPUModel struct {
	Count        types.Int64  `tfsdk:"count"`
	Model        types.String `tfsdk:"model"`
	ModelExact   types.Bool   `tfsdk:"model_exact"`
	VendorID     types.String `tfsdk:"vendor_id"`
	DeviceID     types.String `tfsdk:"device_id"`
	MinMemoryGiB types.Int64  `tfsdk:"min_memory_gib"`
}

// vmPlacementAttributes are what create chose for a VM with placement.
func vmPlacementAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"placed_gpus": schema.ListAttribute{
			Computed:      true,
			ElementType:   types.StringType,
			Description:   "The PCI addresses of the GPUs `placement` chose on `host`, sorted; known after apply and kept from then on. Null without `placement`.",
			PlanModifiers: []planmodifier.List{placedGPUs{}},
		},
		"pinned_cpus": schema.ListAttribute{
			Computed:    true,
			ElementType: types.Int64Type,
			Description: "The host CPUs vCPU 0, 1, ... are pinned to, one to one (`placement`'s `pin_cpus`), " +
				"read back from the domain; known after apply and kept from then on. Empty when the vCPUs are not pinned.",
			PlanModifiers: []planmodifier.List{placedGPUs{elem: types.Int64Type}},
		},
	}
}

// vmPlacementBlock is the request a VM makes of the fleet instead of
// naming its host and GPUs. It is a block, not a nested attribute, because
// Terraform drops unknown keys of a nested attribute's object silently: a
// selector with a typo in its name would be dropped and the VM take any GPU.
func vmPlacementBlock() schema.Block {
	return schema.SingleNestedBlock{
		Description: "Ask for capacity instead of naming it: create chooses the host (among the provider's " +
			"hosts) and the GPUs, claims the GPUs on their host so that no other apply, from any workspace, " +
			"can take them, binds them to `vfio-pci` as `kohaku_gpu_binding` would, and passes them through " +
			"whole, as `gpus` entries would be. All of that happens before the domain is made; a request " +
			"no host can satisfy fails naming what each host lacks, and a GPU another apply claimed first " +
			"fails naming the VM that holds it, in both cases leaving nothing behind. The choice is " +
			"recorded in `host` and `placed_gpus` and is sticky: later plans never move the VM because " +
			"capacity changed elsewhere. A change of the request (or of `vcpu`, `memory_mib`, `hugepages`) " +
			"keeps the VM where it is when its host and GPUs still satisfy it (changed in place); otherwise " +
			"the plan replaces the VM and a warning says why. A VM replaced for any reason, and a VM that " +
			"named its host and now asks, is placed anew at create. Destroy first resets each GPU's IOMMU group " +
			"through the host's kernel (as the `kohaku_gpu_reset` action does; over `qemu+ssh://` and local " +
			"connections, which reach the kernel), then gives the GPUs back to the host and releases their " +
			"claims. A GPU that cannot be reset (no reset method, or a reset that fails) is quarantined: no VM " +
			"is given it until an operator returns it (the `kohaku_gpu_reset` action, once its reset succeeds), " +
			"and the destroy warns naming it; over tcp and tls the GPUs are given back unreset, with a warning. " +
			"A reset clears the device's memory only where the device does so: see the GPU guide. It is a block of its own, not attributes beside `host`, because it " +
			"states what the VM needs rather than where it is: it cannot be set with `host` or `gpus`; and a " +
			"block, so that a misspelt argument is an error rather than silently ignored. A VM whose disk is " +
			"a `kohaku_image` goes to the image's host. Removing the block leaves the VM to `host` and `gpus` " +
			"as written, which replaces it. An imported VM has no placement.",
		Validators: []validator.Object{
			objectvalidator.ConflictsWith(path.MatchRoot("host"), path.MatchRoot("gpus")),
		},
		Attributes: map[string]schema.Attribute{
			"numa_local": schema.BoolAttribute{
				Optional: true,
				Description: "Put all the GPUs, the vCPUs and the memory (and huge pages) on one NUMA node: a " +
					"host is a candidate only when one node holds it all. Default `false` (the GPUs still " +
					"share a node where one has enough; the VM is bound to its GPUs' nodes as " +
					"`numa_placement` says). A VM without GPUs is bound to the node chosen for it, on a host " +
					"with more than one node (`numa_nodes` says which), and stays on it through updates. " +
					"Refused at plan when no node of any allowed host has that many GPUs.",
			},
			"pin_cpus": schema.BoolAttribute{
				Optional: true,
				Description: "Pin each vCPU to its own host CPU on the VM's NUMA node, one to one, that no " +
					"other VM of the host has pinned, with QEMU's emulator threads on the node's last CPU, " +
					"which no vCPU is pinned to (`pinned_cpus` shows the choice; `data.kohaku_capacity` " +
					"counts them as pinned). Needs `numa_local = true`. A host is a candidate only when the " +
					"node has that many CPUs free; create fails naming what each host is short of. Changing " +
					"it, or `vcpu` while it is set, places the VM anew (a replacement). Default `false`.",
			},
			"hosts": schema.ListAttribute{
				Optional:    true,
				ElementType: types.StringType,
				Description: "The hosts the VM may go to: keys of the provider's `hosts` map, and `\"\"` for its " +
					"default connection (as `data.kohaku_capacity` names them). Default: every host of the provider.",
			},
			"policy": schema.StringAttribute{
				Optional: true,
				Description: "How to choose among hosts that fit. `pack` (default): the host with the fewest " +
					"free matching GPUs, then the least free memory, so hosts fill one at a time and whole " +
					"hosts stay free for large requests. `spread`: the emptiest, so VMs land apart. Ties go " +
					"to the host whose name sorts first and to the lowest PCI addresses. Only a new " +
					"placement uses it: changing it moves no VM.",
				Validators: []validator.String{stringvalidator.OneOf(string(placement.Pack), string(placement.Spread))},
			},
		},
		Blocks: map[string]schema.Block{
			"gpu": schema.SingleNestedBlock{
				Description: "The GPUs the VM asks for, each passed through whole with its IOMMU group. " +
					"Leave it out for a VM without GPUs (it still lands on a host that has its memory and " +
					"vCPUs, packing onto hosts without GPUs first). Only GPUs no VM, claim or host " +
					"process holds are taken (`data.kohaku_capacity` shows the same states).",
				Attributes: map[string]schema.Attribute{
					"count": schema.Int64Attribute{
						Optional:    true,
						Description: "How many GPUs, 1 or more (required in a `gpu` block), all on one host (on one NUMA node where one has them all).",
					},
					"model": schema.StringAttribute{
						Optional: true,
						Description: "Take GPUs whose model name, as the host reports it (`data.kohaku_capacity`), " +
							"contains this, case-insensitively: `\"H100\"` matches `GH100 [H100 SXM5 80GB]`.",
					},
					"model_exact": schema.BoolAttribute{
						Optional:    true,
						Description: "Whether `model` must equal the model name rather than be part of it. Default `false`.",
					},
					"vendor_id": schema.StringAttribute{
						Optional:    true,
						Description: "PCI vendor id, four hex digits as `lspci -nn` shows them, e.g. `\"10de\"` (NVIDIA).",
					},
					"device_id": schema.StringAttribute{
						Optional:    true,
						Description: "PCI device id, four hex digits, e.g. `\"2330\"` (H100 SXM5).",
					},
					"min_memory_gib": schema.Int64Attribute{
						Optional: true,
						Description: "Take GPUs with at least this much memory, in GiB, as the card's largest " +
							"64-bit prefetchable BAR gives it (an upper bound: an H100 80 GB shows 128). Hosts " +
							"reached over `tcp` or `tls` cannot read it, and their GPUs do not match.",
						Validators: []validator.Int64{int64validator.AtLeast(0)},
					},
				},
			},
		},
	}
}

// placementOf reads the placement block; nil when it is null or unknown.
func (m *vmModel) placementOf(ctx context.Context, diags *diag.Diagnostics) *vmPlacementModel {
	if m.Placement.IsNull() || m.Placement.IsUnknown() {
		return nil
	}
	var p vmPlacementModel
	diags.Append(m.Placement.As(ctx, &p, basetypes.ObjectAsOptions{})...)
	return &p
}

// placementRequest is the request the VM makes, nil when it has no
// placement or a value it needs is not known yet (then ok is true: there
// is nothing wrong with it yet). Bad selector values are reported on
// their attribute.
func (m *vmModel) placementRequest(ctx context.Context, diags *diag.Diagnostics) (r *placement.Request, ok bool) {
	p := m.placementOf(ctx, diags)
	if p == nil || diags.HasError() {
		return nil, !diags.HasError()
	}
	for _, v := range []attr.Value{m.Name, m.VCPU, m.MemoryMiB, m.Hugepages, p.GPU, p.NUMALocal, p.Hosts, p.Policy} {
		if v.IsUnknown() {
			return nil, true
		}
	}
	r = &placement.Request{Name: m.Name.ValueString(), NUMALocal: p.NUMALocal.ValueBool(), PinCPUs: p.PinCPUs.ValueBool(),
		VCPUs: vmDefaultVCPU, MemoryMiB: vmDefaultMemoryMiB, Policy: placement.Policy(p.Policy.ValueString())}
	// null in a configuration: the defaults the plan will have
	if !m.VCPU.IsNull() {
		r.VCPUs = int(m.VCPU.ValueInt64())
	}
	if !m.MemoryMiB.IsNull() {
		r.MemoryMiB = m.MemoryMiB.ValueInt64()
	}
	if !m.Hugepages.IsNull() {
		var h vmHugepagesModel
		diags.Append(m.Hugepages.As(ctx, &h, basetypes.ObjectAsOptions{})...)
		r.HugePageKiB = 2 << 10
		if !h.PageSizeMiB.IsNull() {
			r.HugePageKiB = uint64(h.PageSizeMiB.ValueInt64()) << 10
		}
	}
	if !p.Hosts.IsNull() {
		diags.Append(p.Hosts.ElementsAs(ctx, &r.Hosts, false)...)
	}
	if !p.GPU.IsNull() {
		var g vmPlacementGPUModel
		diags.Append(p.GPU.As(ctx, &g, basetypes.ObjectAsOptions{})...)
		for _, v := range []attr.Value{g.Count, g.Model, g.ModelExact, g.VendorID, g.DeviceID, g.MinMemoryGiB} {
			if v.IsUnknown() {
				return nil, true
			}
		}
		if g.Count.IsNull() {
			diags.AddAttributeError(path.Root("placement").AtName("gpu").AtName("count"), "Missing placement.gpu.count",
				"A gpu block asks for count GPUs: set count = 1 or more, or leave the gpu block out for a VM without GPUs.")
			return nil, false
		}
		r.GPU = &placement.GPUAsk{Count: int(g.Count.ValueInt64())}
		kv := map[string]string{}
		for k, v := range map[string]attr.Value{"model": g.Model, "model_exact": g.ModelExact, "vendor_id": g.VendorID,
			"device_id": g.DeviceID, "min_memory_gib": g.MinMemoryGiB} {
			if v.IsNull() {
				continue
			}
			s := selectorValue(v)
			// each key alone first, so a bad value is reported on its line
			if _, err := placement.ParseSelector(map[string]string{k: s}); err != nil {
				diags.AddAttributeError(path.Root("placement").AtName("gpu").AtName(k), "Invalid placement.gpu."+k, err.Error()+".")
				continue
			}
			kv[k] = s
		}
		sel, err := placement.ParseSelector(kv)
		if err != nil {
			diags.AddAttributeError(path.Root("placement").AtName("gpu"), "Invalid placement.gpu", err.Error()+".")
		}
		r.GPU.Selector = sel
	}
	if diags.HasError() {
		return nil, false
	}
	// A VM whose disk is an image goes where the image is.
	if d := m.disk(ctx, diags); d != nil && !d.Image.IsNull() && !d.Image.IsUnknown() {
		if host, _, _, ok := splitVolumeID(d.Image.ValueString()); ok {
			if len(r.Hosts) > 0 && !slices.Contains(r.Hosts, host) {
				diags.AddAttributeError(path.Root("placement").AtName("hosts"), "Invalid placement.hosts: the image is not on an allowed host",
					fmt.Sprintf("The disk's image %q is on %s, which placement.hosts (%s) leaves out: an overlay can only "+
						"be backed by an image of its own host. Add %q to hosts, or use the image of an allowed host.",
						d.Image.ValueString(), hostPhrase(host), strings.Join(r.Hosts, ", "), host))
				return nil, false
			}
			r.Hosts = []string{host}
		}
	}
	return r, true
}

// selectorValue is a selector attribute's value as ParseSelector reads it.
func selectorValue(v attr.Value) string {
	switch v := v.(type) {
	case types.String:
		return v.ValueString()
	case types.Bool:
		return strconv.FormatBool(v.ValueBool())
	case types.Int64:
		return strconv.FormatInt(v.ValueInt64(), 10)
	}
	return v.String()
}

// placementAttrName is the attribute a placement.AttributeError names, as
// the configuration spells it.
func placementAttrName(a string) string {
	switch a {
	case "vcpu", "memory_mib", "hugepages":
		return a
	case "gpu.selector":
		return "placement.gpu"
	}
	return "placement." + a
}

// placementAttrPath is the attribute a placement.AttributeError names.
func placementAttrPath(a string) path.Path {
	switch a {
	case "vcpu", "memory_mib", "hugepages":
		return path.Root(a)
	case "gpu.selector":
		return path.Root("placement").AtName("gpu")
	}
	p := path.Root("placement")
	for _, part := range strings.Split(a, ".") {
		p = p.AtName(part)
	}
	return p
}

// addPlacementError reports a placement failure: an AttributeError on
// its attribute, anything else (no host fits, a GPU someone holds) as an
// error of the operation, followed by after.
func addPlacementError(diags *diag.Diagnostics, summary string, err error, after string) {
	var ae *placement.AttributeError
	if errors.As(err, &ae) {
		if summary == "" {
			summary = "Invalid " + placementAttrName(ae.Attribute)
		}
		diags.AddAttributeError(placementAttrPath(ae.Attribute), summary, strings.TrimSpace(ae.Err.Error()+". "+after))
		return
	}
	var nofit *placement.NoFitError
	var held *claim.ClaimedError
	switch {
	case errors.As(err, &nofit):
		diags.AddAttributeError(path.Root("placement"), summary, err.Error()+"\n\n"+
			strings.TrimSpace(after+" data.kohaku_capacity shows what each host has free."))
	case errors.As(err, &held):
		diags.AddAttributeError(path.Root("placement"), summary, err.Error()+"\n\n"+
			strings.TrimSpace(after+" Another apply took the GPU first; apply again to place the VM on what is left."))
	default:
		addError(diags, summary, err, after)
	}
}

// fleetNames are the hosts a VM may be placed on: the default connection
// ("") and the keys of the hosts map.
func (d *providerData) fleetNames() []string {
	return append([]string{""}, d.fleet.Names()...)
}

// placedHost plans host for a VM with placement: the state's choice once
// made, unknown until create makes it; without placement, the
// configuration's value (null when unset, as before host was computed).
type placedHost struct{}

func (placedHost) Description(context.Context) string {
	return "chosen at create when placement is set, then kept"
}
func (m placedHost) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (placedHost) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if !req.ConfigValue.IsNull() {
		return
	}
	var pl types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("placement"), &pl)...)
	switch {
	case pl.IsNull():
		resp.PlanValue = types.StringNull()
	case !req.StateValue.IsNull() && !req.StateValue.IsUnknown():
		resp.PlanValue = req.StateValue
	default:
		resp.PlanValue = types.StringUnknown()
	}
}

// placedGPUs plans placed_gpus as placedHost plans host.
// placedGPUs plans a placed list (placed_gpus, pinned_cpus) as the state
// has it: chosen at create, then kept (elem: the list's element type;
// nil means strings).
type placedGPUs struct{ elem attr.Type }

func (placedGPUs) Description(context.Context) string {
	return "chosen at create when placement is set, then kept"
}
func (m placedGPUs) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (m placedGPUs) PlanModifyList(ctx context.Context, req planmodifier.ListRequest, resp *planmodifier.ListResponse) {
	elem := m.elem
	if elem == nil {
		elem = types.StringType
	}
	var pl types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("placement"), &pl)...)
	switch {
	case pl.IsNull() && elem == types.StringType:
		resp.PlanValue = types.ListNull(elem)
	case !req.StateValue.IsNull() && !req.StateValue.IsUnknown():
		resp.PlanValue = req.StateValue
	default:
		resp.PlanValue = types.ListUnknown(elem)
	}
}

// placedGPUList is the placed_gpus value of addresses.
func placedGPUList(gpus []vfio.Address) types.List {
	vals := make([]attr.Value, len(gpus))
	for i, a := range slices.SortedFunc(slices.Values(gpus), func(a, b vfio.Address) int { return strings.Compare(a.String(), b.String()) }) {
		vals[i] = types.StringValue(a.String())
	}
	return types.ListValueMust(types.StringType, vals)
}

// placedAddresses reads placed_gpus; addresses that do not parse are left out.
func placedAddresses(l types.List) []vfio.Address {
	var out []vfio.Address
	if l.IsNull() || l.IsUnknown() {
		return nil
	}
	for _, v := range l.Elements() {
		if s, ok := v.(types.String); ok {
			if a, err := vfio.ParseAddress(s.ValueString()); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

// validatePlacement checks the request on its own, before any host is
// read: each problem on its attribute.
func validatePlacement(ctx context.Context, cfg *vmModel, diags *diag.Diagnostics) {
	r, ok := cfg.placementRequest(ctx, diags)
	if !ok || r == nil {
		return
	}
	if err := placement.ValidateRequest(r); err != nil {
		addPlacementError(diags, "", err, "")
	}
	if r.PinCPUs && !r.NUMALocal {
		diags.AddAttributeError(path.Root("placement").AtName("pin_cpus"), "pin_cpus needs numa_local",
			"The vCPUs are pinned one to one on the NUMA node that holds the VM (its GPUs, vCPUs and memory), "+
				"so pin_cpus = true needs numa_local = true in the same placement block.")
	}
}

// planner is the provider process's shared planner over its fleet.
func (d *providerData) planner() *placement.Shared {
	d.placerOnce.Do(func() {
		d.placer = placement.NewShared(drainSource{Source: capacity.ForClients(d.fleet.Host), drain: d.drain}, d.fleetNames(), placement.Pack)
	})
	return d.placer
}

// placedHost is the chosen host's side of a placed VM: its claims and
// the binding of its GPUs, over the host's connection.
// health is the host's GPU health check (nil: none).
func placedOn(ctx context.Context, c hosts.Host, health gpubind.HealthCheck) vmlife.PlacedHost {
	return vmlife.PlacedHost{
		Claims:   &claim.Claimer{Host: c},
		Binder:   gpubind.Placed{Binder: newBinder(ctx, c), Machine: c},
		Resetter: gpubind.GroupResetter{Host: c, Health: health},
	}
}

// planPlacement checks a new VM's request against the fleet (the hosts it
// names exist; some host has the GPUs it asks for at all), and judges a
// placed VM's changed request with placement.Sticky: the VM stays where
// it is unless its host and GPUs no longer satisfy the request.
func (r *vmResource) planPlacement(ctx context.Context, plan, state *vmModel, resp *resource.ModifyPlanResponse) {
	if plan.Placement.IsNull() || r.data == nil {
		return
	}
	req, ok := plan.placementRequest(ctx, &resp.Diagnostics)
	if !ok || req == nil {
		return
	}
	names := r.data.fleetNames()
	for i, h := range req.Hosts {
		if !slices.Contains(names, h) {
			resp.Diagnostics.AddAttributeError(path.Root("placement").AtName("hosts").AtListIndex(i), fmt.Sprintf("Invalid placement.hosts[%d]: unknown host", i),
				fmt.Sprintf("%q is not a host of the provider: use a key of its hosts map (%s), or \"\" for its default connection.",
					h, strings.Join(names[1:], ", ")))
			return
		}
	}
	if r.planDrain(ctx, plan, state, req, resp) {
		return
	}
	if state != nil && state.PlacedGPUs.IsNull() {
		// A VM that named its host (or was imported) and now asks: it is
		// placed anew, as a new VM.
		plan.Host, plan.PlacedGPUs, plan.PinnedCPUs = types.StringUnknown(), types.ListUnknown(types.StringType), types.ListUnknown(types.Int64Type)
		plan.ID, plan.UUID = types.StringUnknown(), types.StringUnknown()
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("placement"))
	}
	if state == nil || state.PlacedGPUs.IsNull() {
		allowed := names
		if len(req.Hosts) > 0 {
			allowed = req.Hosts
		}
		var up []*placement.Host
		for _, h := range r.data.planner().Snapshots(ctx, allowed) {
			if h.Reason == "" {
				up = append(up, h)
			}
		}
		if len(up) == 0 {
			return // none can be read now: create says what each lacks
		}
		if err := placement.ValidateAgainstFleet(req, up); err != nil {
			addPlacementError(&resp.Diagnostics, "", err, "")
		}
		return
	}
	v := judgePlacement(ctx, state, plan, req, func(host string) *placement.Host {
		h := r.data.planner().Snapshots(ctx, []string{host})[0]
		if h.Reason != "" {
			return nil
		}
		return h
	}, &resp.Diagnostics)
	if v == nil || v.Keep {
		return
	}
	plan.Host, plan.PlacedGPUs, plan.PinnedCPUs = types.StringUnknown(), types.ListUnknown(types.StringType), types.ListUnknown(types.Int64Type)
	plan.ID, plan.UUID = types.StringUnknown(), types.StringUnknown()
	resp.RequiresReplace = append(resp.RequiresReplace, path.Root("placement"))
	resp.Diagnostics.AddAttributeWarning(path.Root("placement"), "VM "+plan.Name.ValueString()+" is placed anew",
		fmt.Sprintf("The plan replaces the VM: on %s, %s. Placement is otherwise kept as it was made.", hostPhrase(state.Host.ValueString()), v))
}

// placedNodes are the NUMA nodes a placed NUMA-local VM without GPUs is
// bound to, as its state records them: an update keeps the node the
// placement chose (a VM with GPUs follows its GPUs' nodes instead).
func (m *vmModel) placedNodes(ctx context.Context, diags *diag.Diagnostics) []int {
	p := m.placementOf(ctx, diags)
	if p == nil || !p.NUMALocal.ValueBool() || len(placedAddresses(m.PlacedGPUs)) > 0 || m.NUMANodes.IsNull() || m.NUMANodes.IsUnknown() {
		return nil
	}
	var ids []int64
	diags.Append(m.NUMANodes.ElementsAs(ctx, &ids, false)...)
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

// pinnedCPUs reads pinned_cpus; nil when unknown, null or empty.
func (m *vmModel) pinnedCPUs(ctx context.Context, diags *diag.Diagnostics) []int {
	if m.PinnedCPUs.IsNull() || m.PinnedCPUs.IsUnknown() {
		return nil
	}
	var ids []int64
	diags.Append(m.PinnedCPUs.ElementsAs(ctx, &ids, false)...)
	var out []int
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

// judgePlacement says whether a placed VM stays where it is under the
// plan's request. A request that did not change keeps it without reading
// anything (nil); a changed one is judged against read(host), that host
// alone, as it is now (nil when it cannot be read: then only what the
// state shows is judged).
func judgePlacement(ctx context.Context, state, plan *vmModel, req *placement.Request, read func(host string) *placement.Host, diags *diag.Diagnostics) *placement.Verdict {
	if state.Placement.Equal(plan.Placement) && state.VCPU.Equal(plan.VCPU) && state.MemoryMiB.Equal(plan.MemoryMiB) &&
		state.Hugepages.Equal(plan.Hugepages) {
		return nil
	}
	// Pins are made for a vCPU count and only at create: a change of
	// either is a new placement.
	pins := state.pinnedCPUs(ctx, diags)
	switch {
	case req.PinCPUs != (len(pins) > 0):
		return &placement.Verdict{Reasons: []string{fmt.Sprintf("pin_cpus changes to %t", req.PinCPUs)}}
	case req.PinCPUs && len(pins) != req.VCPUs:
		return &placement.Verdict{Reasons: []string{fmt.Sprintf("its %d vCPUs are pinned one to one and vcpu changes to %d", len(pins), req.VCPUs)}}
	}
	cur := &placement.Placement{Host: state.Host.ValueString(), NUMANode: -1, GPUs: placedAddresses(state.PlacedGPUs),
		MemoryMiB: map[int]int64{}, CPUs: pins}
	var nodes []int64
	if !state.NUMANodes.IsNull() && !state.NUMANodes.IsUnknown() {
		diags.Append(state.NUMANodes.ElementsAs(ctx, &nodes, false)...)
	}
	// What the VM has now counts as its own: its memory on its nodes
	// (split evenly, as numa_placement binds it), or the host's node 0.
	if len(nodes) == 0 {
		nodes = []int64{0}
	}
	if len(nodes) == 1 {
		cur.NUMANode = int(nodes[0])
	}
	for _, n := range nodes {
		cur.MemoryMiB[int(n)] += state.MemoryMiB.ValueInt64() / int64(len(nodes))
	}
	if sp := state.placementOf(ctx, diags); sp != nil && !state.Hugepages.IsNull() {
		if sr, ok := state.placementRequest(ctx, diags); ok && sr != nil {
			cur.HugePageKiB = sr.HugePageKiB
		}
	}
	v := placement.Sticky(cur, req, read(cur.Host))
	return &v
}

// privatePlacedMoved is the private-state key under which create records,
// for each placed GPU, the functions it moved to vfio-pci: what destroy
// gives back (functions that were on vfio-pci before stay there).
const privatePlacedMoved = "placed_moved"

func placedMovedRecord(moved map[vfio.Address][]vfio.Address) []byte {
	rec := map[string][]string{}
	for g, fns := range moved {
		for _, f := range fns {
			rec[g.String()] = append(rec[g.String()], f.String())
		}
	}
	b, _ := json.Marshal(rec)
	return b
}

// placedMovedFrom reads the record. Without one (lost with the private
// state) each placed GPU's own function is given back, the rest of its
// group left on vfio-pci.
func placedMovedFrom(b []byte, gpus []vfio.Address) map[vfio.Address][]vfio.Address {
	out := map[vfio.Address][]vfio.Address{}
	rec := map[string][]string{}
	if len(b) == 0 || json.Unmarshal(b, &rec) != nil {
		for _, g := range gpus {
			out[g] = []vfio.Address{g}
		}
		return out
	}
	for _, g := range gpus {
		for _, f := range rec[g.String()] {
			if a, err := vfio.ParseAddress(f); err == nil {
				out[g] = append(out[g], a)
			}
		}
	}
	return out
}

// gpuEntries are the gpus entries the domain passes through: gpus as
// configured and the GPUs placement chose.
func (m *vmModel) gpuEntries() []string {
	gpus, _ := stringSet(m.GPUs)
	for _, a := range placedAddresses(m.PlacedGPUs) {
		gpus = append(gpus, a.String())
	}
	return gpus
}

// acquire places a VM that has placement (nil for one that has not): it
// sets host and placed_gpus in plan and returns what was taken, or
// reports why nothing was.
func (r *vmResource) acquire(ctx context.Context, plan *vmModel, summary string, diags *diag.Diagnostics) *vmlife.Acquired {
	if plan.Placement.IsNull() {
		return nil
	}
	req, ok := plan.placementRequest(ctx, diags)
	if !ok || req == nil {
		if !diags.HasError() {
			diags.AddAttributeError(path.Root("placement"), summary, "The placement request is not known at apply. This is a bug in the provider; please report it.")
		}
		return nil
	}
	if r.data == nil {
		r.data.client("", diags) // says the provider is not configured
		return nil
	}
	holder := claim.Holder{VM: req.Name, UUID: uuid.NewString(), Workspace: os.Getenv("TF_WORKSPACE")}
	acq, err := vmlife.Acquire(ctx, r.data.planner(), func(name string) (vmlife.PlacedHost, error) {
		c, err := r.data.fleet.Host(name)
		if err != nil {
			return vmlife.PlacedHost{}, err
		}
		return placedOn(ctx, c, r.data.healthCheck(name, c)), nil
	}, req, holder)
	if err != nil {
		var ae *vmlife.AcquireError
		after := "Nothing was created, and nothing is held."
		if errors.As(err, &ae) && len(ae.Left) > 0 {
			after = "Nothing was created, but giving back what was taken failed: " + strings.Join(ae.Left, "; ") + "."
		}
		addPlacementError(diags, summary, err, after)
		return nil
	}
	for _, n := range acq.Notes {
		diags.AddWarning(summary+": a stale claim was taken over", n+".")
	}
	plan.Host = types.StringValue(acq.Placement.Host)
	plan.PlacedGPUs = placedGPUList(acq.Placement.GPUs)
	return acq
}

// releaseUnlessKept gives back what a create took when the create failed
// and recorded nothing: a VM kept in state (tainted) keeps its GPUs, and
// its destroy gives them back.
func (r *vmResource) releaseUnlessKept(ctx context.Context, acq *vmlife.Acquired, summary string, resp *resource.CreateResponse) {
	if !resp.State.Raw.IsNull() {
		return
	}
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privatePlacedMoved, nil)...)
	if err := acq.Release(ctx); err != nil {
		addError(&resp.Diagnostics, summary+": giving back the placed GPUs failed", err,
			"Give them back by hand (virsh nodedev-reattach, and virsh vol-delete --pool kohaku-claims for each claim).")
	}
}

// releasePlaced gives back a destroyed VM's placed GPUs and releases their
// claims, once its domain is gone (a failed destroy keeps them).
func releasePlaced(ctx context.Context, c hosts.Host, health gpubind.HealthCheck, state *vmModel, moved []byte, diags *diag.Diagnostics) {
	if diags.HasError() {
		return
	}
	gpus := placedAddresses(state.PlacedGPUs)
	holder := claim.Holder{VM: state.Name.ValueString(), UUID: state.UUID.ValueString()}
	hy, err := vmlife.ReleasePlaced(ctx, placedOn(ctx, c, health), holder, gpus, placedMovedFrom(moved, gpus))
	warnHygiene(state.Name.ValueString(), hy, diags)
	if err != nil {
		addError(diags, "Destroying VM "+state.Name.ValueString()+": giving back its GPUs failed", err,
			"The VM is gone. Give the devices back by hand (virsh nodedev-reattach pci_DDDD_BB_SS_F) and delete "+
				"their claims (virsh vol-delete --pool kohaku-claims kohaku-claim-DDDD_BB_SS_F).")
	}
}

// warnHygiene says which of a destroyed VM's GPUs were held back because
// they could not be reset, and which the connection could not reset.
func warnHygiene(vm string, hy *vmlife.Hygiene, diags *diag.Diagnostics) {
	if hy == nil {
		return
	}
	for _, q := range hy.Quarantined {
		diags.AddWarning(fmt.Sprintf("Destroying VM %s: GPU %s quarantined", vm, q.GPU),
			fmt.Sprintf("The GPU could not be reset after the VM (%s), so no VM is given it until an operator returns it: %s.",
				q.Why, claim.ClearHint(q.GPU)))
	}
	for _, u := range hy.Unreset {
		diags.AddWarning(fmt.Sprintf("Destroying VM %s: GPU %s given back without a reset", vm, u.GPU),
			fmt.Sprintf("Kohaku resets a GPU a VM gives back through the host's kernel, which this host's connection does not reach "+
				"(%s). The GPU was given back as it was, and the next VM may get it unreset (vfio-pci resets it on its own only where "+
				"the device offers a reset it can use). Reach the host over qemu+ssh:// for resets.", u.Why))
	}
}
