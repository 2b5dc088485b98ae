package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

var (
	_ resource.ResourceWithConfigure      = (*vmResource)(nil)
	_ resource.ResourceWithImportState    = (*vmResource)(nil)
	_ resource.ResourceWithValidateConfig = (*vmResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*vmResource)(nil)
)

// Default operation timeouts; the timeouts block overrides them.
const (
	vmCreateTimeout = 10 * time.Minute
	vmUpdateTimeout = 10 * time.Minute
	vmDeleteTimeout = 5 * time.Minute
)

// domainView is a domain as Read sees it; gpuGroups are the functions
// passed through for each gpus entry. Both belong to the VM's life, run by
// internal/vmlife.
type (
	domainView = vmlife.View
	gpuGroups  = vmlife.GPUGroups
)

// privateDomainGone marks, in private state, a VM whose domain was removed
// outside Terraform while a volume it created is still there: the next plan
// replaces the VM so the leftover volume is deleted and made anew.
const privateDomainGone = "domain_gone"

var objectAsOptions = basetypes.ObjectAsOptions{}

func newVMResource() resource.Resource { return &vmResource{} }

type vmResource struct {
	configuredResource
}

func (r *vmResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vm"
}

// planDomainDefaults fills what the configuration leaves unset: the value
// the domain has (the state's, an imported domain's own) where there is
// one that still applies, else the default for a new VM. So an import of a
// domain Kohaku did not make plans no change for what the configuration
// does not mention.
func planDomainDefaults(plan, config *vmModel, state *vmModel) {
	has := func(v func(*vmModel) types.String) bool {
		return state != nil && !v(state).IsNull() && !v(state).IsUnknown()
	}
	// Unknown where the configuration is unset: there is no state to keep.
	for _, a := range []struct {
		plan   *types.String
		config types.String
		def    string
	}{
		{&plan.Type, config.Type, string(domain.TypeKVM)},
		{&plan.Machine, config.Machine, string(domain.MachineQ35)},
		{&plan.Firmware, config.Firmware, string(domain.FirmwareBIOS)},
	} {
		if a.plan.IsUnknown() && a.config.IsNull() {
			*a.plan = types.StringValue(a.def)
		}
	}
	if plan.GuestAgent.IsUnknown() && config.GuestAgent.IsNull() {
		plan.GuestAgent = types.BoolValue(true)
	}
	if plan.Autostart.IsUnknown() && config.Autostart.IsNull() {
		plan.Autostart = types.BoolValue(false)
	}
	if config.CPUMode.IsNull() {
		switch {
		case has(func(m *vmModel) types.String { return m.CPUMode }) && plan.Type.Equal(state.Type):
			plan.CPUMode = state.CPUMode
		case plan.Type.IsUnknown():
			plan.CPUMode = types.StringUnknown()
		default:
			plan.CPUMode = types.StringValue(string(domain.DefaultCPUMode(domain.Type(plan.Type.ValueString()))))
		}
	}
	if config.SerialLogPath.IsNull() {
		switch {
		case has(func(m *vmModel) types.String { return m.SerialLogPath }) && plan.Name.Equal(state.Name):
			plan.SerialLogPath = state.SerialLogPath
		case plan.Name.IsUnknown():
			plan.SerialLogPath = types.StringUnknown()
		default:
			plan.SerialLogPath = types.StringValue(domain.DefaultSerialLogPath(plan.Name.ValueString()))
		}
	}
}

