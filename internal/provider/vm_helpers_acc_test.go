package provider

import (
	"fmt"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// noOSVM is kohaku_vm.<name> (domain <prefix><name>), a VM that boots no
// OS: an overlay on the test host's base image, user-mode networking, and
// body added to its block.
func noOSVM(env acctest.VMEnv, prefix, name, body string) string {
	return fmt.Sprintf(`
resource "kohaku_vm" %[1]q {
  name       = "%[2]s%[1]s"
  type       = "qemu"
  memory_mib = 128
  disk = {
    base_pool   = %[3]q
    base_volume = %[4]q
    pool        = %[5]q
  }
  network_interface = [{ type = "user" }]
%[6]s}
`, name, prefix, env.ImagePool, env.Base, env.Pool, body)
}

// vmTestPrefix returns a name prefix unique to one test (acctest.Prefix)
// whose cleanup sweeps the test's domains and volumes with the provider's
// own sweeper.
func vmTestPrefix(t *testing.T, env acctest.VMEnv, short string) string {
	t.Helper()
	return acctest.Prefix(t, short, func(prefix string) error {
		return sweepVMs(env.URI, prefix, env.Pool, "default")
	})
}

// vmClient dials the test host directly, for checks that need the provider's
// own libvirt layer (RPC counts).
func vmClient(t *testing.T, uri string) *virt.Client {
	t.Helper()
	c, err := virt.New(virt.Settings{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// tinyGuest is a seed and a running VM booting the tiny test guest (a
// busybox initramfs that reads its seed and reports for it over the report
// channel within seconds), ready over the channel. The seed is
// kohaku_seed.<seedRes> (volume seedVolume, the given hostname), the VM
// kohaku_vm.<vmRes> (domain vmName); vmExtra is added to the VM's block.
func tinyGuest(t *testing.T, pool, seedRes, vmRes, seedVolume, vmName, hostname, vmExtra string) string {
	t.Helper()
	return fmt.Sprintf(`
resource "kohaku_seed" %[1]q {
  name     = %[3]q
  pool     = %[4]q
  hostname = %[5]q
}

resource "kohaku_vm" %[2]q {
  name       = %[9]q
  type       = "qemu"
  memory_mib = 96
  kernel     = %[6]q
  initrd     = %[7]q
  cmdline    = "console=ttyS0 quiet mitigations=off no_timer_check panic=1"
  seed_id    = kohaku_seed.%[1]s.id
  wait_for   = "channel"
%[8]s}
`, seedRes, vmRes, seedVolume, pool, hostname,
		acctest.Env(t, "KOHAKU_TEST_TINY_KERNEL"), acctest.Env(t, "KOHAKU_TEST_TINY_INITRD"), vmExtra, vmName)
}
