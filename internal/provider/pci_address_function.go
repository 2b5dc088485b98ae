package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/function"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

var _ function.Function = pciAddressFunction{}

// pciAddressFunction normalises the PCI address forms users copy from lspci
// and virsh into the form Kohaku's attributes and ids use.
type pciAddressFunction struct{}

func newPCIAddressFunction() function.Function { return pciAddressFunction{} }

func (pciAddressFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "pci_address"
}

func (pciAddressFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "A PCI function address in Kohaku's form.",
		Description: "Returns the PCI function address `text` names in Kohaku's form, DDDD:BB:SS.F in lower-case hex " +
			"(for example 0000:41:00.0), the form kohaku_gpu_binding's `address` takes. `text` may be " +
			"in that form, in lspci's short form BB:SS.F (domain 0000) or a libvirt node device name such as " +
			"pci_0000_41_00_0, in either case, with surrounding blanks. Anything else fails, naming what is wrong.",
		Parameters: []function.Parameter{
			function.StringParameter{
				Name:        "text",
				Description: "The address as lspci, sysfs or virsh nodedev-list print it.",
			},
		},
		Return: function.StringReturn{},
	}
}

func (pciAddressFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var text string
	resp.Error = function.ConcatFuncErrors(req.Arguments.Get(ctx, &text))
	if resp.Error != nil {
		return
	}
	a, err := domain.ParsePCIAddressForms(text)
	if err != nil {
		resp.Error = function.NewArgumentFuncError(0, err.Error())
		return
	}
	resp.Error = function.ConcatFuncErrors(resp.Result.Set(ctx, a.String()))
}
