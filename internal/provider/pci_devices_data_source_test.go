package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// Filters are checked at plan time, without a host.
func TestPCIDevicesDataSource_validation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ config, want string }{
		{`vendor_id = "nvidia"`, `PCI\s+vendor\s+id\s+of\s+four\s+hex\s+digits`},
		{`vendor_id = "10de0"`, `PCI\s+vendor\s+id\s+of\s+four\s+hex\s+digits`},
		{`class_prefix = "3"`, `2,\s+4\s+or\s+6\s+hex\s+digits`},
		{`class_prefix = "03000000"`, `2,\s+4\s+or\s+6\s+hex\s+digits`},
	} {
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: protoV6Providers,
			Steps: []resource.TestStep{{
				Config:      providerBlock("test:///default") + "data \"kohaku_pci_devices\" \"x\" {\n  " + c.config + "\n}\n",
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(c.want),
			}},
		})
	}
}
