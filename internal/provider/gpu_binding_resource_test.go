package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// Addresses are checked at plan time, before any host is asked.
func TestGPUBinding_validation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ config, want string }{
		{`address = "01:00.0"`, `(?s)Invalid PCI address.*did\s+you\s+mean\s+0000:01:00.0`},
		{`address = "0000:01:00.8"`, `(?s)Invalid PCI address.*for\s+example\s+0000:01:00.0`},
		{`address = "pci_0000_01_00_0"`, `Invalid PCI address`},
		{"address = \"0000:01:00.0\"\n  functions = [\"0000:01:00.0\", \"1:0.1\"]", `(?s)Invalid PCI address.*1:0.1`},
		{`address = "0000:AF:00.0"`, `(?s)PCI address not in canonical form.*"0000:af:00.0"`},
	} {
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: protoV6Providers,
			Steps: []resource.TestStep{{
				Config:      providerBlock("test:///default") + "resource \"kohaku_gpu_binding\" \"x\" {\n  " + c.config + "\n}\n",
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(c.want),
			}},
		})
	}
}

// An import ID is a PCI address or <host>/<address>; anything else is
// refused with the expected form.
func TestGPUBinding_importID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"gpu", "gpu2/01:00.0", "/0000:01:00.0", "0000:01:00.0/"} {
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: protoV6Providers,
			Steps: []resource.TestStep{{
				Config:        providerBlock("test:///default") + "resource \"kohaku_gpu_binding\" \"x\" {\n  address = \"0000:01:00.0\"\n}\n",
				ResourceName:  "kohaku_gpu_binding.x",
				ImportState:   true,
				ImportStateId: id,
				ExpectError:   regexp.MustCompile(`(?s)Invalid import ID.*by\s+its\s+PCI\s+address.*<host>/<address>`),
			}},
		})
	}
}

func TestGPUBindingID(t *testing.T) {
	t.Parallel()
	a, _ := vfio.ParseAddress("0000:AF:00.1")
	if got := bindingID("", a); got != "0000:af:00.1" {
		t.Errorf("got %s", got)
	}
	if got := bindingID("gpu2", a); got != "gpu2/0000:af:00.1" {
		t.Errorf("got %s", got)
	}
	// kohaku_vm reads the same id back.
	if host, addr := vmlife.ParseGPUID(bindingID("gpu2", a)); host != "gpu2" || addr != "0000:af:00.1" {
		t.Errorf("kohaku_vm reads %q %q", host, addr)
	}
}
