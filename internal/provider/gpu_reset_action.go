package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var _ action.ActionWithConfigure = (*gpuResetAction)(nil)

// gpuResetAction resets a GPU bound to vfio-pci (Terraform 1.14 and
// later), through gpubind.Reset.
type gpuResetAction struct {
	configuredAction
}

func newGPUResetAction() action.Action { return &gpuResetAction{} }

type gpuResetModel struct {
	Host    types.String `tfsdk:"host"`
	Address types.String `tfsdk:"address"`
	Timeout types.String `tfsdk:"timeout"`
}

// defaultGPUResetTimeout bounds an action that sets no timeout.
const defaultGPUResetTimeout = 2 * time.Minute

func (a *gpuResetAction) Metadata(_ context.Context, req action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_gpu_reset"
}

func (a *gpuResetAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Resets a GPU bound to vfio-pci, and the other functions of its IOMMU group, for instance " +
			"to clear a GPU a crashed guest left in a bad state before a VM starts with it again. Needs Terraform " +
			"1.14 or later: invoke it with `terraform apply -invoke=action.kohaku_gpu_reset.<name>`, or from a " +
			"resource's `lifecycle.action_trigger`. Each function is reset by the host's kernel with the first " +
			"method its sysfs `reset_method` lists (function-level, power-management, slot or bus reset); a " +
			"function with none of its own (often a GPU's audio function) is reset with its device. libvirt's " +
			"node-device reset (`virsh nodedev-reset`) is not used: it does nothing to a function on vfio-pci. So " +
			"the host must be reached over a local (`qemu:///system`) or `qemu+ssh://` connection; over tcp or " +
			"tls the action fails before doing anything. Refused, before anything is reset, while a running " +
			"domain holds any function of the group (the message names the domain: stop it first), and for a " +
			"group with a function that is not on vfio-pci (bind it with kohaku_gpu_binding first). Prints a " +
			"progress line for each function. When the reset succeeds, it also returns a quarantined GPU of the " +
			"group (one that could not be reset after its last VM) to placement, and says so: it is the " +
			"operator's way to give such a GPU back once checked. A failed reset clears nothing. A reset clears " +
			"the device's memory only where the device does so (see the GPU guide). Changes nothing in any " +
			"resource's state.",
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:    true,
				Description: "The key of the provider's `hosts` map the GPU is on. Default: the provider's own host.",
			},
			"address": schema.StringAttribute{
				Required: true,
				Description: "PCI address of the GPU, or of any function of its IOMMU group, as `DDDD:BB:SS.F` in " +
					"lower-case hex, e.g. `0000:01:00.0` or `kohaku_gpu_binding.gpu.address`. The whole group is reset.",
				Validators: []validator.String{pciAddressValidator{}},
			},
			"timeout": schema.StringAttribute{
				Optional:    true,
				Description: "How long the whole action may take, as a Go duration. Default `2m`.",
				Validators:  []validator.String{positiveDuration},
			},
		},
	}
}

func (a *gpuResetAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var m gpuResetModel
	c := a.data.modelClient(ctx, req.Config, &m, &m.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	target, _ := vfio.ParseAddress(m.Address.ValueString()) // validated
	ctx, cancel := context.WithTimeout(ctx, validatedDuration(m.Timeout, defaultGPUResetTimeout))
	defer cancel()
	_, _, err := gpubind.ResetAndReturn(ctx, c, &claim.Claimer{Host: c}, target, a.data.healthCheck(m.Host.ValueString(), c), func(line string) {
		if resp.SendProgress != nil {
			resp.SendProgress(action.InvokeProgressEvent{Message: line})
		}
	})
	if err != nil {
		addError(&resp.Diagnostics, fmt.Sprintf("Resetting GPU %s failed", target), err)
	}
}
