package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// vmBootConfig is a VM that boots the test guest's kernel from an overlay on
// the test image, under TCG, with user-mode networking and one 9p share.
func vmBootConfig(env acctest.VMEnv, name, share string, memory int, running bool) string {
	return providerBlock(env.URI) + fmt.Sprintf(`
resource "kohaku_vm" "test" {
  name       = %q
  type       = "qemu"
  vcpu       = 1
  memory_mib = %d
  running    = %t

  kernel  = %q
  initrd  = %q
  cmdline = "root=/dev/vda rw console=ttyS0"

  disk = {
    base_pool   = %q
    base_volume = %q
    pool        = %q
  }

  network_interface = [{ type = "user" }]

  shared_folder = [{
    source = %q
    tag    = "kohaku_shared"
  }]

  # The guest may still be booting (TCG is slow) and ignore ACPI: do not wait long.
  shutdown_timeout = "2s"
}
`, name, memory, running, env.Kernel, env.Initrd, env.ImagePool, env.Base, env.Pool, share)
}

func TestAccVM_lifecycle(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "life")
	name := prefix + "vm"
	share := t.TempDir()
	addr := "kohaku_vm.test"
	overlay := env.Pool + "/" + name + "-root.qcow2"
	sameUUID := statecheck.CompareValue(compare.ValuesSame())
	newUUID := statecheck.CompareValue(compare.ValuesDiffer())

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				// Create: overlay, define, start. Only libvirt's word that it
				// runs is awaited, not the guest's boot.
				Config: vmBootConfig(env, name, share, 512, true),
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					newUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("uuid"), knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("overlay_volume"), knownvalue.StringExact(overlay)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("running"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cpu_mode"), knownvalue.StringExact("maximum")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("serial_log_path"), knownvalue.StringExact("/var/log/libvirt/qemu/"+name+"-serial.log")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("network_interface").AtSliceIndex(0).AtMapKey("mac"),
						knownvalue.StringRegexp(vmMACRE)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("shared_folder").AtSliceIndex(0).AtMapKey("access_mode"), knownvalue.StringExact("passthrough")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					acctest.CheckDomState(env, name, "running"),
					acctest.CheckXML(env, name,
						"<source dir='"+share+"'/>", "<target dir='kohaku_shared'/>", // the 9p share
						"<source pool='"+env.Pool+"' volume='"+name+"-root.qcow2'/>",
						"<kernel>"+env.Kernel+"</kernel>",
						"<memory unit='KiB'>524288</memory>",
						"<type arch='x86_64' machine='pc-q35",
					),
					vmCheckOverlayBacking(env, name+"-root.qcow2"),
				),
			},
			{
				// Memory changes in place: same UUID, redefined and restarted.
				Config: vmBootConfig(env, name, share, 640, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("memory_mib"), knownvalue.Int64Exact(640)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					acctest.CheckDomState(env, name, "running"),
					acctest.CheckXML(env, name, "<memory unit='KiB'>655360</memory>"),
					vmCheckLiveMemory(env, name, "655360"),
				),
			},
			{
				Config: vmBootConfig(env, name, share, 640, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("running"), knownvalue.Bool(false)),
				},
				Check: acctest.CheckDomState(env, name, "shut off"),
			},
			{
				Config: vmBootConfig(env, name, share, 640, true),
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("running"), knownvalue.Bool(true)),
				},
				Check: acctest.CheckDomState(env, name, "running"),
			},
			{
				// Import by name reads every attribute back from the domain.
				// shutdown_timeout is not part of the domain: import gives
				// the default and the next apply sets it in place. guest is
				// no part of it either: create waited for nothing (null),
				// and the import reads the addresses when the guest's agent
				// answers by then.
				ResourceName:            addr,
				ImportState:             true,
				ImportStateId:           name,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"shutdown_timeout", "guest"},
			},
			{
				// Nothing changed: the plan is empty.
				Config:   vmBootConfig(env, name, share, 640, true),
				PlanOnly: true,
			},
			{
				// Removed behind Terraform's back: the plan notices.
				PreConfig: func() {
					vmMustVirsh(t, env, "destroy", name)
					vmMustVirsh(t, env, "undefine", "--nvram", name)
				},
				Config:             vmBootConfig(env, name, share, 640, true),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// Applying replaces it: the leftover overlay is deleted and made anew.
				Config: vmBootConfig(env, name, share, 640, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					newUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("overlay_volume"), knownvalue.StringExact(overlay)),
				},
				Check: acctest.CheckDomState(env, name, "running"),
			},
		},
	})
}

// vmMACRE matches a MAC libvirt assigns.
var vmMACRE = regexp.MustCompile(`^52:54:00(:[0-9a-f]{2}){3}$`)

func vmMustVirsh(t *testing.T, env acctest.VMEnv, args ...string) {
	t.Helper()
	if out, err := acctest.Virsh(env.URI, args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// vmCheckOverlayBacking checks with virsh that the overlay is a qcow2 volume
// backed by the test image.
func vmCheckOverlayBacking(env acctest.VMEnv, vol string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		base, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.ImagePool, env.Base)
		if err != nil {
			return err
		}
		out, err := acctest.Virsh(env.URI, "vol-dumpxml", "--pool", env.Pool, vol)
		if err != nil {
			return err
		}
		_, backing, _ := strings.Cut(out, "<backingStore>")
		if !strings.Contains(out, "<format type='qcow2'/>") || !strings.Contains(backing, "<path>"+base+"</path>") {
			return fmt.Errorf("overlay %s is not a qcow2 volume backed by %s:\n%s", vol, base, out)
		}
		return nil
	}
}

// vmCheckLiveMemory checks the running domain's memory in KiB.
func vmCheckLiveMemory(env acctest.VMEnv, name, kib string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.Virsh(env.URI, "dominfo", name)
		if err != nil {
			return err
		}
		if !regexp.MustCompile(`Max memory:\s+` + kib + ` KiB`).MatchString(out) {
			return fmt.Errorf("virsh dominfo %s does not show %s KiB:\n%s", name, kib, out)
		}
		return nil
	}
}
