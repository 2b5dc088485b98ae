package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Placement over a two-host fleet: the local test host (the provider's
// default connection, "") and the nested host l1, whose stand-in GPU
// (vendor 1234, device 1111, with its audio function) is the fleet's only
// GPU. The VMs never boot (running = false) and are tiny: what is proven
// is where they land and what is claimed, bound and given back.

// placementFleet is the provider block of the fleet.
func placementFleet(h *nestedhost.Host) string {
	return fmt.Sprintf("provider \"kohaku\" {\n  uri   = %q\n  hosts = { l1 = { uri = %q } }\n}\n", accURI(), h.URI)
}

// placedVMConfig is a VM that asks for gpus stand-in GPUs (none: a
// CPU-only VM) among hosts (nil: all).
func placedVMConfig(res, name string, gpus int, hosts string) string {
	gpu := ""
	if gpus > 0 {
		gpu = fmt.Sprintf("    gpu {\n      count     = %d\n      vendor_id = \"1234\"\n      device_id = \"1111\"\n    }\n", gpus)
	}
	if hosts != "" {
		hosts = "    hosts = " + hosts + "\n"
	}
	return fmt.Sprintf(`resource "kohaku_vm" %q {
  name       = %q
  type       = "qemu"
  vcpu       = 1
  memory_mib = 128
  running    = false
  placement {
%s%s  }
}
`, res, name, gpu, hosts)
}

// standInGiven checks that the stand-in and its audio function are back
// on their host drivers, and that no claim names the GPU.
func standInGiven(t *testing.T, h *nestedhost.Host) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, a := range []string{h.GPU, h.GPUAudio} {
			if d := nestedhost.Driver(t, h, a); d == vfio.DriverVFIO {
				return fmt.Errorf("%s is still on vfio-pci", a)
			}
		}
		recs, err := l1Claims(t, h)
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			return fmt.Errorf("claims left on l1: %+v", recs)
		}
		return nil
	}
}

// l1Claims lists the claims on the nested host.
func l1Claims(t *testing.T, h *nestedhost.Host) ([]claim.Record, error) {
	cl := &claim.Claimer{Host: vmClient(t, h.URI)}
	return cl.List(context.Background())
}

// placementCleanup leaves the nested host as found, whatever the test did:
// the named domains gone, the stand-in on its host drivers, no claims.
func placementCleanup(t *testing.T, h *nestedhost.Host, names ...string) {
	for _, n := range names {
		removeNestedDomainAfter(t, h, n)
	}
	t.Cleanup(func() {
		if recs, err := l1Claims(t, h); err == nil {
			for _, r := range recs {
				_, _ = nestedhost.VirshErr(h, "vol-delete", "--pool", claim.Pool, claim.VolumeName(r.Address()))
			}
		}
		for _, a := range []string{h.GPUAudio, h.GPU} {
			if out, err := nestedhost.VirshErr(h, "nodedev-dumpxml", nestedhost.NodeDeviceName(a)); err == nil && strings.Contains(out, "<name>vfio-pci</name>") {
				_, _ = nestedhost.VirshErr(h, "nodedev-reattach", nestedhost.NodeDeviceName(a))
			}
		}
	})
}

// requireNoLocalStandIn refuses to run a placement test whose fleet includes
// this machine (the test host is the local libvirtd) when this machine has a
// PCI function with the stand-in's ids (QEMU's VGA, 1234:1111, as a cloud
// VM's own display may be): placement could choose it and bind this
// machine's own device to vfio-pci.
func requireNoLocalStandIn(t *testing.T) {
	t.Helper()
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	for _, d := range devs {
		v, _ := os.ReadFile(filepath.Join(d, "vendor"))
		id, _ := os.ReadFile(filepath.Join(d, "device"))
		if strings.TrimSpace(string(v)) == "0x1234" && strings.TrimSpace(string(id)) == "0x1111" {
			t.Fatalf("this machine has a PCI function %s with the nested stand-in's ids 1234:1111: a placement over the whole fleet could bind this machine's own device; run on a machine without one", filepath.Base(d))
		}
	}
}

