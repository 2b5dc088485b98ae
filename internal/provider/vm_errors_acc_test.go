package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// vmSmallConfig is a small kernel-boot VM with the given disk, NIC and extra
// attributes (128 MiB unless extra sets memory_mib).
func vmSmallConfig(env acctest.VMEnv, name, disk, nic, extra string) string {
	if !strings.Contains(extra, "memory_mib") {
		extra += "\n  memory_mib = 128"
	}
	return providerBlock(env.URI) + fmt.Sprintf(`
resource "kohaku_vm" "test" {
  name       = %q
  type       = "qemu"
  kernel     = %q
  initrd     = %q
  disk       = %s
  network_interface = [%s]
  %s
}
`, name, env.Kernel, env.Initrd, disk, nic, extra)
}

// Each bad input fails with an error that says what is wrong, and leaves
// no domain and no volume behind.
func TestAccVM_badInput(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "bad")
	overlay := func(pool, base string) string {
		return fmt.Sprintf(`{ base_pool = %q, base_volume = %q, pool = %q }`, env.ImagePool, base, pool)
	}
	user := `{ type = "user" }`
	taken := prefix + "taken"

	cases := []struct {
		name    string
		vm      string // the VM's name; nothing starting with it may be left
		config  string
		pre     func(*testing.T)
		want    []string
		check   func(*terraform.State) error
		cleanup func()
	}{
		{
			name:   "memory below the minimum",
			vm:     prefix + "mem",
			config: vmSmallConfig(env, prefix+"mem", overlay(env.Pool, env.Base), user, "memory_mib = 32"),
			want:   []string{"Invalid memory_mib", "memory_mib: 32 MiB is outside 64..4194304 MiB. For example: 2048."},
		},
		{
			name:   "malformed hostdev",
			vm:     prefix + "pci",
			config: vmSmallConfig(env, prefix+"pci", overlay(env.Pool, env.Base), user, `hostdevs = ["0000:01:00"]`),
			want:   []string{`Invalid hostdevs["0000:01:00"]`, `no '.' before the function number. For example: "0000:01:00.0".`},
		},
		{
			name:   "unknown pool",
			vm:     prefix + "pool",
			config: vmSmallConfig(env, prefix+"pool", overlay(prefix+"nopool", env.Base), user, ""),
			want: []string{`Creating VM ` + prefix + `pool failed at step "create the overlay volume"`,
				`the host has no pool "` + prefix + `nopool" (its pools are`, env.Pool, "Nothing was created."},
		},
		{
			name:   "unknown base volume",
			vm:     prefix + "base",
			config: vmSmallConfig(env, prefix+"base", overlay(env.Pool, "no-such-image.qcow2"), user, ""),
			want: []string{`failed at step "create the overlay volume"`,
				`pool "` + env.ImagePool + `" has no volume "no-such-image.qcow2" (it has`, env.Base, "Nothing was created."},
		},
		{
			name:   "name taken by a domain defined by hand",
			vm:     taken,
			pre:    func(t *testing.T) { acctest.DefineByHand(t, env, taken) },
			config: vmSmallConfig(env, taken, overlay(env.Pool, env.Base), user, ""),
			want: []string{`Creating VM ` + taken + ` failed at step "check the name"`,
				"a domain named " + taken + " already exists", "and this resource did not create it", "Nothing was created."},
			// The domain someone else made is still there, untouched.
			check: func(*terraform.State) error {
				if _, err := acctest.Virsh(env.URI, "dominfo", taken); err != nil {
					return fmt.Errorf("the hand-made domain is gone: %v", err)
				}
				left, err := acctest.Leftovers(env.URI, taken, env.Pool, "default")
				if err != nil {
					return err
				}
				if len(left) != 1 {
					return fmt.Errorf("want only the hand-made domain, found %s", strings.Join(left, ", "))
				}
				return nil
			},
			cleanup: func() { _, _ = acctest.Virsh(env.URI, "undefine", taken) }, // best effort
		},
		{
			name: "shared folder missing on this host",
			vm:   prefix + "share",
			config: vmSmallConfig(env, prefix+"share", overlay(env.Pool, env.Base), user,
				`shared_folder = [{ source = "/nonexistent/`+prefix+`", tag = "kohaku_shared" }]`),
			want: []string{`failed at step "check shared folders"`,
				"shared_folder[0].source: /nonexistent/" + prefix + " does not exist on this host", "Nothing was created."},
		},
		{
			// Fails after the overlay was made and the domain defined: both are
			// rolled back and the error says which step failed.
			name:   "start fails",
			vm:     prefix + "start",
			config: vmSmallConfig(env, prefix+"start", overlay(env.Pool, env.Base), `{ type = "network", source = "`+prefix+`nonet" }`, "running = true"),
			want: []string{`Creating VM ` + prefix + `start failed at step "start the domain"`,
				prefix + "nonet", "Rolled back: undefined domain " + prefix + "start; deleted overlay volume " + env.Pool + "/" + prefix + "start-root.qcow2."},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.cleanup != nil {
				t.Cleanup(tc.cleanup)
			}
			pre := func() {}
			if tc.pre != nil {
				pre = func() { tc.pre(t) }
			}
			check := acctest.CheckNothingLeft(env, tc.vm)
			if tc.check != nil {
				check = tc.check
			}
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{
					{PreConfig: pre, Config: tc.config, ExpectError: vmErrRE(tc.want...)},
					// No resource left in the configuration: just look at the host.
					{Config: providerBlock(env.URI), Check: check},
				},
			})
		})
	}
}
