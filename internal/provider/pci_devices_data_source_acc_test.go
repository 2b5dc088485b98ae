package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// The nested host's GPU stand-in shows as a display device with its HDMI
// audio stand-in as the other member of its IOMMU group; kohaku_host lists
// it among its gpus, and its NUMA nodes as virsh reads them.
func TestAccPCIDevicesDataSource_nested(t *testing.T) {
	h := nestedhost.Require(t)
	group := iommuGroupOf(t, h, h.GPU)
	display := "data.kohaku_pci_devices.display"
	qemu := "data.kohaku_pci_devices.qemu"
	all := "data.kohaku_pci_devices.all"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: providerBlock(h.URI) + `
data "kohaku_pci_devices" "display" {
  class_prefix = "03"
}
data "kohaku_pci_devices" "qemu" {
  vendor_id = "0x1234"
}
data "kohaku_pci_devices" "all" {}
data "kohaku_host" "nested" {}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(display, tfjsonpath.New("iommu_enabled"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue(display, tfjsonpath.New("devices"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"address":             knownvalue.StringExact(h.GPU),
						"vendor_id":           knownvalue.StringExact("1234"),
						"vendor_name":         knownvalue.StringExact(""),
						"product_id":          knownvalue.StringExact("1111"),
						"product_name":        knownvalue.StringExact(""),
						"class":               knownvalue.StringExact("030000"),
						"class_name":          knownvalue.StringExact("VGA compatible controller"),
						"driver":              knownvalue.StringExact("nvidia"),
						"iommu_group":         knownvalue.Int64Exact(group),
						"iommu_group_members": knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(h.GPU), knownvalue.StringExact(h.GPUAudio)}),
						"numa_node":           knownvalue.Int64Exact(1), // behind the expander bridge on node 1
					}),
				})),
				// vendor 1234 is QEMU's: the VGA and the edu device, sorted by address
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices").AtSliceIndex(0).AtMapKey("address"), knownvalue.StringExact(h.EDU)),
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices").AtSliceIndex(0).AtMapKey("driver"), knownvalue.StringExact("")),
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices").AtSliceIndex(1).AtMapKey("address"), knownvalue.StringExact(h.GPU)),
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices"), knownvalue.ListSizeExact(2)),
				// the same stand-in as kohaku_host's GPU, checked field by field against virsh
				statecheck.ExpectKnownValue("data.kohaku_host.nested", tfjsonpath.New("gpus").AtSliceIndex(0).AtMapKey("address"), knownvalue.StringExact(h.GPU)),
				gpusCheck(t, h.URI, "data.kohaku_host.nested"),
				numaCheck(t, h.URI, "data.kohaku_host.nested"),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckTypeSetElemNestedAttrs(all, "devices.*", map[string]string{
					"address": h.GPUAudio, "class_name": "Audio device", "driver": "snd_hda_intel",
					"vendor_name": "Intel Corporation",
				}),
				resource.TestCheckTypeSetElemNestedAttrs(all, "devices.*", map[string]string{
					"address": h.NIC, "class": "020000", "driver": "e1000e",
				}),
			),
		}},
	})
}
