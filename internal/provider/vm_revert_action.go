package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
)

var (
	_ action.ActionWithConfigure      = (*vmRevertAction)(nil)
	_ action.ActionWithValidateConfig = (*vmRevertAction)(nil)
	_ action.ActionWithModifyPlan     = (*vmRevertAction)(nil)
)

// vmRevertAction returns a VM's disks to a kohaku_snapshot (Terraform 1.14
// and later), through snapshot.Revert.
type vmRevertAction struct {
	data *providerData
}

func newVMRevertAction() action.Action { return &vmRevertAction{} }

type vmRevertModel struct {
	VM              types.String `tfsdk:"vm"`
	Snapshot        types.String `tfsdk:"snapshot"`
	Start           types.Bool   `tfsdk:"start"`
	ShutdownTimeout types.String `tfsdk:"shutdown_timeout"`
	Timeout         types.String `tfsdk:"timeout"`
}

const (
	defaultRevertTimeout         = 30 * time.Minute
	defaultRevertShutdownTimeout = 5 * time.Minute
)

func (a *vmRevertAction) Metadata(_ context.Context, req action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vm_revert"
}

func (a *vmRevertAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Returns every disk of a VM to a `kohaku_snapshot` of it. Needs Terraform 1.14 or later: invoke " +
			"it with `terraform apply -invoke=action.kohaku_vm_revert.<name>`. A running VM is shut down " +
			"cleanly first (never forced: one still running after `shutdown_timeout` is left running and nothing " +
			"changes). Each disk's snapshot is then copied beside it (`<volume>.kohaku-revert`); only when every " +
			"copy is made are the old disk volumes deleted and made again, under their own names, from the " +
			"copies, which are then deleted; the VM is started again as `start` says. What was written to the " +
			"disks since the snapshot is lost.\n\n" +
			"Interrupted (Ctrl-C) before the old disks are deleted, the revert deletes its copies and starts " +
			"the VM again on its unchanged disks; once they are being deleted, it finishes, unless `timeout` " +
			"runs out or the provider is killed: then the VM is left shut off, unable to start (a disk is " +
			"missing), and invoking the action again finishes the revert. The VM is never started on some " +
			"disks reverted and others not. The disks keep their volume names, so the `kohaku_vm`'s state " +
			"still agrees and the next plan is empty; a boot disk comes back as a standalone qcow2 (its base " +
			"image merged in, as the snapshot holds it).\n\n" +
			"Refused, before anything stops: a snapshot of another VM (by the VM's UUID), a VM with a disk " +
			"the snapshot has no copy of (added after it) or that Kohaku did not make.",
		Attributes: map[string]schema.Attribute{
			"vm": schema.StringAttribute{
				Required:    true,
				Description: "The VM to revert: its domain name or UUID, for example `kohaku_vm.web.id`.",
			},
			"snapshot": schema.StringAttribute{
				Required:    true,
				Description: "The snapshot to return to: a `kohaku_snapshot`'s `id` (`[<host>/]<vm uuid>/<name>`). Its host is the VM's host.",
				Validators:  []validator.String{snapshotIDValidator},
			},
			"start": schema.BoolAttribute{
				Optional: true,
				Description: "Whether to start the VM after the revert. Default: start it when it was running " +
					"when the action began. A `kohaku_vm` with `running = true` left shut off is started by the next apply.",
			},
			"shutdown_timeout": schema.StringAttribute{
				Optional: true,
				Description: "How long a running VM gets to power off when asked (through the guest agent, else " +
					"ACPI), as a Go duration. Default `5m`. A VM still running then is never forced off: the " +
					"action fails and changes nothing.",
				Validators: []validator.String{positiveDuration},
			},
			"timeout": schema.StringAttribute{
				Optional:    true,
				Description: "How long the whole revert may take, as a Go duration. Default `30m`.",
				Validators:  []validator.String{positiveDuration},
			},
		},
	}
}

