package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

var (
	_ action.ActionWithConfigure      = (*vmPowerAction)(nil)
	_ action.ActionWithValidateConfig = (*vmPowerAction)(nil)
)

// vmPowerAction starts, shuts down, reboots or resets a VM (Terraform 1.14
// and later), through vmlife.RunPower.
type vmPowerAction struct {
	configuredAction
}

func newVMPowerAction() action.Action { return &vmPowerAction{} }

type vmPowerModel struct {
	Host          types.String `tfsdk:"host"`
	VM            types.String `tfsdk:"vm"`
	Operation     types.String `tfsdk:"operation"`
	Force         types.Bool   `tfsdk:"force"`
	WaitForReport types.Bool   `tfsdk:"wait_for_report"`
	Timeout       types.String `tfsdk:"timeout"`
}

// defaultPowerTimeout bounds an action that sets no timeout.
const defaultPowerTimeout = 5 * time.Minute

func (a *vmPowerAction) Metadata(_ context.Context, req action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vm_power"
}

func (a *vmPowerAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Starts, shuts down, reboots or resets a VM, and optionally waits until its guest reports " +
			"again over its report channel. Needs Terraform 1.14 or later: invoke it with " +
			"`terraform apply -invoke=action.kohaku_vm_power.<name>`, or from a resource's " +
			"`lifecycle.action_trigger`. The action changes nothing in any resource's state: a `kohaku_vm` " +
			"with `running = true` that the action shut down is started again by the next apply.",
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:    true,
				Description: "The key of the provider's `hosts` map the VM is on. Default: the provider's own host.",
			},
			"vm": schema.StringAttribute{
				Required:    true,
				Description: "The VM's domain name or UUID, for example `kohaku_vm.web.id`.",
			},
			"operation": schema.StringAttribute{
				Required: true,
				Description: "`start` starts a VM that is off (one that runs is left alone). `shutdown` asks " +
					"the guest to power off through the QEMU guest agent, or through ACPI (the power button) when the " +
					"agent does not answer, repeats the request every 10 seconds and waits until the guest is off; " +
					"a guest still running at the timeout fails the action unless `force` is set. `reboot` asks " +
					"the guest to reboot, through the guest agent or ACPI, and returns once asked. `reset` restarts " +
					"the guest at once, like a reset button, without shutting it down.",
				Validators: []validator.String{stringvalidator.OneOf(vmlife.PowerOps()...)},
			},
			"force": schema.BoolAttribute{
				Optional: true,
				Description: "For `shutdown`: force a guest that has not powered off 10 seconds before the " +
					"timeout off, like pulling the plug (whatever it had not written to disk is lost). " +
					"Default `false`: the action fails and the guest keeps running.",
			},
			"wait_for_report": schema.BoolAttribute{
				Optional: true,
				Description: "For `start` and `reset`: then wait until the guest writes a report or a " +
					"heartbeat to its report channel (the seed's reporter, or the health agent), within the " +
					"timeout, printing a progress line every 10 seconds. Default `false`. Not for `reboot`: " +
					"the guest shuts down in its own time, and a heartbeat from before it does cannot be told " +
					"from one after; to wait, invoke `shutdown` and then `start` with `wait_for_report`.",
			},
			"timeout": schema.StringAttribute{
				Optional: true,
				Description: "How long the whole action may take, as a Go duration. Default `5m`. A shutdown " +
					"without `force` that has not finished by then fails.",
				Validators: []validator.String{positiveDuration},
			},
		},
	}
}

// ValidateConfig refuses, on their own lines, the options the operation
// does not take.
func (a *vmPowerAction) ValidateConfig(ctx context.Context, req action.ValidateConfigRequest, resp *action.ValidateConfigResponse) {
	var m vmPowerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Operation.IsUnknown() || m.Operation.IsNull() {
		return
	}
	op := vmlife.PowerOp(m.Operation.ValueString())
	if m.Force.ValueBool() && op != vmlife.PowerShutdown {
		resp.Diagnostics.AddAttributeError(path.Root("force"), "force is for shutdown only",
			fmt.Sprintf("operation %q does not force anything: remove force, or use operation = \"shutdown\".", op))
	}
	if m.WaitForReport.ValueBool() && op != vmlife.PowerStart && op != vmlife.PowerReset {
		resp.Diagnostics.AddAttributeError(path.Root("wait_for_report"), "wait_for_report is for start and reset only",
			fmt.Sprintf("After %q a report from the guest cannot be told from one it wrote before the operation took "+
				"effect. To reboot and wait, invoke operation = \"shutdown\" and then operation = \"start\" with "+
				"wait_for_report = true.", op))
	}
}

func (a *vmPowerAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var m vmPowerModel
	c := a.data.modelClient(ctx, req.Config, &m, &m.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, validatedDuration(m.Timeout, defaultPowerTimeout))
	defer cancel()
	op := vmlife.PowerOp(m.Operation.ValueString())
	res, err := vmlife.RunPower(ctx, c, vmlife.PowerRequest{
		Domain:        m.VM.ValueString(),
		Op:            op,
		Force:         m.Force.ValueBool(),
		WaitForReport: m.WaitForReport.ValueBool(),
		Progress: func(line string) {
			if resp.SendProgress != nil {
				resp.SendProgress(action.InvokeProgressEvent{Message: line})
			}
		},
	})
	if err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Power operation %s on VM %s failed", op, m.VM.ValueString()), err)
		return
	}
	if res.Forced {
		resp.Diagnostics.AddWarning("VM "+m.VM.ValueString()+" was forced off",
			fmt.Sprintf("The guest did not power off on request (through the %s) within the timeout, so it was forced off as force = true asks: whatever it had not written to disk is lost.", res.Via))
	}
}
