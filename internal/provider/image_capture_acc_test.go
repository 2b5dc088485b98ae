package provider

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// The data path of a capture and of a copy, on the local test host, with
// guests that never boot an OS (so it costs seconds, not a cloud-init boot
// under TCG): a VM's overlay gets a marker written into it while the VM is
// off, the VM is captured, the image is copied to a second host of the
// hosts map (the same libvirtd under another key, into another pool) and a
// clone is made from the copy. qemu-img and qemu-io, independent of the
// provider, judge: the capture is a standalone qcow2 (no backing file)
// holding the base image and the marker, its file's sha256 is the recorded
// digest, the copy is byte-identical, and the clone's overlay reads the
// marker through the copy. A VM that does not power off when asked is not
// captured and keeps running; a VM without a disk is refused at plan time.
//
// Not proven here: sealing (the guests run no agent and no cloud-init, so
// the capture warns and records sealed = false), and that clones boot as
// new instances; that needs real Debian guests (see the report on #46).
func TestAccImage_captureAndCopy(t *testing.T) {
	env := acctest.NewVMEnv(t)
	tinyKernel, tinyInitrd := acctest.Env(t, "KOHAKU_TEST_TINY_KERNEL"), acctest.Env(t, "KOHAKU_TEST_TINY_INITRD")
	for _, tool := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to judge the capture: %v", tool, err)
		}
	}
	prefix := vmTestPrefix(t, env, "cap")
	provider := fmt.Sprintf(`
provider "kohaku" {
  uri = %[1]q
  hosts = {
    other = { uri = %[1]q }
  }
}
`, env.URI)
	vms := fmt.Sprintf(`
resource "kohaku_vm" "src" {
  name       = "%[1]ssrc"
  type       = "qemu"
  memory_mib = 128
  running    = false
  disk = {
    base_pool   = %[2]q
    base_volume = %[3]q
    pool        = %[4]q
  }
  network_interface = [{ type = "user" }]
}

resource "kohaku_vm" "busy" {
  name             = "%[1]sbusy"
  type             = "qemu"
  memory_mib       = 128
  kernel           = %[5]q
  initrd           = %[6]q
  cmdline          = "console=ttyS0 quiet mitigations=off no_timer_check panic=1"
  shutdown_timeout = "1s"
  disk = {
    base_pool   = %[2]q
    base_volume = %[3]q
    pool        = %[4]q
  }
}

resource "kohaku_vm" "nodisk" {
  name       = "%[1]snodisk"
  type       = "qemu"
  memory_mib = 128
  running    = false
  kernel     = %[5]q
  initrd     = %[6]q
}
`, prefix, env.ImagePool, env.Base, env.Pool, tinyKernel, tinyInitrd)
	images := fmt.Sprintf(`
resource "kohaku_image_capture" "golden" {
  vm   = kohaku_vm.src.id
  pool = %[2]q
  name = "%[1]sgolden.qcow2"
}

resource "kohaku_image_copy" "golden" {
  source        = kohaku_image_capture.golden.id
  source_digest = kohaku_image_capture.golden.digest
  host          = "other"
  pool          = "default"
  name          = "%[1]sgolden-copy.qcow2"
}

resource "kohaku_vm" "clone" {
  host       = "other"
  name       = "%[1]sclone"
  type       = "qemu"
  memory_mib = 128
  running    = false
  disk = {
    image = kohaku_image_copy.golden.id
    pool  = %[3]q
  }
  network_interface = [{ type = "user" }]
}
`, prefix, env.Pool, env.Pool)
	const marker = "0x5a"
	markerAt := "1G 64k"
	capture, cp := "kohaku_image_capture.golden", "kohaku_image_copy.golden"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config: provider + vms,
				Check: func(s *terraform.State) error {
					// The guest "writes" its marker: into the source's
					// overlay, at 1 GiB, while the VM is off.
					return qemuIO(s.RootModule().Resources["kohaku_vm.src"].Primary.Attributes["overlay_volume"], env, false, "write -P "+marker+" "+markerAt)
				},
			},
			{
				Config: provider + vms + images,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(capture, "id", env.Pool+"/"+prefix+"golden.qcow2"),
					resource.TestCheckResourceAttr(capture, "format", "qcow2"),
					resource.TestCheckResourceAttr(capture, "sealed", "false"),
					resource.TestCheckResourceAttr(capture, "source_volume", env.Pool+"/"+prefix+"src-root.qcow2"),
					resource.TestCheckResourceAttrPair(capture, "digest", cp, "digest"),
					resource.TestCheckResourceAttr(cp, "id", "other/default/"+prefix+"golden-copy.qcow2"),
					acctest.CheckDomState(env, prefix+"src", "shut off"),
					func(s *terraform.State) error {
						capAttrs := s.RootModule().Resources[capture].Primary.Attributes
						copyAttrs := s.RootModule().Resources[cp].Primary.Attributes
						capPath, copyPath := capAttrs["volume_path"], copyAttrs["volume_path"]
						for _, p := range []string{capPath, copyPath} {
							if err := standaloneQcow2(p); err != nil {
								return err
							}
							if got, err := fileDigest(p); err != nil || got != capAttrs["digest"] {
								return fmt.Errorf("%s hashes to %s (%v), the capture recorded %s", p, got, err, capAttrs["digest"])
							}
							if err := qemuIOFile(p, true, "read -P "+marker+" "+markerAt); err != nil {
								return fmt.Errorf("the marker is not in %s: %w", p, err)
							}
						}
						// The rest of the disk is the base image's.
						base, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.ImagePool, env.Base)
						if err != nil {
							return err
						}
						if out, err := exec.Command("qemu-img", "compare", base, capPath).CombinedOutput(); err == nil || !strings.Contains(string(out), "Content mismatch at offset 1073741824") {
							return fmt.Errorf("qemu-img compare base capture: want a difference at the marker (1 GiB) first, got %v: %s", err, out)
						}
						// The clone reads the marker through its overlay on the copy.
						clone := s.RootModule().Resources["kohaku_vm.clone"].Primary.Attributes["overlay_volume"]
						if err := qemuIO(clone, env, true, "read -P "+marker+" "+markerAt); err != nil {
							return fmt.Errorf("the clone does not see the marker: %w", err)
						}
						return nil
					},
				),
			},
			{
				// A VM that does not power off when asked (the tiny guest
				// ignores ACPI) is never forced: no image, still running.
				Config: provider + vms + images + fmt.Sprintf(`
resource "kohaku_image_capture" "busy" {
  vm               = kohaku_vm.busy.id
  pool             = %[2]q
  name             = "%[1]sbusy.qcow2"
  shutdown_timeout = "10s"
}
`, prefix, env.Pool),
				ExpectError: regexp.MustCompile(`(?s)did\s+not\s+power\s+off.*still\s+running\s+and\s+nothing\s+was\s+captured`),
			},
			{
				Config: provider + vms + images,
				Check: resource.ComposeAggregateTestCheckFunc(
					acctest.CheckDomState(env, prefix+"busy", "running"),
					func(*terraform.State) error {
						if out, err := acctest.Virsh(env.URI, "vol-info", "--pool", env.Pool, prefix+"busy.qcow2"); err == nil {
							return fmt.Errorf("the refused capture left a volume: %s", out)
						}
						return nil
					},
				),
			},
			{
				Config: provider + vms + images + fmt.Sprintf(`
resource "kohaku_image_capture" "nodisk" {
  vm   = kohaku_vm.nodisk.id
  pool = %[2]q
  name = "%[1]snodisk.qcow2"
}
`, prefix, env.Pool),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)VM cannot be captured.*has\s+no\s+boot\s+disk`),
			},
		},
	})
}

// qemuIO runs qemu-io on a volume given as `<pool>/<name>` (a VM's
// overlay_volume).
func qemuIO(vol string, env acctest.VMEnv, readOnly bool, cmd string) error {
	pool, name, ok := strings.Cut(vol, "/")
	if !ok {
		return fmt.Errorf("%q is not <pool>/<volume>", vol)
	}
	p, err := acctest.Virsh(env.URI, "vol-path", "--pool", pool, name)
	if err != nil {
		return err
	}
	return qemuIOFile(p, readOnly, cmd)
}

func qemuIOFile(path string, readOnly bool, cmd string) error {
	args := []string{"-f", "qcow2", "-c", cmd}
	if readOnly {
		args = append([]string{"-r"}, args...)
	}
	out, err := exec.Command("qemu-io", append(args, path)...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "Pattern verification failed") || strings.Contains(string(out), "failed") {
		return fmt.Errorf("qemu-io %s %s: %v: %s", cmd, path, err, out)
	}
	return nil
}

// standaloneQcow2 checks, with qemu-img, that path is a qcow2 with no backing file.
func standaloneQcow2(path string) error {
	out, err := exec.Command("qemu-img", "info", "-U", "--output=json", path).Output()
	if err != nil {
		return fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	var info struct {
		Format  string `json:"format"`
		Backing string `json:"backing-filename"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return err
	}
	if info.Format != "qcow2" || info.Backing != "" {
		return fmt.Errorf("%s is %s backed by %q, want a standalone qcow2", path, info.Format, info.Backing)
	}
	return nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil)), nil
}

