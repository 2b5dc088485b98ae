package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/function"
	"github.com/hashicorp/terraform-plugin-framework/provider"
)

var _ provider.ProviderWithFunctions = (*kohakuProvider)(nil)

// Functions are Kohaku's provider functions, called as
// provider::kohaku::<name>(...) from Terraform 1.8 and OpenTofu 1.7 on.
func (p *kohakuProvider) Functions(_ context.Context) []func() function.Function {
	return []func() function.Function{
		newSeedMACFunction,
		newPCIAddressFunction,
	}
}
