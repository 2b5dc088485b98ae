package provider

import (
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
)

// defaultGPUHealthTimeout bounds the operator's health check unless its
// timeout says otherwise.
const defaultGPUHealthTimeout = 2 * time.Minute

type gpuHealthModel struct {
	Command types.String `tfsdk:"command"`
	Timeout types.String `tfsdk:"timeout"`
}

// gpuHealth is one host's health check as Configure resolved it.
type gpuHealth struct {
	command string
	timeout time.Duration
}

func gpuHealthSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		Description: "A check of your own that a GPU is fit for its next tenant, run on the host (over the " +
			"host's own connection: local or SSH, not tcp or tls) after a placed VM's destroy has reset the GPU, " +
			"and before the `kohaku_gpu_reset` action returns a quarantined GPU. The command runs through the " +
			"host's shell with the GPU's PCI address as its one argument and in `KOHAKU_GPU` (for example " +
			"`/usr/local/bin/gpu-ok`, which might run `nvidia-smi -q -d ECC` or a burn-in). Exit status 0 " +
			"gives the GPU back to placement; any other, or running past `timeout`, quarantines it as a failed " +
			"reset would, with the last lines of its output as the reason. Unset: no check, and a reset that " +
			"succeeds gives the GPU back. It is configuration you trust: it runs as the host connection's user.",
		Attributes: map[string]schema.Attribute{
			"command": schema.StringAttribute{
				Required:    true,
				Description: "The command line, run by the host's `/bin/sh` with the GPU's address appended.",
				Validators:  []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"timeout": schema.StringAttribute{
				Optional:    true,
				Description: "How long the check may run, as a Go duration (`90s`, `5m`). Default `2m`.",
				Validators:  []validator.String{positiveDuration},
			},
		},
	}
}

// resolveGPUHealth reads a health check block; nil when there is none.
func resolveGPUHealth(m *gpuHealthModel) *gpuHealth {
	if m == nil {
		return nil
	}
	h := &gpuHealth{command: m.Command.ValueString(), timeout: defaultGPUHealthTimeout}
	if d, err := time.ParseDuration(m.Timeout.ValueString()); err == nil && d > 0 {
		h.timeout = d
	}
	return h
}

// healthCheck is the health check of the named host for c; nil when the
// host has none.
func (pd *providerData) healthCheck(host string, c hosts.Host) gpubind.HealthCheck {
	if pd == nil {
		return nil
	}
	h := pd.health[host]
	if h == nil {
		return nil
	}
	return gpubind.CommandCheck(c, h.command, h.timeout)
}