// A real Debian 12 guest (cloud-init 22.4, qemu-guest-agent) writes a
// marker at its first boot, is captured running (sealed through its agent,
// shut down cleanly, started again), and a clone boots from the image as a
// new instance: ready with its own seed's instance id, the marker there,
// and a machine-id and SSH host key other than the source's. One clone
// suffices: what is proven is that the image carries none of the source's
// identity, and a second clone would make its own the same way (random at
// its boot); the boot it would cost is what make check cannot spare.
// Without the seal the clone would keep the source's machine-id (cloud-init
// makes new host keys for a new instance id anyway, the machine-id is the
// seal's alone).
func TestAccImage_captureRealGuestClone(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "capg")
	guest := func(res, extraSeed, disk string) string {
		return fmt.Sprintf(`
resource "kohaku_seed" %[1]q {
  name     = "%[2]s%[1]s-seed.iso"
  pool     = %[3]q
  hostname = "%[1]s"
%[4]s
}

resource "kohaku_vm" %[1]q {
  name        = "%[2]s%[1]s"
  type        = "qemu"
  vcpu        = 1
  cpu_mode    = "custom"
  memory_mib  = 1024
  kernel      = %[5]q
  initrd      = %[6]q
  cmdline     = "root=/dev/vda rw console=ttyS0 panic=5"
  seed_id     = kohaku_seed.%[1]s.id
  guest_agent = true
  disk = {
%[7]s
    pool = %[3]q
  }
  network_interface = [{ type = "user" }]
  shutdown_timeout  = "2s"
  wait_for          = "channel"
  timeouts {
    create = "15m"
  }
}
`, res, prefix, env.Pool, extraSeed, env.Kernel, env.Initrd, disk)
	}
	src := providerBlock(env.URI) + guest("src", `  write_files = [{ path = "/etc/kohaku-golden", content = "captured marker\n" }]`,
		fmt.Sprintf("    base_pool   = %q\n    base_volume = %q", env.ImagePool, env.Base))
	images := fmt.Sprintf(`
resource "kohaku_image_capture" "golden" {
  vm   = kohaku_vm.src.id
  pool = %[2]q
  name = "%[1]sgolden.qcow2"
  timeouts {
    create = "10m"
  }
}
`, prefix, env.Pool) + guest("clone", "", "    image = kohaku_image_capture.golden.id")
	c := vmClient(t, env.URI)
	read := func(vm, path string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b, err := c.AgentReadFile(ctx, vm, path, 64<<10)
		return strings.TrimSpace(string(b)), err
	}
	var srcMachineID, srcHostKey string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config: src,
				Check: func(*terraform.State) error {
					var err error
					if srcMachineID, err = read(prefix+"src", "/etc/machine-id"); err != nil || srcMachineID == "" {
						return fmt.Errorf("the source's machine-id: %q, %v", srcMachineID, err)
					}
					if srcHostKey, err = read(prefix+"src", "/etc/ssh/ssh_host_ed25519_key.pub"); err != nil {
						return fmt.Errorf("the source's host key: %v", err)
					}
					return nil
				},
			},
			{
				Config: src + images,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("kohaku_image_capture.golden", "sealed", "true"),
					resource.TestCheckResourceAttrPair("kohaku_vm.clone", "guest.instance_id", "kohaku_seed.clone", "instance_id"),
					acctest.CheckDomState(env, prefix+"src", "running"),
					func(s *terraform.State) error {
						if a, b := s.RootModule().Resources["kohaku_vm.clone"].Primary.Attributes["guest.instance_id"],
							s.RootModule().Resources["kohaku_vm.src"].Primary.Attributes["guest.instance_id"]; a == b {
							return fmt.Errorf("the clone reports the source's instance id %s", a)
						}
						clone := prefix + "clone"
						if m, err := read(clone, "/etc/kohaku-golden"); err != nil || m != "captured marker" {
							return fmt.Errorf("the clone's marker: %q, %v", m, err)
						}
						if id, err := read(clone, "/etc/machine-id"); err != nil || id == "" || id == srcMachineID {
							return fmt.Errorf("the clone's machine-id %q (%v), the source's %q: want a new one", id, err, srcMachineID)
						}
						if k, err := read(clone, "/etc/ssh/ssh_host_ed25519_key.pub"); err != nil || k == srcHostKey {
							return fmt.Errorf("the clone's host key %q (%v), the source's %q: want a new one", k, err, srcHostKey)
						}
						return nil
					},
				),
			},
		},
	})
}