// A VM asking for a GPU lands on l1 with the stand-in, claimed and bound;
// a CPU-only VM lands on either host; the plan after is empty, and stays
// empty for both when a third host joins the fleet and another VM takes
// capacity there; destroy gives the stand-in back and releases its claim.
func TestAccGPUPlacement_landsWhereTheGPUIs(t *testing.T) {
	h := nestedhost.Require(t)
	requireNoLocalStandIn(t)
	for _, a := range []string{h.GPU, h.GPUAudio} {
		if nestedhost.Driver(t, h, a) == vfio.DriverVFIO {
			t.Fatalf("the nested host is not in its initial state: %s is on vfio-pci", a)
		}
	}
	placementCleanup(t, h, "kohaku-acc-place-gpu")
	local := vmClient(t, accURI())
	t.Cleanup(func() {
		if ref, err := local.LookupDomain(context.Background(), "kohaku-acc-place-cpu"); err == nil {
			_, _ = local.StopDomain(context.Background(), ref, 0)
			_ = local.UndefineDomain(context.Background(), ref)
		}
	})
	removeNestedDomainAfter(t, h, "kohaku-acc-place-cpu")
	h2 := nestedhost.RequireNoIOMMU(t)
	removeNestedDomainAfter(t, h2, "kohaku-acc-place-late")
	removeNestedDomainAfter(t, h, "kohaku-acc-place-numa")
	numa := func(mib int) string {
		return strings.Replace(strings.Replace(placedVMConfig("numa", "kohaku-acc-place-numa", 0, `["l1"]`),
			"placement {\n", "placement {\n    numa_local = true\n", 1), "memory_mib = 128", fmt.Sprintf("memory_mib = %d", mib), 1)
	}
	vms := placedVMConfig("gpu", "kohaku-acc-place-gpu", 1, "") + placedVMConfig("cpu", "kohaku-acc-place-cpu", 0, "") + numa(128)
	cfg := placementFleet(h) + vms
	grown := placementFleet3(h, h2) + vms + placedVMConfig("late", "kohaku-acc-place-late", 0, `["l2"]`)
	// The NUMA-local VM without GPUs is bound to the one node placement
	// chose for it (l1 has two), as its numa_nodes says.
	numaBound := func(s *terraform.State) error {
		a := s.RootModule().Resources["kohaku_vm.numa"].Primary.Attributes
		if a["numa_nodes.#"] != "1" {
			return fmt.Errorf("numa_nodes = %q nodes, want 1", a["numa_nodes.#"])
		}
		out := nestedhost.Virsh(t, h, "dumpxml", "kohaku-acc-place-numa")
		if want := fmt.Sprintf("<memory mode='strict' nodeset='%s'/>", a["numa_nodes.0"]); !strings.Contains(out, want) {
			return fmt.Errorf("the domain is not bound to node %s (%s):\n%s", a["numa_nodes.0"], want, out)
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: resource.ComposeTestCheckFunc(
			nestedDomainGone(h, "kohaku-acc-place-gpu"),
			nestedDomainGone(h, "kohaku-acc-place-cpu"),
			nestedDomainGone(h2, "kohaku-acc-place-late"),
			nestedDomainGone(h, "kohaku-acc-place-numa"),
			standInGiven(t, h),
		),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_vm.gpu", tfjsonpath.New("host"), knownvalue.StringExact("l1")),
					statecheck.ExpectKnownValue("kohaku_vm.gpu", tfjsonpath.New("placed_gpus"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(h.GPU)})),
					statecheck.ExpectKnownValue("kohaku_vm.gpu", tfjsonpath.New("gpus"), knownvalue.Null()),
					statecheck.ExpectKnownValue("kohaku_vm.gpu", tfjsonpath.New("hostdevs"), knownvalue.Null()),
					statecheck.ExpectKnownValue("kohaku_vm.cpu", tfjsonpath.New("host"), knownvalue.StringRegexp(regexp.MustCompile(`^(|l1)$`))),
					statecheck.ExpectKnownValue("kohaku_vm.cpu", tfjsonpath.New("placed_gpus"), knownvalue.ListExact([]knownvalue.Check{})),
				},
				Check: resource.ComposeTestCheckFunc(
					numaBound,
					expectDrivers(h, map[string]string{h.GPU: vfio.DriverVFIO, h.GPUAudio: vfio.DriverVFIO}),
					func(s *terraform.State) error {
						recs, err := l1Claims(t, h)
						if err != nil {
							return err
						}
						uuid := s.RootModule().Resources["kohaku_vm.gpu"].Primary.Attributes["uuid"]
						if len(recs) != 1 || recs[0].Device != h.GPU || recs[0].VM != "kohaku-acc-place-gpu" || !strings.EqualFold(recs[0].UUID, uuid) {
							return fmt.Errorf("claims on l1 %+v, want one on %s by kohaku-acc-place-gpu (%s)", recs, h.GPU, uuid)
						}
						out := nestedhost.Virsh(t, h, "dumpxml", "kohaku-acc-place-gpu")
						for _, a := range []string{h.GPU, h.GPUAudio} {
							pa, _ := vfio.ParseAddress(a)
							if !strings.Contains(out, fmt.Sprintf("bus='0x%02x' slot='0x%02x' function='0x%x'", pa.Bus, pa.Slot, pa.Function)) {
								return fmt.Errorf("the domain does not pass %s through:\n%s", a, out)
							}
						}
						return nil
					},
				),
			},
			{
				// sticky: nothing changed, nothing planned
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				// sticky while the fleet changes: a third host (the second
				// nested host, l2) joins the provider and another VM takes
				// capacity there; the two placed VMs are not touched.
				Config: grown,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("kohaku_vm.gpu", plancheck.ResourceActionNoop),
						plancheck.ExpectResourceAction("kohaku_vm.cpu", plancheck.ResourceActionNoop),
						plancheck.ExpectResourceAction("kohaku_vm.late", plancheck.ResourceActionCreate),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_vm.gpu", tfjsonpath.New("host"), knownvalue.StringExact("l1")),
					statecheck.ExpectKnownValue("kohaku_vm.gpu", tfjsonpath.New("placed_gpus"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(h.GPU)})),
					statecheck.ExpectKnownValue("kohaku_vm.late", tfjsonpath.New("host"), knownvalue.StringExact("l2")),
				},
			},
			{
				Config: grown,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				// An update that redefines the NUMA-local VM keeps it on
				// its node.
				Config: strings.Replace(grown, numa(128), numa(160), 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.numa", plancheck.ResourceActionUpdate),
				}},
				Check: numaBound,
			},
		},
	})
}