// ModifyPlan fills the defaults that depend on other attributes, and plans a
// replacement when the domain was removed outside Terraform but a volume it
// owned remains.
func (r *vmResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan, config vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var state *vmModel
	if !req.State.Raw.IsNull() {
		state = &vmModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	planDomainDefaults(&plan, &config, state)
	r.planMMIO(ctx, &plan, &config, state, &resp.Diagnostics)
	r.planPlacement(ctx, &plan, state, resp)
	if state != nil {
		r.planMove(ctx, &plan, state, &resp.Diagnostics)
		plan.NetworkInterfaces = keepNICMACs(ctx, plan.NetworkInterfaces, config.NetworkInterfaces, state.NetworkInterfaces, &resp.Diagnostics)
		planDataDisks(ctx, &plan, state, &resp.Diagnostics)
		if gone, _ := req.Private.GetKey(ctx, privateDomainGone); len(gone) > 0 {
			plan.ID, plan.UUID = types.StringUnknown(), types.StringUnknown()
			resp.RequiresReplace = append(resp.RequiresReplace, path.Root("id"))
			resp.Diagnostics.AddWarning("VM was removed outside Terraform",
				fmt.Sprintf("The domain %s no longer exists, but the volume it was created with (%s) does. The "+
					"plan replaces the VM: the leftover volume is deleted and the VM created anew. To keep the "+
					"volume's data, copy it before applying.", plan.Name.ValueString(), plan.OverlayVolume.ValueString()))
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// keepNICMACs plans the MAC of each interface whose mac is not configured:
// the address of the same interface in state, so interfaces keep their MACs
// when others are added, removed or reordered. An interface is the same when
// type, source and model match; an interface with no match gets a new address
// at apply (unknown in the plan).
func keepNICMACs(ctx context.Context, plan, config, state types.List, diags *diag.Diagnostics) types.List {
	if plan.IsNull() || plan.IsUnknown() || config.IsUnknown() || state.IsNull() || state.IsUnknown() {
		return plan
	}
	var p, c, s []vmNICModel
	diags.Append(plan.ElementsAs(ctx, &p, false)...)
	diags.Append(config.ElementsAs(ctx, &c, false)...)
	diags.Append(state.ElementsAs(ctx, &s, false)...)
	if diags.HasError() || len(c) != len(p) {
		return plan
	}
	same := func(a, b vmNICModel) bool {
		return a.Type.Equal(b.Type) && a.Source.Equal(b.Source) && a.Model.Equal(b.Model)
	}
	taken := map[string]bool{} // MACs configured explicitly
	for i := range p {
		if !c[i].MAC.IsNull() && !c[i].MAC.IsUnknown() {
			taken[strings.ToLower(c[i].MAC.ValueString())] = true
		}
	}
	used := make([]bool, len(s))
	assign := func(i, j int) bool {
		mac := s[j].MAC
		if used[j] || mac.IsNull() || mac.IsUnknown() || taken[strings.ToLower(mac.ValueString())] || !same(p[i], s[j]) {
			return false
		}
		used[j], p[i].MAC = true, mac
		return true
	}
	var open []int
	for i := range p {
		if !c[i].MAC.IsNull() {
			continue // configured (or unknown until apply)
		}
		p[i].MAC = types.StringUnknown()
		if i < len(s) && assign(i, i) { // the same position first
			continue
		}
		open = append(open, i)
	}
	for _, i := range open {
		for j := range s {
			if assign(i, j) {
				break
			}
		}
	}
	out, d := types.ListValueFrom(ctx, types.ObjectType{AttrTypes: vmNICAttrTypes}, p)
	diags.Append(d...)
	return out
}

func (r *vmResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Create(ctx, vmCreateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	summary := "Creating VM " + plan.Name.ValueString()
	// A VM that asks for capacity is placed, and its GPUs claimed and
	// bound, before anything else is made; what it took is given back
	// unless the VM ends up in state.
	acq := r.acquire(ctx, &plan, summary, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if acq != nil {
		defer r.releaseUnlessKept(ctx, acq, summary, resp)
		resp.Diagnostics.Append(resp.Private.SetKey(ctx, privatePlacedMoved, placedMovedRecord(acq.Moved))...)
	}
	c := r.data.client(plan.Host.ValueString(), &resp.Diagnostics)
	r.applyMMIO(ctx, &plan, summary, &resp.Diagnostics)
	in := plan.specFrom(ctx, &resp.Diagnostics)
	if c == nil || resp.Diagnostics.HasError() {
		return
	}
	if acq != nil {
		in.Spec.UUID = acq.Holder.UUID
		if len(acq.Placement.CPUs) > 0 {
			in.Spec.CPUPins, in.Spec.EmulatorCPUs = acq.Placement.CPUs, domain.FormatCPUSet(acq.Placement.EmulatorCPUs)
		}
	}
	// Checked at plan time when the image's id was known then.
	if d := plan.disk(ctx, &resp.Diagnostics); d != nil && !d.Image.IsNull() {
		if p := imageHostProblem(plan.Host.ValueString(), d.Image.ValueString()); p != "" {
			resp.Diagnostics.AddAttributeError(path.Root("disk").AtName("image"), summary, p+" Nothing was created.")
			return
		}
	}
	gpus := plan.gpuEntries()
	waits := plan.Running.ValueBool() && plan.WaitFor.ValueString() != string(ready.ModeNone)
	var nodes []int
	if acq != nil && len(acq.Placement.GPUs) == 0 && acq.Placement.NUMANode >= 0 {
		nodes = []int{acq.Placement.NUMANode} // numa_local without GPUs: the node placement chose
	}
	res, err := vmlife.Resolve(ctx, c, vmlife.Want{Spec: in.Spec, GPUs: gpus, DiskMode: in.DiskMode, InspectSeed: waits, NUMAPlacement: plan.placement(), Nodes: nodes}, nil, true)
	addGPUWarnings(&resp.Diagnostics, summary, res.Warnings)
	if err != nil {
		addStepError(&resp.Diagnostics, summary, err, "Nothing was created.")
		return
	}
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateGPUGroups, privateGroups(res.Groups))...)
	// The wait is set up before anything is made: a guest can be quick,
	// and a setup error should leave nothing behind.
	wait, err := r.prepareWait(&plan, res.Seed, func(w string) { resp.Diagnostics.AddWarning(summary, w) })
	if err != nil {
		addStepError(&resp.Diagnostics, summary, &vmlife.StepError{Step: "prepare the readiness wait", Err: err}, "Nothing was created.")
		return
	}
	defer wait.close()
	p := vmlife.Plan{Spec: res.Spec, NewDisks: in.NewDisks, Autostart: plan.Autostart.ValueBool(), Running: plan.Running.ValueBool(),
		KeepOnReadyFailure: plan.OnReadyFailure.ValueString() != deleteOnFailure, Timeout: timeout}
	if acq != nil {
		p.BeforeDefine = acq.Confirm
	}
	if disk := plan.disk(ctx, &resp.Diagnostics); in.DiskMode == "base_volume" && disk != nil {
		p.Base = disk.base()
		p.SizeBytes = disk.SizeGiB.ValueInt64() << 30
	} else if in.DiskMode == "volume" && disk != nil {
		p.SizeBytes = disk.SizeGiB.ValueInt64() << 30
	}
	var out *ready.Outcome
	p.Ready = func(ctx context.Context) (err error) {
		out, err = awaitReady(ctx, c, wait, res.Spec, &resp.Diagnostics)
		return err
	}
	view, err := vmlife.Create(ctx, c, p)
	if err != nil {
		createFailed(ctx, &plan, summary, res.Groups, err, resp)
		return
	}
	if out != nil {
		plan.Guest = guestValue(wait.mode, out)
	}
	if plan.Guest.IsUnknown() {
		plan.Guest = nullGuest()
	}
	view.GPUGroups = res.Groups
	var m vmModel
	m.fromDomain(ctx, view, &plan, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// awaitReady waits for the started guest and checks its report: a degraded
// boot is a warning, cloud-init errors fail the wait.
func awaitReady(ctx context.Context, c hosts.Host, wait *vmWait, spec domain.Spec, diags *diag.Diagnostics) (*ready.Outcome, error) {
	out, err := wait.wait(ctx, c, spec.Name, serialLogOf(spec))
	if err == nil && out != nil {
		var warnings []string
		warnings, err = ready.Check(spec.Name, out.Report)
		for _, w := range warnings {
			diags.AddWarning(fmt.Sprintf("VM %s is ready, degraded", spec.Name), w)
		}
	}
	return out, err
}

// createFailed reports a failed create. Before anything was made there is
// nothing to undo; afterwards everything was rolled back, and what could not
// be is kept in state (tainted) so destroy can finish the job. A VM kept
// after a failed readiness wait is stored with the error, so Terraform
// marks it tainted and the next apply replaces it.
func createFailed(ctx context.Context, plan *vmModel, summary string, groups gpuGroups, err error, resp *resource.CreateResponse) {
	var ce *vmlife.CreateError
	if !errors.As(err, &ce) {
		addError(&resp.Diagnostics, summary, err)
		return
	}
	title := fmt.Sprintf("%s failed at step %q", summary, ce.Step)
	switch {
	case ce.Kept:
		plan.Guest = nullGuest()
		if ce.View != nil {
			ce.View.GPUGroups = groups
			var m vmModel
			m.fromDomain(ctx, ce.View, plan, &resp.Diagnostics)
			resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
		} else {
			plan.fillUnknowns(ce.Defined, ce.Overlay)
			resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		}
		addError(&resp.Diagnostics, title,
			ce.Err, "The VM was kept for inspection (on_ready_failure = \"keep\") and is tainted: the "+
				"next apply replaces it. Set on_ready_failure = \"destroy\" to have a failed create remove it.")
	case !ce.Made:
		addError(&resp.Diagnostics, title, ce.Err, "Nothing was created.")
	default:
		msg := fmt.Sprintf("%v\n\nRolled back: %s.", ce.Err, strings.Join(ce.RolledBack, "; "))
		if len(ce.Left) > 0 {
			msg += "\n\nCould not undo, remove by hand or run terraform destroy: " + strings.Join(ce.Left, "; ") + "."
			plan.fillUnknowns(ce.Defined, ce.Overlay)
			resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		}
		addError(&resp.Diagnostics, title, errors.New(msg))
	}
}

// addStepError reports a step that failed before anything changed: a shared
// folder or a gpus entry on the attribute at fault, anything else as a
// plain error; nothing says what was left untouched.
func addStepError(diags *diag.Diagnostics, summary string, err error, nothing string) {
	step, cause := "", err
	var se *vmlife.StepError
	if errors.As(err, &se) {
		step, cause = se.Step, se.Err
	}
	title := fmt.Sprintf("%s failed at step %q", summary, step)
	var share *vmlife.ShareError
	var entry *vmlife.GPUEntryError
	var place *vmlife.PlacementError
	switch {
	case errors.As(cause, &place):
		diags.AddAttributeError(path.Root(place.Attribute), title, place.Err.Error()+"\n\n"+nothing)
	case errors.As(cause, &share):
		diags.AddAttributeError(path.Root("shared_folder").AtListIndex(share.Index).AtName("source"), title, share.Error()+"\n\n"+nothing)
	case step == vmlife.StepGPUs:
		p := path.Root("gpus")
		if errors.As(cause, &entry) {
			p = p.AtSetValue(types.StringValue(entry.Entry))
		}
		diags.AddAttributeError(p, title, cause.Error()+"\n\n"+nothing)
	default:
		addError(diags, title, fmt.Errorf("%w\n\n%s", cause, nothing))
	}
}

// addGPUWarnings reports gpus group members left off vfio-pci.
func addGPUWarnings(diags *diag.Diagnostics, summary string, warnings []string) {
	for _, w := range warnings {
		diags.AddAttributeWarning(path.Root("gpus"), summary+": part of an IOMMU group is not on vfio-pci", w+".")
	}
}

// fillUnknowns makes a plan storable as the state of a half-made VM.
func (m *vmModel) fillUnknowns(defined *hosts.DomainRef, overlay *domain.VolumeRef) {
	m.ID, m.UUID = types.StringValue(""), types.StringValue("")
	if defined != nil {
		m.ID, m.UUID = types.StringValue(defined.UUID), types.StringValue(defined.UUID)
	}
	m.OverlayVolume = types.StringNull()
	if overlay != nil {
		m.OverlayVolume = types.StringValue(overlay.Pool + "/" + overlay.Volume)
	}
	if m.CPUMode.IsUnknown() {
		m.CPUMode = types.StringNull()
	}
	if m.SerialLogPath.IsUnknown() {
		m.SerialLogPath = types.StringNull()
	}
	if m.NUMANodes.IsUnknown() {
		m.NUMANodes = types.ListNull(types.Int64Type)
	}
	if m.PinnedCPUs.IsUnknown() {
		m.PinnedCPUs = types.ListNull(types.Int64Type)
	}
	if !m.NetworkInterfaces.IsNull() && !m.NetworkInterfaces.IsUnknown() {
		var elems []attr.Value
		for _, e := range m.NetworkInterfaces.Elements() {
			o := e.(types.Object) //nolint:forcetypeassert // the schema makes every element of network_interface an object
			attrs := o.Attributes()
			if attrs["mac"].IsUnknown() {
				attrs["mac"] = types.StringNull()
			}
			elems = append(elems, types.ObjectValueMust(vmNICAttrTypes, attrs))
		}
		m.NetworkInterfaces = types.ListValueMust(types.ObjectType{AttrTypes: vmNICAttrTypes}, elems)
	}
}

func (r *vmResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state vmModel
	c := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	ref := hosts.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()}
	if ref.UUID == "" {
		ref.UUID = state.ID.ValueString()
	}
	importing := state.Name.IsNull() || state.Name.IsUnknown()
	view, err := vmlife.Read(ctx, c, ref, volumeRef(state.OverlayVolume), importing)
	if errors.Is(err, hosts.ErrDomainNotFound) && !importing {
		// A move cut off after its define on the new host but before the
		// state was written: the VM is there.
		if name, other, ok := r.findMoved(ctx, &state); ok {
			tflog.Warn(ctx, "VM found on another host of the fleet, where a move left it", map[string]any{"name": ref.Name, "host": name})
			c, state.Host = other, types.StringNull()
			if name != "" {
				state.Host = types.StringValue(name)
			}
			view, err = vmlife.Read(ctx, c, ref, volumeRef(state.OverlayVolume), importing)
		}
	}
	if errors.Is(err, hosts.ErrDomainNotFound) || (err == nil && view == nil) || ref.UUID == "" {
		r.domainGone(ctx, c, &state, resp)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, "Reading VM "+ref.String(), err)
		return
	}
	recorded, d := req.Private.GetKey(ctx, privateGPUGroups)
	resp.Diagnostics.Append(d...)
	view.GPUGroups = gpuGroupsFromPrivate(recorded)
	var m vmModel
	m.fromDomain(ctx, view, &state, &resp.Diagnostics)
	// The addresses are read fresh where the guest agent answers, within a
	// short bound; otherwise what create recorded stays.
	if addrs, ok := vmlife.GuestAddresses(ctx, c, view); ok {
		m.Guest = withGuestAddresses(m.Guest, addrs)
	}
	if importing {
		addAdoptionWarnings(&resp.Diagnostics, view)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateDomainGone, nil)...)
}

// addAdoptionWarnings tells, on the first refresh after an import, what of
// the domain Kohaku keeps but does not manage, and a boot disk that no
// storage pool holds.
func addAdoptionWarnings(diags *diag.Diagnostics, view *vmlife.View) {
	name := view.Observed.Spec.Name
	if u := view.Observed.Unrecognized; len(u) > 0 {
		diags.AddWarning("Imported VM has parts Kohaku keeps but does not manage",
			fmt.Sprintf("The domain %s has these, which no kohaku_vm attribute describes:\n\n  - %s\n\n"+
				"Kohaku keeps them as they are: updates edit only what the resource's attributes "+
				"describe, so they survive every change. Manage them with virsh or virt-manager, as before.",
				name, strings.Join(u, "\n  - ")))
	}
	if p := view.DiskOutsidePools; p != "" {
		diags.AddAttributeWarning(path.Root("disk"), "Imported VM's boot disk is in no storage pool",
			fmt.Sprintf("The domain %s boots from %s, which no libvirt storage pool holds, so the disk "+
				"reads back as volume = %q with pool = \"\", which no configuration can name: the next plan "+
				"replaces the VM. To manage the VM in place, put the file under a storage pool first: define "+
				"a directory pool on its folder (virsh pool-define-as NAME dir --target %s; virsh pool-start "+
				"NAME; virsh pool-autostart NAME), and set disk = { pool = \"NAME\", volume = %q }: "+
				"the next refresh reads the disk as that volume.",
				name, p, p, pathDir(p), pathBase(p)))
	}
}

func pathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return "/"
}

func pathBase(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// domainGone handles a domain removed outside Terraform: with nothing of it
// left the resource leaves the state (the next plan creates it); with its
// overlay volume still there it stays, marked for replacement, so the volume is
// deleted rather than orphaned.
func (r *vmResource) domainGone(ctx context.Context, c hosts.Host, state *vmModel, resp *resource.ReadResponse) {
	if pool, vol, ok := parseVolumeID(state.OverlayVolume.ValueString()); ok {
		exists, err := c.VolumeExists(ctx, pool, vol)
		if err != nil {
			addError(&resp.Diagnostics, "Reading VM "+state.Name.ValueString(), err)
			return
		}
		if exists {
			tflog.Warn(ctx, "domain removed outside Terraform; its overlay volume remains", map[string]any{"name": state.Name.ValueString(), "volume": pool + "/" + vol})
			state.Running = types.BoolValue(false)
			resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
			resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateDomainGone, []byte(`true`))...)
			return
		}
	}
	tflog.Warn(ctx, "domain removed outside Terraform", map[string]any{"name": state.Name.ValueString(), "uuid": state.UUID.ValueString()})
	resp.State.RemoveResource(ctx)
}

func (r *vmResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Update(ctx, vmUpdateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if moving(&plan, &state) && !r.move(ctx, &plan, &state, resp) {
		return
	}
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	r.applyMMIO(ctx, &plan, "Updating VM "+state.Name.ValueString(), &resp.Diagnostics)
	want, prior := plan.specFrom(ctx, &resp.Diagnostics), state.specFrom(ctx, &resp.Diagnostics)
	recorded, d := req.Private.GetKey(ctx, privateGPUGroups)
	resp.Diagnostics.Append(d...)
	if c == nil || resp.Diagnostics.HasError() {
		return
	}
	summary := "Updating VM " + state.Name.ValueString()
	gpus := plan.gpuEntries()
	grace, _ := time.ParseDuration(plan.ShutdownTimeout.ValueString())
	// A placement's NUMA node and vCPU pins were chosen at create: kept.
	keep := vmlife.Want{Spec: want.Spec, GPUs: gpus, NUMAPlacement: plan.placement(),
		Nodes: state.placedNodes(ctx, &resp.Diagnostics), KeepPins: len(state.pinnedCPUs(ctx, &resp.Diagnostics)) > 0}
	view, err := vmlife.Update(ctx, c, vmlife.Change{
		Ref:     hosts.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()},
		Want:    keep,
		Prior:   prior.Spec,
		Overlay: volumeRef(state.OverlayVolume), Recorded: gpuGroupsFromPrivate(recorded),
		DiskBytes: plannedDiskBytes(ctx, &plan, &resp.Diagnostics), NewDisks: want.NewDisks,
		Running: plan.Running.ValueBool(), Autostart: plan.Autostart.ValueBool(), Grace: grace,
		Record: func(g gpuGroups) {
			resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateGPUGroups, privateGroups(g))...)
		},
		Warn: func(w string) { addGPUWarnings(&resp.Diagnostics, summary, []string{w}) },
		ForcedOff: func(g time.Duration) {
			resp.Diagnostics.AddWarning(summary+": the guest was forced off", vmlife.ForcedOffNote(grace, g))
		},
	})
	var ue *vmlife.UpdateError
	switch {
	case errors.As(err, &ue) && ue.Unchanged:
		addStepError(&resp.Diagnostics, summary, &vmlife.StepError{Step: ue.Step, Err: ue.Err}, "Nothing was changed.")
		return
	case errors.As(err, &ue):
		// The state is what the domain now is, so the next plan starts
		// from the truth.
		addError(&resp.Diagnostics, fmt.Sprintf("%s failed at step %q", summary, ue.Step), ue.Err)
		if ue.View != nil {
			var m vmModel
			m.fromDomain(ctx, ue.View, &state, &resp.Diagnostics)
			m.ShutdownTimeout, m.DestroyShutdown, m.Timeouts = plan.ShutdownTimeout, plan.DestroyShutdown, plan.Timeouts
			resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
		}
		return
	case err != nil:
		addError(&resp.Diagnostics, summary, err)
		return
	}
	var m vmModel
	m.fromDomain(ctx, view, &plan, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *vmResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state vmModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := state.Timeouts.Delete(ctx, vmDeleteTimeout)
	ctx, cancel, c := r.data.open(ctx, state.Host.ValueString(), timeout, d, &resp.Diagnostics)
	defer cancel()
	if c == nil {
		return
	}
	ref := hosts.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()}
	if !state.PlacedGPUs.IsNull() {
		// The GPUs go back once the domain is gone, whatever happens to
		// the rest of the destroy.
		moved, _ := req.Private.GetKey(ctx, privatePlacedMoved)
		defer releasePlaced(ctx, c, r.data.healthCheck(state.Host.ValueString(), c), &state, moved, &resp.Diagnostics)
	}
	grace, err := time.ParseDuration(state.ShutdownTimeout.ValueString())
	if err != nil {
		grace, _ = time.ParseDuration(vmDefaultShutdownTimeout)
	}
	done, err := vmlife.Delete(ctx, c, vmlife.Doomed{Ref: ref, Overlay: volumeRef(state.OverlayVolume),
		Protected: protectedVolumes(ctx, &state, &resp.Diagnostics), Seed: seedVolume(&state),
		Mode: vmlife.DestroyMode(state.DestroyShutdown.ValueString()), ShutdownTimeout: grace})
	if done.Why != "" {
		tflog.Info(ctx, "stopping the guest for destroy", map[string]any{"name": ref.Name, "grace": done.Grace.String(), "why": done.Why})
	}
	if done.Forced {
		resp.Diagnostics.AddWarning("Destroying VM "+ref.Name+": the guest was forced off", vmlife.ForcedOffNote(done.Grace, done.Waited))
	}
	for _, v := range done.Spared {
		tflog.Warn(ctx, "not deleting a base image or seed recorded as owned", map[string]any{"volume": v.Pool + "/" + v.Volume})
	}
	var se *vmlife.StepError
	if errors.As(err, &se) {
		addError(&resp.Diagnostics, fmt.Sprintf("Destroying VM %s failed at step %q", ref.Name, se.Step), se.Err)
	} else if err != nil {
		addError(&resp.Diagnostics, "Destroying VM "+ref.Name, err)
	}
}

