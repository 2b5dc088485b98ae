package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// The nested host's 256 GiB BAR stand-in, passed through with a
// pci_mmio64_gib too small for it, is refused at plan time on that
// attribute, naming the size the BAR needs: the plan reads the BAR from L1's
// sysfs over SSH. Nothing is created, no guest boots.
func TestAccVM_mmioTooSmallForALargeBAR(t *testing.T) {
	h := nestedhost.RequireBigBAR(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: providerBlock(h.SSHURI) + fmt.Sprintf(`
resource "kohaku_vm" "vm" {
  name           = "kohaku-acc-bigbar-plan"
  type           = "qemu"
  memory_mib     = 128
  kernel         = "/vmlinuz"
  initrd         = "/initrd.img"
  hostdevs       = [%q]
  pci_mmio64_gib = 128
}
`, h.BigBAR),
			PlanOnly: true,
			ExpectError: messageRE("pci_mmio64_gib is too small",
				"128 GiB cannot hold the 64-bit prefetchable BARs passed through", "so at least 256 GiB; set 512"),
		}},
	})
}
