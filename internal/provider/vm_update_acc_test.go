package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

func vmDevicesConfig(env acctest.VMEnv, name, devices string) string {
	return providerBlock(env.URI) + fmt.Sprintf(`
resource "kohaku_vm" "test" {
  name       = %q
  type       = "qemu"
  memory_mib = 128
  running    = false # PCI passthrough cannot start on a host without an IOMMU
  kernel     = %q
  initrd     = %q
  %s
}
`, name, env.Kernel, env.Initrd, devices)
}

// NICs, shared folders and PCI devices change in place: same UUID, and an
// interface keeps its MAC when another is added in front of it. A gpus entry
// must be a device on vfio-pci; anything else is refused before any change.
func TestAccVM_devicesInPlace(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "dev")
	name := prefix + "vm"
	share := t.TempDir()
	addr := "kohaku_vm.test"
	sameUUID := statecheck.CompareValue(compare.ValuesSame())
	sameMAC := statecheck.CompareValue(compare.ValuesSame())
	second := vmDevicesConfig(env, name, fmt.Sprintf(`
  network_interface = [{ type = "user", model = "e1000e" }, { type = "user" }]
  shared_folder     = [{ source = %q, tag = "kohaku_local", access_mode = "mapped", read_only = true }]
  hostdevs          = ["0000:FF:1F.7", "0000:ff:1f.6"]
`, share))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: vmDevicesConfig(env, name, `
  network_interface = [{ type = "user" }]
  hostdevs          = ["0000:ff:1f.7"]
`),
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					sameMAC.AddStateValue(addr, tfjsonpath.New("network_interface").AtSliceIndex(0).AtMapKey("mac")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("overlay_volume"), knownvalue.Null()),
				},
				Check: acctest.CheckXML(env, name, "<hostdev mode='subsystem' type='pci' managed='no'>",
					"<address domain='0x0000' bus='0xff' slot='0x1f' function='0x7'/>"),
			},
			{
				Config: second,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("network_interface").AtSliceIndex(1).AtMapKey("mac"),
						knownvalue.StringRegexp(vmMACRE)),
					plancheck.ExpectUnknownValue(addr, tfjsonpath.New("network_interface").AtSliceIndex(0).AtMapKey("mac")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					sameMAC.AddStateValue(addr, tfjsonpath.New("network_interface").AtSliceIndex(1).AtMapKey("mac")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("hostdevs"), knownvalue.SetExact([]knownvalue.Check{
						knownvalue.StringExact("0000:FF:1F.7"), knownvalue.StringExact("0000:ff:1f.6"),
					})),
				},
				Check: acctest.CheckXML(env, name,
					"<address domain='0x0000' bus='0xff' slot='0x1f' function='0x6'/>",
					"<address domain='0x0000' bus='0xff' slot='0x1f' function='0x7'/>",
					"<filesystem type='mount' accessmode='mapped'>", "<source dir='"+share+"'/>", "<target dir='kohaku_local'/>",
					"<model type='e1000e'/>"),
			},
			{Config: second, PlanOnly: true},
			{
				// A gpus entry is read from the host and must be on vfio-pci
				// (there is no such device here): refused, nothing changed.
				Config: vmDevicesConfig(env, name, `
  network_interface = [{ type = "user" }]
  gpus              = ["0000:ff:1f.7"]
`),
				ExpectError: regexp.MustCompile(`(?s)gpus\s+entry\s+"0000:ff:1f.7".*no\s+PCI\s+function\s+0000:ff:1f.7.*kohaku_gpu_binding.*Nothing\s+was\s+changed`),
			},
			{Config: second, PlanOnly: true},
		},
	})
}
