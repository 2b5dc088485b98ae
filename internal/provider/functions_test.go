package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// functionsConfig declares the provider by its source, as a module calling
// provider::kohaku::... must.
const functionsConfig = `terraform {
  required_providers {
    kohaku = { source = "hashicorp/kohaku" }
  }
}
`

// The function gives what the seed itself derives for each NIC index.
func TestSeedMACFunction(t *testing.T) {
	t.Parallel()
	outputs := ""
	checks := []statecheck.StateCheck{}
	for i, name := range []string{"web-seed.iso", "gpu-vm-1", ""} {
		for _, index := range []int{0, 1, 7} {
			out := fmt.Sprintf("mac_%d_%d", i, index)
			outputs += fmt.Sprintf("output %q {\n  value = provider::kohaku::seed_mac(%q, %d)\n}\n", out, name, index)
			checks = append(checks, statecheck.ExpectKnownOutputValue(out, knownvalue.StringExact(seed.DefaultMAC(name, index))))
		}
	}
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_8_0)},
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            functionsConfig + outputs,
			ConfigStateChecks: checks,
		}, {
			Config:      functionsConfig + "output \"bad\" {\n  value = provider::kohaku::seed_mac(\"vm\", -1)\n}\n",
			ExpectError: wrappedText("index -1 is not a NIC index: want 0 to 1023"),
		}},
	})
}

// The function gives what the PCI parser reads, in Kohaku's form, and
// refuses what it refuses.
func TestPCIAddressFunction(t *testing.T) {
	t.Parallel()
	outputs := ""
	checks := []statecheck.StateCheck{}
	for i, in := range []string{"41:00.0", "0000:41:00.0", "pci_0000_41_00_0", "PCI_0000_AF_1F_7", " 0001:02:1f.7 "} {
		a, err := domain.ParsePCIAddressForms(in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := domain.ParsePCIAddress(a.String()); err != nil {
			t.Fatalf("%q normalises to %s, which the strict parser refuses: %v", in, a, err)
		}
		out := fmt.Sprintf("pci_%d", i)
		outputs += fmt.Sprintf("output %q {\n  value = provider::kohaku::pci_address(%q)\n}\n", out, in)
		checks = append(checks, statecheck.ExpectKnownOutputValue(out, knownvalue.StringExact(a.String())))
	}
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_8_0)},
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            functionsConfig + outputs,
			ConfigStateChecks: checks,
		}, {
			Config:      functionsConfig + "output \"bad\" {\n  value = provider::kohaku::pci_address(\"41:20.0\")\n}\n",
			ExpectError: wrappedText(`invalid PCI address "41:20.0": slot "20": at most 0x1f`),
		}, {
			Config:      functionsConfig + "output \"bad\" {\n  value = provider::kohaku::pci_address(\"pci_0000_41_00\")\n}\n",
			ExpectError: wrappedText("4 '_'-separated fields after pci_, got 3"),
		}},
	})
}

// wrappedText matches text in Terraform's output, which wraps a diagnostic's
// detail at any space.
func wrappedText(text string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(text), " ", `\s+`))
}