// placementFleet3 is placementFleet with a third host, l2 (the second
// nested host).
func placementFleet3(h, h2 *nestedhost.Host) string {
	return fmt.Sprintf("provider \"kohaku\" {\n  uri   = %q\n  hosts = {\n    l1 = { uri = %q }\n    l2 = { uri = %q }\n  }\n}\n", accURI(), h.URI, h2.URI)
}

// A request no host can satisfy fails at plan (more GPUs than any host
// has) or at the start of create (the one GPU claimed by another VM),
// naming what each host lacks or the holder, and leaves nothing.
func TestAccGPUPlacement_noFitLeavesNothing(t *testing.T) {
	h := nestedhost.Require(t)
	requireNoLocalStandIn(t)
	placementCleanup(t, h, "kohaku-acc-place-two", "kohaku-acc-place-late")
	c := vmClient(t, h.URI)
	addr, err := vfio.ParseAddress(h.GPU)
	if err != nil {
		t.Fatal(err)
	}
	other := claim.Holder{VM: "kohaku-acc-place-holder", UUID: "0b7f3c1e-2d4a-4e6b-8c9d-1a2b3c4d5e6f", Workspace: "acc-other"}
	nothingLeft := func(name string) resource.TestCheckFunc {
		return resource.ComposeTestCheckFunc(nestedDomainGone(h, name), func(*terraform.State) error {
			for _, a := range []string{h.GPU, h.GPUAudio} {
				if d := nestedhost.Driver(t, h, a); d == vfio.DriverVFIO {
					return fmt.Errorf("%s was left on vfio-pci", a)
				}
			}
			recs, err := l1Claims(t, h)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.VM == name {
					return fmt.Errorf("%s left a claim on %s", name, r.Device)
				}
			}
			return nil
		})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config:      placementFleet(h) + placedVMConfig("two", "kohaku-acc-place-two", 2, ""),
				PlanOnly:    true,
				ExpectError: vmErrRE(`Invalid placement.gpu.count`, `2 GPUs asked, but no host has more than 1 matching`, `(l1)`),
			},
			{
				// the one GPU claimed by a VM of another workspace
				PreConfig: func() {
					if _, err := (&claim.Claimer{Host: c}).Take(context.Background(), claim.Device{Address: addr, Functions: []vfio.Address{addr}}, other); err != nil {
						t.Fatal(err)
					}
				},
				Config:      placementFleet(h) + placedVMConfig("late", "kohaku-acc-place-late", 1, ""),
				ExpectError: vmErrRE(`Creating VM kohaku-acc-place-late`, `kohaku-acc-place-holder`, `Nothing was created, and nothing is held`),
			},
			{
				// the failed create left nothing; the other VM's claim stays its own
				PreConfig: func() {
					if err := nothingLeft("kohaku-acc-place-late")(nil); err != nil {
						t.Fatal(err)
					}
					if err := (&claim.Claimer{Host: c}).Release(context.Background(), addr, other); err != nil {
						t.Fatalf("the other workspace's claim: %v", err)
					}
				},
				Config:   placementFleet(h),
				PlanOnly: true,
			},
		},
	})
}