// plannedDiskBytes is the boot disk's planned size in bytes (an overlay's
// or an existing volume's); 0 when the plan sets none (the size stays as
// it is).
func plannedDiskBytes(ctx context.Context, m *vmModel, diags *diag.Diagnostics) int64 {
	if d := m.disk(ctx, diags); d != nil && !d.SizeGiB.IsNull() && !d.SizeGiB.IsUnknown() {
		return d.SizeGiB.ValueInt64() << 30
	}
	return 0
}

// volumeRef reads a "<pool>/<volume>" attribute; nil when it is not one.
func volumeRef(v types.String) *domain.VolumeRef {
	if pool, vol, ok := parseVolumeID(v.ValueString()); ok {
		return &domain.VolumeRef{Pool: pool, Volume: vol}
	}
	return nil
}

// protectedVolumes are the volumes destroy must never delete whatever the
// metadata says: the base image and an existing boot volume (the seed's
// rule is seedVolume's).
func protectedVolumes(ctx context.Context, m *vmModel, diags *diag.Diagnostics) []domain.VolumeRef {
	var out []domain.VolumeRef
	if d := m.disk(ctx, diags); d != nil {
		if b := d.base(); b != nil {
			out = append(out, *b)
		}
		if !d.Volume.IsNull() {
			out = append(out, domain.VolumeRef{Pool: d.Pool.ValueString(), Volume: d.Volume.ValueString()})
		}
	}
	return out
}