// ValidateConfig refuses a snapshot of another VM when both are given by
// UUID.
func (a *vmRevertAction) ValidateConfig(ctx context.Context, req action.ValidateConfigRequest, resp *action.ValidateConfigResponse) {
	var m vmRevertModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.VM.IsUnknown() || m.Snapshot.IsUnknown() || m.VM.IsNull() || m.Snapshot.IsNull() {
		return
	}
	_, uuid, name, err := parseSnapshotID(m.Snapshot.ValueString())
	if err != nil {
		return // the attribute's validator says so
	}
	if vm := m.VM.ValueString(); uuidRE.MatchString(vm) && !strings.EqualFold(vm, uuid) {
		resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Snapshot of another VM", fmt.Sprintf("The snapshot "+
			"%q was taken of the VM with UUID %s, not of %s: a VM's disks return only to its own snapshots.", name, uuid, vm))
	}
}

// ModifyPlan checks, at plan time, the snapshot and the VM on the host:
// that the snapshot is of that VM, and holds a copy of every disk it has.
func (a *vmRevertAction) ModifyPlan(ctx context.Context, req action.ModifyPlanRequest, resp *action.ModifyPlanResponse) {
	if a.data == nil || req.Config.Raw.IsNull() {
		return
	}
	var m vmRevertModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.VM.IsUnknown() || m.Snapshot.IsUnknown() {
		return
	}
	host, uuid, name, err := parseSnapshotID(m.Snapshot.ValueString())
	if err != nil {
		return
	}
	c, err := a.data.fleet.Host(host)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Unknown host", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotPlanCheck)
	defer cancel()
	_, err = snapshot.CheckRevert(ctx, c, snapshot.RevertRequest{VM: m.VM.ValueString(), SnapshotOf: uuid, Name: name})
	switch {
	case errors.Is(err, snapshot.ErrOtherVM):
		resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Snapshot of another VM", sentence(err))
	case errors.Is(err, snapshot.ErrNotSnapshottable):
		resp.Diagnostics.AddAttributeError(path.Root("vm"), "VM cannot be reverted to this snapshot", sentence(err))
	}
}

func (a *vmRevertAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	a.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

func (a *vmRevertAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var m vmRevertModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	host, uuid, name, err := parseSnapshotID(m.Snapshot.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Invalid snapshot", err.Error())
		return
	}
	c := a.data.client(host, &resp.Diagnostics)
	if c == nil {
		return
	}
	timeout, shutdown := defaultRevertTimeout, defaultRevertShutdownTimeout
	if !m.Timeout.IsNull() {
		timeout, _ = time.ParseDuration(m.Timeout.ValueString()) // validated
	}
	if !m.ShutdownTimeout.IsNull() {
		shutdown, _ = time.ParseDuration(m.ShutdownTimeout.ValueString()) // validated
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rreq := snapshot.RevertRequest{
		VM: m.VM.ValueString(), SnapshotOf: uuid, Name: name, ShutdownTimeout: shutdown,
		Progress: func(line string) {
			if resp.SendProgress != nil {
				resp.SendProgress(action.InvokeProgressEvent{Message: line})
			}
		},
	}
	if !m.Start.IsNull() {
		start := m.Start.ValueBool()
		rreq.Start = &start
	}
	res, err := snapshot.Revert(ctx, c, rreq)
	switch {
	case errors.Is(err, snapshot.ErrOtherVM):
		resp.Diagnostics.AddAttributeError(path.Root("snapshot"), "Snapshot of another VM", sentence(err)+" Nothing was changed.")
		return
	case err != nil:
		addError(&resp.Diagnostics, fmt.Sprintf("Reverting VM %s to snapshot %q", m.VM.ValueString(), name), err)
		return
	}
	for _, w := range res.Warnings {
		resp.Diagnostics.AddWarning("Revert of "+res.Target.VM.Name, w)
	}
	if rreq.Progress != nil {
		done := fmt.Sprintf("%s: %d disks returned to snapshot %q", res.Target.VM.Name, len(res.Target.Disks), name)
		if res.Resumed {
			done += ", finishing an interrupted revert"
		}
		rreq.Progress(done)
	}
}

// snapshotIDValidator checks the form of a snapshot's id.
var snapshotIDValidator = checkedString{
	desc: "a snapshot id, `[<host>/]<vm uuid>/<name>`", summary: "Invalid snapshot id",
	check: func(id string) error { _, _, _, err := parseSnapshotID(id); return err },
}
