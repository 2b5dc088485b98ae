package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// tinyDiskVM is a running VM booting the tiny guest's kernel and initrd,
// with an overlay of the test base image of sizeGiB as vda: no OS on the
// disk is needed to prove what the host sees.
func tinyDiskVM(t *testing.T, env acctest.VMEnv, prefix string, sizeGiB int) string {
	t.Helper()
	kernel := acctest.Env(t, "KOHAKU_TEST_TINY_KERNEL")
	initrd := acctest.Env(t, "KOHAKU_TEST_TINY_INITRD")
	return providerBlock(env.URI) + fmt.Sprintf(`
resource "kohaku_seed" "tiny" {
  name     = "%[1]sseed.iso"
  pool     = %[2]q
  hostname = "tiny"
}

resource "kohaku_vm" "test" {
  name       = "%[1]svm"
  type       = "qemu"
  memory_mib = 96
  kernel     = %[3]q
  initrd     = %[4]q
  cmdline    = "console=ttyS0 quiet mitigations=off no_timer_check panic=1"
  seed_id    = kohaku_seed.tiny.id
  wait_for   = "channel"
  disk = {
    base_pool   = %[5]q
    base_volume = %[6]q
    pool        = %[2]q
    size_gib    = %[7]d
  }
}
`, prefix, env.Pool, kernel, initrd, env.ImagePool, env.Base, sizeGiB)
}

// checkBlockCapacity compares the capacity of a running domain's disk, as
// QEMU reports it (virsh domblkinfo), with want bytes.
func checkBlockCapacity(env acctest.VMEnv, name, dev string, want int64) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.Virsh(env.URI, "domblkinfo", name, dev)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "Capacity:" && f[1] == fmt.Sprint(want) {
				return nil
			}
		}
		return fmt.Errorf("virsh domblkinfo %s %s:\n%s\nwant capacity %d", name, dev, out, want)
	}
}

// checkDomID records the running domain's id (which changes on every start)
// into id, or compares it with the one recorded.
func checkDomID(env acctest.VMEnv, name string, id *string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.Virsh(env.URI, "domid", name)
		if err != nil {
			return err
		}
		switch {
		case out == "-" || out == "":
			return fmt.Errorf("domain %s is not running", name)
		case *id == "":
			*id = out
		case out != *id:
			return fmt.Errorf("domain %s has id %s, was %s: it restarted", name, out, *id)
		}
		return nil
	}
}

// A larger disk.size_gib grows the boot disk of a running VM in place: the
// same domain (UUID), the same overlay volume, QEMU sees the new capacity at
// once, and the domain did not restart (same domain id). A smaller size is
// refused at plan on disk.size_gib.
func TestAccVM_diskGrowsInPlace(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "grow")
	name := prefix + "vm"
	addr := "kohaku_vm.test"
	sameUUID := statecheck.CompareValue(compare.ValuesSame())
	sameOverlay := statecheck.CompareValue(compare.ValuesSame())
	var domID string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: tinyDiskVM(t, env, prefix, 4),
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					sameOverlay.AddStateValue(addr, tfjsonpath.New("overlay_volume")),
				},
				Check: resource.ComposeTestCheckFunc(
					checkBlockCapacity(env, name, "vda", 4<<30),
					checkDomID(env, name, &domID),
				),
			},
			{
				Config: tinyDiskVM(t, env, prefix, 5),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue(addr, tfjsonpath.New("uuid")),
					sameOverlay.AddStateValue(addr, tfjsonpath.New("overlay_volume")),
				},
				Check: resource.ComposeTestCheckFunc(
					checkBlockCapacity(env, name, "vda", 5<<30),
					checkDomID(env, name, &domID),
				),
			},
			{
				Config:      tinyDiskVM(t, env, prefix, 3),
				ExpectError: regexp.MustCompile(`(?s)Disk cannot shrink.*would be lost.*-replace=`),
			},
			{
				// The refused plan changed nothing.
				Config: tinyDiskVM(t, env, prefix, 5),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
				Check: resource.ComposeTestCheckFunc(
					checkBlockCapacity(env, name, "vda", 5<<30),
					checkDomID(env, name, &domID),
				),
			},
		},
	})
}