// Two terraform apply processes with their own state, started together,
// both asking for the fleet's one GPU: exactly one creates its VM, the
// other fails naming it and leaves nothing. Ten rounds.
func TestAccGPUPlacement_raceForTheLastGPU(t *testing.T) {
	h := nestedhost.Require(t)
	names := []string{"kohaku-acc-race-a", "kohaku-acc-race-b"}
	placementCleanup(t, h, names...)
	var ws []*acctest.Workspace
	for _, n := range names {
		w := acctest.NewWorkspace(t, faultCLIHead+placementFleet(h)+placedVMConfig("vm", n, 1, `["l1"]`))
		ws = append(ws, w)
	}
	for round := 1; round <= 10; round++ {
		won, outs := raceApply(t, round, ws)
		lost := 1 - won
		if !strings.Contains(outs[lost], names[won]) {
			t.Errorf("round %d: the loser's error does not name the holder %s:\n%s", round, names[won], tail(outs[lost], 3000))
		}
		if _, err := nestedhost.VirshErr(h, "domstate", names[lost]); err == nil {
			t.Errorf("round %d: the loser's domain %s exists", round, names[lost])
		}
		recs, err := l1Claims(t, h)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].VM != names[won] {
			t.Errorf("round %d: claims %+v, want one by %s", round, recs, names[won])
		}
		if st := ws[lost].State(); len(st) != 0 {
			t.Errorf("round %d: the loser's state holds %d resources", round, len(st))
		}
		ws[won].Must("destroy", "-auto-approve", "-input=false")
		if err := standInGiven(t, h)(nil); err != nil {
			t.Fatalf("round %d: after the winner's destroy: %v", round, err)
		}
		if t.Failed() {
			return
		}
		time.Sleep(time.Second) // libvirt's node-device events settle
	}
}

// raceApply starts terraform apply in the two workspaces at the same
// moment and returns which one succeeded, with both outputs; the test
// fails unless exactly one did.
func raceApply(t *testing.T, round int, ws []*acctest.Workspace) (won int, outs []string) {
	t.Helper()
	outs = make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[i], errs[i] = w.Run("apply", "-auto-approve", "-input=false")
		}()
	}
	close(start)
	wg.Wait()
	switch {
	case errs[0] == nil && errs[1] != nil:
		return 0, outs
	case errs[1] == nil && errs[0] != nil:
		return 1, outs
	}
	t.Fatalf("round %d: want exactly one apply to succeed; got %v and %v\n--- a:\n%s\n--- b:\n%s", round, errs[0], errs[1], tail(outs[0], 3000), tail(outs[1], 3000))
	return -1, outs
}
