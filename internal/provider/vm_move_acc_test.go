package provider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// A running VM moves cold from the local test host to the nested host (two
// real libvirtds): the tiny guest, with a boot overlay on a small raw base
// image (a kohaku_image on each host; the VM names its own host's, so
// disk.image changes with host, as a fleet's VM's does) and a data disk
// Kohaku made, each holding a marker. After the move the domain on the
// nested host has the same UUID and MAC and runs, both volumes read back
// from the nested host hold their markers (the overlay flattened: no
// backing file), nothing of the VM is left on the local host, and the next
// plan is empty. Then it moves back, waiting for the guest this time.
//
// The seed belongs to its kohaku_seed, which stays on the local host: the
// move copies it to the nested host (which lacks it), that copy is the
// VM's, and the VM's destroy deletes it there. Two boots in all: create,
// and after the move.
func TestAccVM_moveCold(t *testing.T) {
	env := acctest.NewVMEnv(t)
	h := nestedhost.Require(t)
	kernel := acctest.Env(t, "KOHAKU_TEST_TINY_KERNEL")
	initrd := acctest.Env(t, "KOHAKU_TEST_TINY_INITRD")
	prefix := vmTestPrefix(t, env, "mv")
	name, base, seed := prefix+"vm", prefix+"base.raw", prefix+"seed.iso"
	nonce := fmt.Sprintf("%d", time.Now().UnixNano())
	rootMarker, dataMarker := "root-"+nonce, "data-"+nonce

	prepareNestedForMove(t, h, env.Pool, kernel, initrd)
	// The base image: 1 MiB raw whose first line is the root marker.
	local := func(args ...string) string {
		t.Helper()
		out, err := acctest.Virsh(env.URI, args...)
		if err != nil {
			t.Fatalf("virsh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// A kohaku_image of it on each host: the VM names the one on its own
	// host (disk.image), so the move changes disk.image with host, which is
	// the common shape of a fleet's VM and must move, not replace.
	baseFile := markerFile(t, rootMarker)
	nested := func(args ...string) (string, error) { return nestedhost.VirshErr(h, args...) }
	t.Cleanup(func() { _, _ = nested("vol-delete", "--pool", env.Pool, seed) })

	config := func(host, waitFor string) string {
		at := "local"
		if strings.Contains(host, "nested") {
			at = "nested"
		}
		return fmt.Sprintf(`
provider "kohaku" {
  uri = %[1]q
  hosts = {
    nested = { uri = %[2]q }
  }
}

resource "kohaku_image" "base_local" {
  pool   = %[4]q
  name   = %[9]q
  source = %[10]q
}

resource "kohaku_image" "base_nested" {
  host   = "nested"
  pool   = %[4]q
  name   = %[9]q
  source = %[10]q
}

resource "kohaku_seed" "s" {
  name     = %[3]q
  pool     = %[4]q
  hostname = "mover"
}

resource "kohaku_vm" "m" {
  %[5]s
  name             = %[6]q
  type             = "qemu"
  memory_mib       = 96
  kernel           = %[7]q
  initrd           = %[8]q
  cmdline          = "console=ttyS0 quiet mitigations=off no_timer_check panic=1"
  seed_id          = kohaku_seed.s.id
  wait_for         = %[12]q
  shutdown_timeout = "5s"
  disk = {
    image       = kohaku_image.base_%[11]s.id
    pool        = %[4]q
    size_gib    = 1
  }
  data_disks = [{ name = "data", size_gib = 1, pool = %[4]q }]
  network_interface = [{ type = "user" }]
  timeouts {
    create = "10m"
    update = "15m"
  }
}
`, env.URI, h.URI, seed, env.Pool, host, name, kernel, initrd, base, baseFile, at, waitFor)
	}

	var uuid, mac, overlay string
	var vols []string // the VM's own volumes: overlay and data disk
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: func(s *terraform.State) error {
			if err := acctest.CheckNothingLeft(env, prefix)(s); err != nil {
				return err
			}
			// The seed's copy the move brought was the VM's: its destroy
			// deleted it on the nested host.
			if out, err := nested("vol-info", "--pool", env.Pool, seed); err == nil {
				return fmt.Errorf("the seed's copy is still on the nested host after destroy:\n%s", out)
			}
			left, err := acctest.Leftovers(h.URI, prefix, env.Pool)
			if err != nil || len(left) > 0 {
				return fmt.Errorf("left on the nested host: %q (%v)", left, err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: config("", "channel"),
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["kohaku_vm.m"].Primary.Attributes
					uuid, mac, overlay = a["uuid"], a["network_interface.0.mac"], a["overlay_volume"]
					out := local("vol-list", "--pool", env.Pool)
					vols = nil
					for _, f := range strings.Fields(out) {
						if strings.HasPrefix(f, prefix) && f != base && f != seed {
							vols = append(vols, f)
						}
					}
					if uuid == "" || mac == "" || len(vols) != 2 || !slices.Contains(vols, strings.TrimPrefix(overlay, env.Pool+"/")) {
						return fmt.Errorf("after create: uuid %q, mac %q, overlay %q, volumes %q", uuid, mac, overlay, vols)
					}
					return nil
				},
			},
			{
				// The data disk gets its marker while the guest runs on the
				// local host; then host changes and the VM moves, in place.
				PreConfig: func() {
					for _, v := range vols {
						if "/"+v != strings.TrimPrefix(overlay, env.Pool) {
							local("vol-upload", "--pool", env.Pool, v, markerQcow2(t, dataMarker))
						}
					}
				},
				// wait_for = "none": the tiny guest boots too slowly under
				// TCG inside the TCG nested host to be waited for.
				Config: config(`host = "nested"`, "none"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.m", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("kohaku_vm.m", "host", "nested"),
					resource.TestCheckResourceAttr("kohaku_vm.m", "running", "true"),
					func(*terraform.State) error {
						info, err := nested("domuuid", name)
						if err != nil || strings.TrimSpace(info) != uuid {
							return fmt.Errorf("the nested host's %s has UUID %q (%v), want %s", name, info, err, uuid)
						}
						ifs, err := nested("domiflist", name)
						if err != nil || !strings.Contains(ifs, mac) {
							return fmt.Errorf("the nested host's %s lost MAC %s:\n%s (%v)", name, mac, ifs, err)
						}
						if err := checkNothingOfVM(env.URI, env.Pool, name, vols); err != nil {
							return fmt.Errorf("on the local host: %w", err)
						}
						return checkVolumeStartsWith(t, nested, env.Pool, strings.TrimPrefix(overlay, env.Pool+"/"), rootMarker)
					},
					func(*terraform.State) error {
						// The data disk's marker, read back from the nested
						// host's volume (the tiny guest boots too slowly
						// under TCG inside the TCG nested host to name it on
						// its console within minutes), and the guest runs.
						for _, v := range vols {
							if "/"+v != strings.TrimPrefix(overlay, env.Pool) {
								if err := checkVolumeStartsWith(t, nested, env.Pool, v, dataMarker); err != nil {
									return fmt.Errorf("the data disk: %w", err)
								}
							}
						}
						st, err := nested("domstate", name)
						if err != nil || strings.TrimSpace(st) != "running" {
							return fmt.Errorf("the moved VM is %q on the nested host (%v), want running", st, err)
						}
						return nil
					},
				),
			},
			{Config: config(`host = "nested"`, "none"), PlanOnly: true},
			{
				// Back to the local host, which has the kohaku_seed's own
				// seed: the move keeps that one, deletes the VM's copy on
				// the nested host, and waits for the guest (the seed has
				// heartbeats), so the apply returns only once the guest
				// has booted and written to its channel here.
				Config: config(`host = ""`, "channel"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.m", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("kohaku_vm.m", "host", ""),
					func(s *terraform.State) error {
						if got := s.RootModule().Resources["kohaku_vm.m"].Primary.Attributes["uuid"]; got != uuid {
							return fmt.Errorf("back home the VM has UUID %q, want %q", got, uuid)
						}
						// Read at once: the boot after the move is on the
						// console already, because the move waited for it.
						if n := boots(t, name); n != 2 {
							return fmt.Errorf("the local console log shows %d boots when the move back returned, want 2 (the move did not wait for the guest)", n)
						}
						if out, err := nested("vol-info", "--pool", env.Pool, seed); err == nil {
							return fmt.Errorf("the VM's seed copy stayed on the nested host it left:\n%s", out)
						}
						left, err := acctest.Leftovers(h.URI, prefix, env.Pool)
						left = slices.DeleteFunc(left, func(l string) bool { return strings.HasSuffix(l, "/"+base) }) // kohaku_image.base_nested
						if err != nil || len(left) > 0 {
							return fmt.Errorf("left on the nested host after the move back: %q (%v)", left, err)
						}
						if out, err := acctest.Virsh(env.URI, "vol-info", "--pool", env.Pool, seed); err != nil {
							return fmt.Errorf("the kohaku_seed's own seed is gone from the local host: %v\n%s", err, out)
						}
						for _, v := range vols {
							if "/"+v != strings.TrimPrefix(overlay, env.Pool) {
								if err := checkVolumeStartsWith(t, func(args ...string) (string, error) { return acctest.Virsh(env.URI, args...) }, env.Pool, v, dataMarker); err != nil {
									return fmt.Errorf("the data disk back home: %w", err)
								}
							}
						}
						return nil
					},
				),
			},
			{Config: config(`host = ""`, "channel"), PlanOnly: true},
		},
	})
}

// prepareNestedForMove gives the nested host what the VM needs there and
// Kohaku does not move: a pool of the test pool's name, and the tiny
// guest's kernel and initrd at the same paths as on the local host (the
// domain names them by path), uploaded through libvirt.
func prepareNestedForMove(t *testing.T, h *nestedhost.Host, pool, kernel, initrd string) {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := nestedhost.VirshErr(h, args...); err != nil {
			t.Fatalf("virsh (nested) %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := nestedhost.VirshErr(h, "pool-info", pool); err != nil {
		run("pool-define-as", pool, "dir", "--target", "/var/lib/kohaku-move/"+pool)
		run("pool-build", pool)
		run("pool-start", pool)
		t.Cleanup(func() {
			_, _ = nestedhost.VirshErr(h, "pool-destroy", pool)
			_, _ = nestedhost.VirshErr(h, "pool-delete", pool)
			_, _ = nestedhost.VirshErr(h, "pool-undefine", pool)
		})
	}
	dir := filepath.Dir(kernel)
	if filepath.Dir(initrd) != dir {
		t.Fatalf("the tiny kernel %s and initrd %s are in different folders", kernel, initrd)
	}
	const files = "kohaku-move-tiny"
	_, _ = nestedhost.VirshErr(h, "pool-destroy", files)
	_, _ = nestedhost.VirshErr(h, "pool-undefine", files)
	run("pool-define-as", files, "dir", "--target", dir)
	run("pool-build", files)
	run("pool-start", files)
	t.Cleanup(func() {
		for _, f := range []string{kernel, initrd} {
			_, _ = nestedhost.VirshErr(h, "vol-delete", "--pool", files, filepath.Base(f))
		}
		_, _ = nestedhost.VirshErr(h, "pool-destroy", files)
		_, _ = nestedhost.VirshErr(h, "pool-delete", files)
		_, _ = nestedhost.VirshErr(h, "pool-undefine", files)
	})
	for _, f := range []string{kernel, initrd} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = nestedhost.VirshErr(h, "vol-delete", "--pool", files, filepath.Base(f))
		run("vol-create-as", files, filepath.Base(f), fmt.Sprint(st.Size()), "--format", "raw")
		run("vol-upload", "--pool", files, filepath.Base(f), f)
	}
}

// markerFile is a 1 MiB raw disk whose first line is marker (and whose
// first sector ends in the MBR signature, as a disk image's does).
func markerFile(t *testing.T, marker string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "marker.raw")
	b := make([]byte, 1<<20)
	copy(b, marker+"\n")
	b[510], b[511] = 0x55, 0xAA
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// markerQcow2 is a qcow2 image of 1 GiB (a data disk's size_gib = 1)
// whose first line is marker: a few hundred KiB of file, so the move copies
// little, and the guest, which only reads it, never writes its metadata.
func markerQcow2(t *testing.T, marker string) string {
	t.Helper()
	raw := markerFile(t, marker)
	if err := os.Truncate(raw, 1<<30); err != nil {
		t.Fatal(err)
	}
	q := raw + ".qcow2"
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, q).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, out)
	}
	return q
}

