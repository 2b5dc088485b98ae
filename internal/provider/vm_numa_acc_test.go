package provider

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// freeHugePages reads the free 2 MiB pages of a NUMA cell of the nested
// host with virsh, independently of the provider.
func freeHugePages(t *testing.T, h *nestedhost.Host, cell int) int {
	t.Helper()
	out := nestedhost.Virsh(t, h, "freepages", "--cellno", fmt.Sprint(cell), "--pagesize", "2048")
	m := regexp.MustCompile(`2048KiB:\s*(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("virsh freepages --cellno %d: %q", cell, out)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The nested host has two NUMA nodes, one CPU each (CPU 0 on node 0, CPU 1
// on node 1), 48 free 2 MiB huge pages on each, and the GPU stand-in behind
// a PCIe expander bridge on node 1. A VM with that GPU is bound to node 1
// by default: its vCPUs run on CPU 1, its memory comes from node 1, and with
// hugepages its memory is node 1's huge pages. What the node cannot give is
// refused before anything is made; numa_placement = "none" unbinds it in
// place.
func TestAccVM_numaPlacement(t *testing.T) {
	h := nestedhost.Require(t)
	name := "kohaku-acc-numa"
	removeNestedDomainAfter(t, h, name)
	if n := freeHugePages(t, h, 1); n != 48 {
		t.Fatalf("the nested host's node 1 has %d free 2 MiB pages, want the 48 it boots with", n)
	}
	free0 := freeHugePages(t, h, 0)
	if gpuNode := regexp.MustCompile(`<numa node='(\d+)'`).FindStringSubmatch(nestedhost.Virsh(t, h, "nodedev-dumpxml", nestedhost.NodeDeviceName(h.GPU))); gpuNode == nil || gpuNode[1] != "1" {
		t.Fatalf("the GPU stand-in %s is not on NUMA node 1 of the nested host (%v)", h.GPU, gpuNode)
	}
	vm := func(body string) string {
		return gpuBindingConfig(h, fmt.Sprintf(`
resource "kohaku_vm" "vm" {
  name             = %q
  type             = "qemu"
  kernel           = "/vmlinuz"
  initrd           = "/initrd.img"
  cmdline          = "console=ttyS0 panic=-1"
  gpus             = [kohaku_gpu_binding.gpu.id]
  shutdown_timeout = "1s"
%s
}
`, name, body))
	}
	absent := func() {
		if err := nestedDomainGone(h, name)(nil); err != nil {
			t.Fatalf("a refused create left something behind: %v", err)
		}
	}
	dumpxml := func() (string, error) { return nestedhost.VirshErr(h, "dumpxml", name) }
	expectXML := func(want []string, not []string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			doc, err := dumpxml()
			if err != nil {
				return fmt.Errorf("virsh dumpxml %s: %v: %s", name, err, doc)
			}
			for _, w := range want {
				if !regexp.MustCompile(w).MatchString(doc) {
					return fmt.Errorf("the live domain has no %s:\n%s", w, doc)
				}
			}
			for _, n := range not {
				if regexp.MustCompile(n).MatchString(doc) {
					return fmt.Errorf("the live domain still has %s:\n%s", n, doc)
				}
			}
			return nil
		}
	}
	pages := func(cell, want int) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if got := freeHugePages(t, h, cell); got != want {
				return fmt.Errorf("node %d has %d free 2 MiB huge pages, want %d", cell, got, want)
			}
			return nil
		}
	}
	var uuid string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			expectDrivers(h, onHost(h)),
			nestedDomainGone(h, name),
			pages(1, 48), pages(0, free0),
		),
		Steps: []resource.TestStep{
			{
				// Two vCPUs, but node 1 has one CPU.
				Config:      vm("  vcpu = 2\n  memory_mib = 64"),
				ExpectError: messageRE(`Error: Creating VM`, `place the VM on the host's NUMA nodes`, `2 vCPUs exceed the 1 CPUs of NUMA node 1, where the VM's GPUs are`, `numa_placement = "none"`, `Nothing was created`),
			},
			{
				// 128 MiB of huge pages, but node 1 has 96 MiB free.
				PreConfig:   absent,
				Config:      vm("  vcpu = 1\n  memory_mib = 128\n  hugepages = {}"),
				ExpectError: messageRE(`NUMA node 1 has 48 free 2 MiB huge pages; the VM's 128 MiB there need 64`, `Nothing was created`),
			},
			{
				PreConfig: absent,
				Config:    vm("  vcpu = 1\n  memory_mib = 64\n  hugepages = {}"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("numa_nodes"), knownvalue.ListExact([]knownvalue.Check{knownvalue.Int64Exact(1)})),
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("numa_placement"), knownvalue.StringExact("auto")),
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("hugepages").AtMapKey("page_size_mib"), knownvalue.Int64Exact(2)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					expectDrivers(h, onVFIO(h)),
					expectXML([]string{
						`<vcpu placement='static' cpuset='1'>1</vcpu>`,
						`(?s)<numatune>\s*<memory mode='strict' nodeset='1'/>\s*</numatune>`,
						`(?s)<memoryBacking>\s*<hugepages>\s*<page size='2048' unit='KiB'/>`,
					}, nil),
					// QEMU's 64 MiB are 32 pages of node 1; node 0 gives none.
					pages(1, 16), pages(0, free0),
					func(s *terraform.State) error {
						uuid = s.RootModule().Resources["kohaku_vm.vm"].Primary.Attributes["uuid"]
						return nil
					},
				),
			},
			{
				Config:   vm("  vcpu = 1\n  memory_mib = 64\n  hugepages = {}"),
				PlanOnly: true,
			},
			{
				// Unbound in place, with two vCPUs in one socket now that no
				// node limits them; the huge pages stay, from any node.
				Config: vm("  vcpu = 2\n  memory_mib = 64\n  hugepages = {}\n  numa_placement = \"none\"\n  cpu_topology = { sockets = 1, cores = 2, threads = 1 }"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.vm", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("numa_nodes"), knownvalue.ListSizeExact(0)),
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("cpu_topology"), knownvalue.ObjectExact(map[string]knownvalue.Check{
						"sockets": knownvalue.Int64Exact(1), "cores": knownvalue.Int64Exact(2), "threads": knownvalue.Int64Exact(1),
					})),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					expectXML([]string{
						`<vcpu placement='static'>2</vcpu>`,
						`<topology sockets='1' dies='1' cores='2' threads='1'/>`,
						`(?s)<hugepages>\s*<page size='2048' unit='KiB'/>`,
					}, []string{`<numatune>`, `cpuset=`}),
					func(s *terraform.State) error {
						if got := s.RootModule().Resources["kohaku_vm.vm"].Primary.Attributes["uuid"]; got != uuid {
							return fmt.Errorf("the VM was replaced (UUID %s, then %s)", uuid, got)
						}
						if free := freeHugePages(t, h, 0) + freeHugePages(t, h, 1); free != free0+48-32 {
							return fmt.Errorf("%d huge pages free in all, want %d (32 in use)", free, free0+48-32)
						}
						return nil
					},
				),
			},
			{
				Config:   vm("  vcpu = 2\n  memory_mib = 64\n  hugepages = {}\n  numa_placement = \"none\"\n  cpu_topology = { sockets = 1, cores = 2, threads = 1 }"),
				PlanOnly: true,
			},
		},
	})
}
