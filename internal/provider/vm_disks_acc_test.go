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
	return providerBlock(env.URI) + tinyGuest(t, env.Pool, "tiny", "test", prefix+"seed.iso", prefix+"vm", "tiny", fmt.Sprintf(`  disk = {
    base_pool   = %q
    base_volume = %q
    pool        = %q
    size_gib    = %d
  }
`, env.ImagePool, env.Base, env.Pool, sizeGiB))
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

// tinyDataDisksVMs are two running tiny-guest VMs, a and b, with the given
// data_disks bodies.
func tinyDataDisksVMs(t *testing.T, env acctest.VMEnv, prefix, disksA, disksB string) string {
	t.Helper()
	vm := func(n, disks string) string {
		return tinyGuest(t, env.Pool, n, n, prefix+n+"-seed.iso", prefix+n, "tiny"+n, "  data_disks = ["+disks+"]\n")
	}
	return providerBlock(env.URI) + vm("a", disksA) + vm("b", disksB)
}

// checkBlockList checks virsh domblklist of a domain (what QEMU has now,
// not only the definition) for each volume in has, and for none in lacks.
func checkBlockList(env acctest.VMEnv, name string, has, lacks []string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.Virsh(env.URI, "domblklist", name)
		if err != nil {
			return err
		}
		for _, v := range has {
			if !strings.Contains(out, v) {
				return fmt.Errorf("virsh domblklist %s lacks %s:\n%s", name, v, out)
			}
		}
		for _, v := range lacks {
			if strings.Contains(out, v) {
				return fmt.Errorf("virsh domblklist %s still has %s:\n%s", name, v, out)
			}
		}
		return nil
	}
}

// checkVolumes checks which volumes of the pool exist.
func checkVolumes(env acctest.VMEnv, exist, gone []string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.Virsh(env.URI, "vol-list", env.Pool)
		if err != nil {
			return err
		}
		for _, v := range exist {
			if !strings.Contains(out, v) {
				return fmt.Errorf("volume %s/%s is gone:\n%s", env.Pool, v, out)
			}
		}
		for _, v := range gone {
			if strings.Contains(out, v) {
				return fmt.Errorf("volume %s/%s is still there:\n%s", env.Pool, v, out)
			}
		}
		return nil
	}
}

// Data disks are hot-plugged into a running VM and unplugged again with no
// restart (same domain id); removing a new disk deletes its volume, a kept
// one and an existing one stay; a kept volume attaches to a second VM as an
// existing volume; destroy deletes only the volumes Kohaku made and did not
// keep.
func TestAccVM_diskDataHotplug(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "ddisk")
	a, b := prefix+"a", prefix+"b"
	ext, scratch, kept := prefix+"ext.qcow2", a+"-scratch.qcow2", a+"-kept.qcow2"
	if out, err := acctest.Virsh(env.URI, "vol-create-as", env.Pool, ext, "64M", "--format", "qcow2"); err != nil {
		t.Fatalf("creating the existing volume: %v\n%s", err, out)
	}
	three := fmt.Sprintf(`
    { name = "scratch", size_gib = 1, pool = %[1]q },
    { name = "kept", size_gib = 1, pool = %[1]q, keep = true },
    { name = "ext", pool = %[1]q, volume = %[2]q },
  `, env.Pool, ext)
	keptOnB := fmt.Sprintf(`{ name = "moved", pool = %q, volume = %q }`, env.Pool, kept)
	var idA, idB string
	sameUUID := statecheck.CompareValue(compare.ValuesSame())
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: resource.ComposeTestCheckFunc(
			checkVolumes(env, []string{ext, kept}, []string{scratch, a + "-root", b + "-root"}),
			func(*terraform.State) error {
				for _, n := range []string{a, b} {
					if _, err := acctest.Virsh(env.URI, "domstate", n); err == nil {
						return fmt.Errorf("domain %s is still defined", n)
					}
				}
				return nil
			},
		),
		Steps: []resource.TestStep{
			{
				Config: tinyDataDisksVMs(t, env, prefix, "", ""),
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue("kohaku_vm.a", tfjsonpath.New("uuid")),
				},
				Check: resource.ComposeTestCheckFunc(checkDomID(env, a, &idA), checkDomID(env, b, &idB)),
			},
			{
				Config: tinyDataDisksVMs(t, env, prefix, three, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.a", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameUUID.AddStateValue("kohaku_vm.a", tfjsonpath.New("uuid")),
				},
				Check: resource.ComposeTestCheckFunc(
					checkBlockList(env, a, []string{scratch, kept, ext}, nil),
					acctest.CheckXML(env, a, "<serial>scratch</serial>", "<serial>kept</serial>", "<serial>ext</serial>"),
					checkDomID(env, a, &idA),
				),
			},
			{
				Config: tinyDataDisksVMs(t, env, prefix, "", ""),
				Check: resource.ComposeTestCheckFunc(
					checkBlockList(env, a, nil, []string{scratch, kept, ext}),
					checkVolumes(env, []string{ext, kept}, []string{scratch}),
					checkDomID(env, a, &idA),
				),
			},
			{
				Config: tinyDataDisksVMs(t, env, prefix, "", keptOnB),
				Check: resource.ComposeTestCheckFunc(
					checkBlockList(env, b, []string{kept}, nil),
					acctest.CheckXML(env, b, "<serial>moved</serial>"),
					checkDomID(env, b, &idB),
				),
			},
		},
	})
}