// checkNothingOfVM says what of a VM a host still has: its domain, or one
// of its volumes.
func checkNothingOfVM(uri, pool, name string, vols []string) error {
	doms, err := acctest.Virsh(uri, "list", "--all", "--name")
	if err != nil {
		return err
	}
	if slices.Contains(strings.Fields(doms), name) {
		return fmt.Errorf("domain %s is still there", name)
	}
	list, err := acctest.Virsh(uri, "vol-list", "--pool", pool)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if slices.Contains(strings.Fields(list), v) {
			return fmt.Errorf("volume %s/%s is still there", pool, v)
		}
	}
	return nil
}

// checkVolumeStartsWith downloads a moved qcow2 volume from the nested host
// and checks that it stands alone (no backing file: an overlay arrives
// flattened) and that its first line is marker.
func checkVolumeStartsWith(t *testing.T, nested func(...string) (string, error), pool, vol, marker string) error {
	dir := t.TempDir()
	q, raw := filepath.Join(dir, "vol.qcow2"), filepath.Join(dir, "vol.raw")
	if out, err := nested("vol-download", "--pool", pool, vol, q); err != nil {
		return fmt.Errorf("vol-download %s/%s: %v\n%s", pool, vol, err, out)
	}
	info, err := exec.Command("qemu-img", "info", q).CombinedOutput()
	if err != nil || strings.Contains(string(info), "backing file") || !strings.Contains(string(info), "file format: qcow2") {
		return fmt.Errorf("%s/%s is not a standalone qcow2 (%v):\n%s", pool, vol, err, info)
	}
	if out, err := exec.Command("qemu-img", "convert", "-O", "raw", q, raw).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img convert: %v\n%s", err, out)
	}
	f, err := os.Open(raw)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 512)
	if _, err := f.Read(head); err != nil {
		return err
	}
	if first, _, _ := strings.Cut(string(head), "\n"); first != marker {
		return fmt.Errorf("%s/%s starts with %q, want the marker %q", pool, vol, first, marker)
	}
	return nil
}