// seedVolume is the volume of the VM's kohaku_seed, which its destroy
// never deletes (vmlife.Doomed.Seed says when it does).
func seedVolume(m *vmModel) *domain.VolumeRef {
	if pool, vol, ok := parseVolumeID(m.SeedID.ValueString()); ok {
		return &domain.VolumeRef{Pool: pool, Volume: vol}
	}
	return nil
}

// ImportState accepts a domain name or UUID, optionally after a host key:
// "web-1", "6f1c2a8e-...", "gpu2/web-1".
func (r *vmResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, key := "", req.ID
	if h, k, ok := strings.Cut(req.ID, "/"); ok {
		host, key = h, k
	}
	if key == "" || strings.Contains(key, "/") || (host == "" && strings.Contains(req.ID, "/")) {
		resp.Diagnostics.AddError("Invalid import ID",
			fmt.Sprintf("%q is not a VM import ID. Use the domain name or UUID, after the key of the provider's "+
				"hosts map for another host: \"web-1\", \"6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b\" or "+
				"\"gpu2/web-1\".", req.ID))
		return
	}
	c := r.data.client(host, &resp.Diagnostics)
	if c == nil {
		return
	}
	ref, err := c.LookupDomain(ctx, key)
	if err != nil {
		addError(&resp.Diagnostics, "Importing VM "+req.ID, err)
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), ref.UUID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("uuid"), ref.UUID)...)
	if host != "" {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("host"), host)...)
	}
}

// serialLogOf is where the VM's serial console goes on the host.
func serialLogOf(spec domain.Spec) string {
	if spec.SerialLogPath != "" {
		return spec.SerialLogPath
	}
	return domain.DefaultSerialLogPath(spec.Name)
}
