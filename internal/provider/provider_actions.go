package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/provider"
)

var _ provider.ProviderWithActions = (*kohakuProvider)(nil)

// Actions are Kohaku's actions (Terraform 1.14 and later; older CLIs and
// OpenTofu do not ask for them).
func (p *kohakuProvider) Actions(_ context.Context) []func() action.Action {
	return []func() action.Action{
		newVMPowerAction,
		newGPUResetAction,
		newVMRevertAction,
	}
}
