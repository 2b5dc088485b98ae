package provider

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// pinnedVMConfig is a CPU-only VM placed NUMA-local with its vCPUs pinned,
// on the local test host; it never runs.
func pinnedVMConfig(res, name string, vcpu, mib int) string {
	return fmt.Sprintf(`resource "kohaku_vm" %q {
  name       = %q
  type       = "qemu"
  vcpu       = %d
  memory_mib = %d
  running    = false
  placement {
    numa_local = true
    pin_cpus   = true
  }
}
`, res, name, vcpu, mib)
}

// pin_cpus on the local test host (one NUMA node; its last CPU is kept
// for emulator threads): a VM's vCPU is pinned one to one to a CPU of the
// node, its emulator threads to the node's last CPU, pinned_cpus says
// which; capacity counts it as pinned; a second VM asking for every CPU
// of the host is refused at create naming the shortfall and leaves
// nothing; a memory change keeps the pins; pin_cpus without numa_local is
// refused at plan on its line.
func TestAccVM_pinCPUs(t *testing.T) {
	env := acctest.NewVMEnv(t)
	caps, err := acctest.Virsh(env.URI, "capabilities")
	if err != nil {
		t.Fatal(err)
	}
	cpus := regexp.MustCompile(`<cpu id='(\d+)'`).FindAllStringSubmatch(caps, -1)
	if len(cpus) < 2 || strings.Count(caps, "<cell id=") != 1 {
		t.Skipf("the test host has %d CPUs in %d NUMA cells; the test needs one cell of at least 2 CPUs", len(cpus), strings.Count(caps, "<cell id="))
	}
	last := cpus[len(cpus)-1][1]
	prefix := vmTestPrefix(t, env, "pin")
	name, greedy := prefix+"vm", prefix+"greedy"
	cfg := func(mib int) string { return providerBlock(env.URI) + pinnedVMConfig("p", name, 1, mib) }
	pinned := func(s *terraform.State) error {
		a := s.RootModule().Resources["kohaku_vm.p"].Primary.Attributes
		if a["pinned_cpus.#"] != "1" || a["pinned_cpus.0"] == last {
			return fmt.Errorf("pinned_cpus = %q (%s entries), want one CPU other than the emulator's %s", a["pinned_cpus.0"], a["pinned_cpus.#"], last)
		}
		out, err := acctest.Virsh(env.URI, "dumpxml", name)
		if err != nil {
			return err
		}
		for _, want := range []string{fmt.Sprintf("<vcpupin vcpu='0' cpuset='%s'/>", a["pinned_cpus.0"]), fmt.Sprintf("<emulatorpin cpuset='%s'/>", last)} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("the domain lacks %s:\n%s", want, out)
			}
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:      providerBlock(env.URI) + strings.Replace(pinnedVMConfig("p", name, 1, 128), "numa_local = true\n", "", 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)pin_cpus needs numa_local.*in resource "kohaku_vm" "p":.*pin_cpus\s+= true`),
			},
			{
				Config: cfg(128) + `data "kohaku_capacity" "c" {
  depends_on = [kohaku_vm.p]
}
`,
				Check: resource.ComposeAggregateTestCheckFunc(pinned,
					resource.TestCheckResourceAttr("data.kohaku_capacity.c", "capacity.%", "1"),
					func(s *terraform.State) error {
						a := s.RootModule().Resources["data.kohaku_capacity.c"].Primary.Attributes
						if n, _ := strconv.Atoi(a["capacity..pinned_cpus"]); n < 1 {
							return fmt.Errorf("capacity counts %q pinned CPUs, want at least the VM's", a["capacity..pinned_cpus"])
						}
						return nil
					}),
			},
			{
				// every CPU of the host: one is the VM's, one the emulator's
				Config:      cfg(128) + pinnedVMConfig("g", greedy, len(cpus), 128),
				ExpectError: regexp.MustCompile(`(?s)CPUs free to pin of ` + strconv.Itoa(len(cpus)) + ` vCPUs asked`),
				Check: func(*terraform.State) error {
					if out, err := acctest.Virsh(env.URI, "domstate", greedy); err == nil {
						return fmt.Errorf("the refused VM was defined (%s)", out)
					}
					return nil
				},
			},
			{
				Config: cfg(160),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.p", plancheck.ResourceActionUpdate),
				}},
				Check: pinned,
			},
			{Config: cfg(160), PlanOnly: true},
		},
	})
}
