package provider

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// destroyTestTimeout is the shutdown_timeout of the destroy test's VMs: a
// destroy that took less did not wait for the guest.
const destroyTestTimeout = 15 * time.Second

// vmDestroyConfig is up to two real guests booting from overlays: "owned"
// (everything it writes goes with it) and "shared" (a writable shared folder
// outlives it). ownedMode is owned's destroy_shutdown ("" for the default).
func vmDestroyConfig(env acctest.VMEnv, prefix, share, ownedMode string, owned, shared bool) string {
	vm := func(label, extra string) string {
		return fmt.Sprintf(`
resource "kohaku_vm" %q {
  name       = %q
  type       = "qemu"
  vcpu       = 1
  memory_mib = 512

  kernel  = %q
  initrd  = %q
  cmdline = "root=/dev/vda rw console=ttyS0"

  disk = {
    base_pool   = %q
    base_volume = %q
    pool        = %q
  }

  network_interface = [{ type = "user" }]
  shutdown_timeout  = %q
%s}
`, label, prefix+label, env.Kernel, env.Initrd, env.ImagePool, env.Base, env.Pool, destroyTestTimeout.String(), extra)
	}
	cfg := providerBlock(env.URI)
	if owned {
		extra := ""
		if ownedMode != "" {
			extra = fmt.Sprintf("  destroy_shutdown  = %q\n", ownedMode)
		}
		cfg += vm("owned", extra)
	}
	if shared {
		cfg += vm("shared", fmt.Sprintf("  shared_folder = [{\n    source = %q\n    tag    = \"data\"\n  }]\n", share))
	}
	return cfg
}

// Destroy waits for the guest only when something it writes outlives the
// VM: the VM whose every disk goes with it is powered off at once, the one
// with a writable shared folder is asked to shut down first and given its
// shutdown_timeout. Changing destroy_shutdown touches nothing on the host.
func TestAccVM_destroyWaitsOnlyForData(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "dstr")
	share := t.TempDir()
	owned, shared := "kohaku_vm.owned", "kohaku_vm.shared"
	var domid string
	var began time.Time
	start := func() { began = time.Now() }
	sameRun := func(name string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			id, err := acctest.Virsh(env.URI, "domid", name)
			if err != nil {
				return err
			}
			if domid == "" {
				domid = id
			} else if id != domid {
				return fmt.Errorf("%s was restarted (domain id %s, was %s) for a change of destroy_shutdown", name, id, domid)
			}
			return nil
		}
	}
	// gone checks how the destroy of name went: a guest that was asked
	// first either powered off cleanly (its console shows it) or held the
	// destroy for the whole shutdown_timeout; one powered off at once did
	// neither.
	gone := func(name string, asked bool) resource.TestCheckFunc {
		return func(*terraform.State) error {
			took := time.Since(began)
			if out, err := acctest.Virsh(env.URI, "domstate", name); err == nil {
				return fmt.Errorf("%s is still there (%s)", name, out)
			}
			console, _ := os.ReadFile("/var/log/libvirt/qemu/" + name + "-serial.log")
			clean := strings.Contains(string(console), "reboot: Power down")
			waited := took >= destroyTestTimeout
			t.Logf("destroy of %s: %s (shutdown_timeout %s), clean power-down on its console: %t", name, took.Round(100*time.Millisecond), destroyTestTimeout, clean)
			switch {
			case asked && !clean && !waited:
				return fmt.Errorf("%s was destroyed in %s without a clean power-down: the guest was not given its shutdown_timeout (%s)", name, took, destroyTestTimeout)
			case !asked && (clean || waited):
				return fmt.Errorf("%s (every disk goes with it) was not powered off at once: destroy took %s, clean power-down %t", name, took, clean)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: vmDestroyConfig(env, prefix, share, "", true, true),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(owned, tfjsonpath.New("destroy_shutdown"), knownvalue.StringExact("auto")),
					statecheck.ExpectKnownValue(shared, tfjsonpath.New("destroy_shutdown"), knownvalue.StringExact("auto")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					acctest.CheckDomState(env, prefix+"owned", "running"), acctest.CheckDomState(env, prefix+"shared", "running"),
					sameRun(prefix+"owned")),
			},
			{
				// In place, and the guest keeps running: destroy_shutdown is
				// not part of the domain.
				Config: vmDestroyConfig(env, prefix, share, "graceful", true, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(owned, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(shared, plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(owned, tfjsonpath.New("destroy_shutdown"), knownvalue.StringExact("graceful")),
				},
				Check: sameRun(prefix + "owned"),
			},
			{
				Config: vmDestroyConfig(env, prefix, share, "", true, true),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(owned, tfjsonpath.New("destroy_shutdown"), knownvalue.StringExact("auto")),
				},
				Check: sameRun(prefix + "owned"),
			},
			{
				// The VM whose disks all go with it: off at once.
				PreConfig: start,
				Config:    vmDestroyConfig(env, prefix, share, "", false, true),
				Check:     gone(prefix+"owned", false),
			},
			{
				// The VM with a writable shared folder: asked first.
				PreConfig: start,
				Config:    providerBlock(env.URI),
				Check:     gone(prefix+"shared", true),
			},
		},
	})
}
