package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// One provider block, several hosts: a seed and a VM on each, the host
// chosen per instance (count here: terraform-plugin-testing cannot hold
// for_each instances in state; examples/fleet uses for_each). Here the "hosts" are the local daemon reached over the unix
// socket and over qemu+tcp, plus a host that is down.
func TestAccFleet_hostPerInstance(t *testing.T) {
	env := acctest.NewVMEnv(t)
	tcp := acctest.Env(t, "KOHAKU_TEST_TCP_URI")
	prefix := vmTestPrefix(t, env, "fleet")
	down := fmt.Sprintf("qemu+tcp://127.0.0.1:%d/system", acctest.ClosedPort(t))
	config := func(hosts string, extra ...string) string {
		return strings.Join(extra, "\n") + fmt.Sprintf(`
provider "kohaku" {
  uri = "qemu:///system?socket=/nonexistent/default-is-not-used.sock"
  hosts = {
    unix = { uri = %q }
    tcp  = { uri = %q }
    down = { uri = %q }
  }
}

locals {
  hosts = [%s]
}

resource "kohaku_seed" "each" {
  count   = length(local.hosts)
  host    = local.hosts[count.index]
  name    = "%s${local.hosts[count.index]}-seed.iso"
  pool    = %q
  network = [{ dhcp4 = true }]
}

resource "kohaku_vm" "each" {
  count      = length(local.hosts)
  host       = local.hosts[count.index]
  name       = "%s${local.hosts[count.index]}"
  type       = "qemu"
  memory_mib = 128
  running    = false
  kernel     = %q
  initrd     = %q
  seed_id    = kohaku_seed.each[count.index].id
  network_interface = [{ type = "user" }]
}
`, env.URI, tcp, down, hosts, prefix, env.Pool, prefix, env.Kernel, env.Initrd)
	}
	extraSeed := fmt.Sprintf(`
resource "kohaku_seed" "extra" {
  host = "unix"
  name = "%sextra-seed.iso"
  pool = %q
}
`, prefix, env.Pool)
	hostsRead := `
data "kohaku_host" "each" {
  count             = 3
  host              = ["unix", "tcp", "down"][count.index]
  allow_unreachable = true
}
`
	onHost := func(names ...string) statecheck.StateCheck {
		return stateCheckFunc(func() error {
			out, err := acctest.Virsh(env.URI, "list", "--all", "--name")
			if err != nil {
				return err
			}
			for _, n := range names {
				if !strings.Contains(out, prefix+n+"\n") && !strings.HasSuffix(out, prefix+n) {
					return fmt.Errorf("domain %s%s is not on the host:\n%s", prefix, n, out)
				}
			}
			return nil
		})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: config(`"unix", "tcp"`),
				ConfigStateChecks: []statecheck.StateCheck{
					onHost("unix", "tcp"),
					statecheck.ExpectKnownValue("kohaku_vm.each[1]", tfjsonpath.New("host"), knownvalue.StringExact("tcp")),
					statecheck.CompareValuePairs("kohaku_vm.each[0]", tfjsonpath.New("seed_id"),
						"kohaku_seed.each[0]", tfjsonpath.New("id"), compareSame{}),
				},
			},
			{Config: config(`"unix", "tcp"`), PlanOnly: true},
			{
				// A host that is down fails only what is placed on it: the
				// same apply creates what it adds on a healthy host.
				Config:      config(`"unix", "tcp", "down"`, extraSeed),
				ExpectError: regexp.MustCompile(`(?s)Cannot use libvirt host\s+qemu\+tcp://127\.0\.0\.1:\d+/system.*connection\s+refused`),
			},
			{
				// The extra seed was made by the apply that failed for the
				// down host: nothing left to do for it.
				Config: config(`"unix", "tcp"`, extraSeed),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_seed.extra", plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{onHost("unix", "tcp")},
			},
			{
				// Reading every host of the fleet: with allow_unreachable the
				// down host reads as unreachable instead of failing the plan.
				Config: config(`"unix", "tcp"`, extraSeed, hostsRead),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.kohaku_host.each[2]", tfjsonpath.New("reachable"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.kohaku_host.each[2]", tfjsonpath.New("error"), knownvalue.StringRegexp(regexp.MustCompile(`connection refused`))),
					statecheck.ExpectKnownValue("data.kohaku_host.each[2]", tfjsonpath.New("memory_mib"), knownvalue.Null()),
					statecheck.ExpectKnownValue("data.kohaku_host.each[0]", tfjsonpath.New("reachable"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("data.kohaku_host.each[1]", tfjsonpath.New("error"), knownvalue.Null()),
				},
			},
			{
				// Without it, a host that is down fails the plan, saying so.
				Config:      config(`"unix", "tcp"`, extraSeed, strings.Replace(hostsRead, "allow_unreachable = true", "", 1)),
				ExpectError: regexp.MustCompile(`(?s)Cannot use libvirt host\s+qemu\+tcp://127\.0\.0\.1:\d+/system.*connection\s+refused`),
			},
		},
	})
}

// stateCheckFunc adapts a function that looks at the host to a StateCheck.
type stateCheckFunc func() error

func (f stateCheckFunc) CheckState(_ context.Context, _ statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	resp.Error = f()
}
