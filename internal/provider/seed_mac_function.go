package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/function"

	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

var _ function.Function = seedMACFunction{}

// seedMACFunction exposes the MAC a seed derives for a NIC whose mac is
// empty, so a VM's NIC can be given the same address without repeating the
// derivation in HCL.
type seedMACFunction struct{}

func newSeedMACFunction() function.Function { return seedMACFunction{} }

func (seedMACFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "seed_mac"
}

func (seedMACFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "The MAC address a kohaku_seed derives for one of its NICs.",
		Description: "Returns the MAC address a kohaku_seed named `name` writes into its network config for the NIC at " +
			"`index` when that NIC's `mac` is empty: 52:54:00 (QEMU's locally administered prefix) followed by the first " +
			"three bytes of SHA3-224 of the name for index 0, and of `name/index` for the others. Give a VM's " +
			"network_interface the same value so the guest's network config matches the NIC it is meant for.",
		Parameters: []function.Parameter{
			function.StringParameter{
				Name:        "name",
				Description: "The seed's name (its `name` attribute, the volume name).",
			},
			function.Int64Parameter{
				Name:        "index",
				Description: "The NIC's index in the seed's `network` list, from 0.",
			},
		},
		Return: function.StringReturn{},
	}
}

func (seedMACFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var name string
	var index int64
	resp.Error = function.ConcatFuncErrors(req.Arguments.Get(ctx, &name, &index))
	if resp.Error != nil {
		return
	}
	if index < 0 || index > maxSeedNICIndex {
		resp.Error = function.NewArgumentFuncError(1, fmt.Sprintf("index %d is not a NIC index: want 0 to %d", index, maxSeedNICIndex))
		return
	}
	resp.Error = function.ConcatFuncErrors(resp.Result.Set(ctx, seed.DefaultMAC(name, int(index))))
}

// maxSeedNICIndex bounds seed_mac's index well above any NIC count a domain
// takes, so a typo such as a byte count fails instead of deriving a MAC.
const maxSeedNICIndex = 1023
