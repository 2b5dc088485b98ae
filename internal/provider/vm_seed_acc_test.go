package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

func vmSeedConfig(env acctest.VMEnv, prefix string, withVM bool) string {
	cfg := providerBlock(env.URI) + fmt.Sprintf(`
resource "kohaku_seed" "test" {
  name    = "%[1]sseed.iso"
  pool    = %[2]q
  network = [{ dhcp4 = true }, { dhcp4 = true }]
}
`, prefix, env.Pool)
	if withVM {
		cfg += fmt.Sprintf(`
resource "kohaku_vm" "test" {
  name       = "%[1]svm"
  type       = "qemu"
  memory_mib = 128
  running    = false
  kernel     = %[2]q
  initrd     = %[3]q
  seed_id    = kohaku_seed.test.id

  # The first takes the seed's MAC, the second keeps its own.
  network_interface = [
    { type = "user" },
    { type = "user", mac = "52:54:00:aa:bb:cc" },
  ]
}
`, prefix, env.Kernel, env.Initrd)
	}
	return cfg
}

// The seed is attached read-only on the q35 machine's SATA bus, NICs without
// a mac take the seed's, and destroying the VM leaves the seed alone.
func TestAccVM_seed(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "seed")
	seedMAC := statecheck.CompareValuePairs(
		"kohaku_vm.test", tfjsonpath.New("network_interface").AtSliceIndex(0).AtMapKey("mac"),
		"kohaku_seed.test", tfjsonpath.New("macs").AtSliceIndex(0),
		compare.ValuesSame())
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: vmSeedConfig(env, prefix, true),
				ConfigStateChecks: []statecheck.StateCheck{
					seedMAC,
					statecheck.CompareValuePairs("kohaku_vm.test", tfjsonpath.New("seed_id"), "kohaku_seed.test", tfjsonpath.New("id"), compare.ValuesSame()),
				},
				Check: acctest.CheckXML(env, prefix+"vm",
					"<source pool='"+env.Pool+"' volume='"+prefix+"seed.iso'/>",
					"<target dev='sda' bus='sata'/>",
					"<readonly/>",
					"<mac address='52:54:00:aa:bb:cc'/>",
				),
			},
			{
				// Import by UUID finds the seed from the CD-ROM.
				ResourceName: "kohaku_vm.test",
				ImportState:  true,
				ImportStateIdFunc: func(s *terraform.State) (string, error) {
					return s.RootModule().Resources["kohaku_vm.test"].Primary.Attributes["uuid"], nil
				},
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"shutdown_timeout"},
			},
			{
				Config: vmSeedConfig(env, prefix, false),
				Check: func(*terraform.State) error {
					if _, err := acctest.Virsh(env.URI, "vol-info", "--pool", env.Pool, prefix+"seed.iso"); err != nil {
						return fmt.Errorf("destroying the VM deleted its seed: %v", err)
					}
					return nil
				},
			},
		},
	})
}

// The documented recipe for a seed content change (the VM guide's
// replace_triggered_by): the seed's content changes (a new hostname, so a
// new instance id; re-uploaded in place, same id), the plan replaces the
// VM that uses it, and the new guest boots on the new content: the tiny
// guest prints the instance id it finds on its seed, and the replacement
// became ready (wait_for channel) on the new one.
func TestAccVM_seedChangeReplaces(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "rtb")
	vm := prefix + "vm"
	config := func(hostname string) string {
		return providerBlock(env.URI) + tinyGuest(t, env.Pool, "tiny", "test", prefix+"seed.iso", vm, hostname,
			"  lifecycle {\n    replace_triggered_by = [kohaku_seed.tiny]\n  }\n")
	}
	vmID := statecheck.CompareValue(compare.ValuesDiffer())
	seedID := statecheck.CompareValue(compare.ValuesSame())
	iid := statecheck.CompareValue(compare.ValuesDiffer())
	bootedOn := func(s *terraform.State) error {
		want := s.RootModule().Resources["kohaku_seed.tiny"].Primary.Attributes["instance_id"]
		got := seedIIDs(t, vm)
		if want == "" || len(got) == 0 || got[len(got)-1] != want {
			return fmt.Errorf("the guest's last boot found instance ids %q, want it on the seed's %q", got, want)
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: config("tiny"),
				Check:  bootedOn,
				ConfigStateChecks: []statecheck.StateCheck{
					vmID.AddStateValue("kohaku_vm.test", tfjsonpath.New("uuid")),
					seedID.AddStateValue("kohaku_seed.tiny", tfjsonpath.New("id")),
					iid.AddStateValue("kohaku_seed.tiny", tfjsonpath.New("instance_id")),
				},
			},
			{
				Config: config("tiny-two"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_seed.tiny", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("kohaku_vm.test", plancheck.ResourceActionReplace),
				}},
				Check: bootedOn,
				ConfigStateChecks: []statecheck.StateCheck{
					vmID.AddStateValue("kohaku_vm.test", tfjsonpath.New("uuid")),
					seedID.AddStateValue("kohaku_seed.tiny", tfjsonpath.New("id")),
					iid.AddStateValue("kohaku_seed.tiny", tfjsonpath.New("instance_id")),
				},
			},
		},
	})
}
