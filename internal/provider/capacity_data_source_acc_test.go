package provider

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// capacityNodesCheck compares a host's numa_nodes with virsh: the CPUs of
// each cell (capabilities), its free memory (freecell, within a tenth of
// the node, as it moves between the two reads) and its free huge pages of
// each size but the base page (freepages); pinned CPUs are some of the
// node's.
func capacityNodesCheck(t *testing.T, uri string) knownvalue.Check {
	var nodes []knownvalue.Check
	for _, c := range virshCells(t, uri) {
		sizes := slices.Sorted(maps.Keys(c.pages))
		if len(sizes) > 0 {
			sizes = sizes[1:]
		}
		pages := []knownvalue.Check{}
		for _, size := range sizes {
			pages = append(pages, knownvalue.ObjectExact(map[string]knownvalue.Check{
				"size_kib": knownvalue.Int64Exact(size),
				"free": knownvalue.Int64Func(func(v int64) error {
					want, err := virshFreePages(uri, c.id, size)
					if err != nil {
						return err
					}
					if v != want {
						return fmt.Errorf("node %d: %d free %d KiB pages, virsh freepages says %d", c.id, v, size, want)
					}
					return nil
				}),
			}))
		}
		memMiB := c.memoryKiB / 1024
		cpus := int64(len(c.cpus))
		nodes = append(nodes, knownvalue.ObjectExact(map[string]knownvalue.Check{
			"id":   knownvalue.Int64Exact(c.id),
			"cpus": knownvalue.Int64Exact(cpus),
			"pinned_cpus": knownvalue.Int64Func(func(v int64) error {
				if v < 0 || v > cpus {
					return fmt.Errorf("node %d: %d pinned CPUs of %d", c.id, v, cpus)
				}
				return nil
			}),
			"free_memory_mib": knownvalue.Int64Func(func(v int64) error {
				kib, err := virshFreeCell(uri, c.id)
				if err != nil {
					return err
				}
				if d := v - kib/1024; v <= 0 || v > memMiB || d > memMiB/10 || d < -memMiB/10 {
					return fmt.Errorf("node %d: %d MiB free, virsh freecell says %d KiB, the node has %d MiB", c.id, v, kib, memMiB)
				}
				return nil
			}),
			"free_hugepages": knownvalue.ListExact(pages),
		}))
	}
	return knownvalue.ListExact(nodes)
}

// virshNodeCPUs reads the host's CPU count from `virsh nodeinfo`.
func virshNodeCPUs(t *testing.T, uri string) int64 {
	t.Helper()
	out, err := acctest.Virsh(uri, "nodeinfo")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CPU\(s\):\s+(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no CPU(s) in virsh nodeinfo output: %q", out)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// The local test host (no GPUs) read by default (the provider's default
// connection is every host it knows): its CPUs as virsh nodeinfo counts
// them, its NUMA nodes as capabilities, freecell and freepages read them,
// and no GPUs. A second read adds a host of the hosts map that refuses
// connections: it is reported down with the error, and the local host is
// read all the same.
func TestAccCapacityDataSource_localHost(t *testing.T) {
	uri := acctest.URI(t)
	cpus := virshNodeCPUs(t, uri)
	port := acctest.ClosedPort(t)
	local := tfjsonpath.New("capacity").AtMapKey("")
	down := tfjsonpath.New("capacity").AtMapKey("down")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "kohaku" {
  uri   = %q
  hosts = { down = { uri = "qemu+tcp://127.0.0.1:%d/system" } }
}
data "kohaku_capacity" "all" {}
data "kohaku_capacity" "local" {
  hosts = [""]
}
`, uri, port),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", tfjsonpath.New("hosts"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("")})),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", tfjsonpath.New("capacity"), knownvalue.MapSizeExact(1)),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", local.AtMapKey("up"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", local.AtMapKey("error"), knownvalue.Null()),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", local.AtMapKey("cpus"), knownvalue.Int64Exact(cpus)),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", local.AtMapKey("pinned_cpus"), knownvalue.Int64Func(func(v int64) error {
					if v < 0 || v > cpus {
						return fmt.Errorf("%d pinned CPUs of %d", v, cpus)
					}
					return nil
				})),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", local.AtMapKey("numa_nodes"), capacityNodesCheck(t, uri)),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", local.AtMapKey("gpus"), knownvalue.ListExact([]knownvalue.Check{})),
				statecheck.ExpectKnownValue("data.kohaku_capacity.local", local.AtMapKey("gpu_models"), knownvalue.ListExact([]knownvalue.Check{})),
				// every host the provider knows: the default connection first
				statecheck.ExpectKnownValue("data.kohaku_capacity.all", tfjsonpath.New("hosts"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(""), knownvalue.StringExact("down")})),
				statecheck.ExpectKnownValue("data.kohaku_capacity.all", local.AtMapKey("up"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.kohaku_capacity.all", local.AtMapKey("cpus"), knownvalue.Int64Exact(cpus)),
				statecheck.ExpectKnownValue("data.kohaku_capacity.all", down.AtMapKey("up"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.kohaku_capacity.all", down.AtMapKey("error"), knownvalue.StringRegexp(regexp.MustCompile(`127\.0\.0\.1:`+strconv.Itoa(port)+`[\s\S]*refused`))),
				statecheck.ExpectKnownValue("data.kohaku_capacity.all", down.AtMapKey("cpus"), knownvalue.Null()),
				statecheck.ExpectKnownValue("data.kohaku_capacity.all", down.AtMapKey("gpus"), knownvalue.ListExact([]knownvalue.Check{})),
			},
		}},
	})
}

// A name that is not a host of the provider fails the read.
func TestAccCapacityDataSource_unknownHost(t *testing.T) {
	uri := acctest.URI(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      providerBlock(uri) + "data \"kohaku_capacity\" \"x\" {\n  hosts = [\"nowhere\"]\n}\n",
			ExpectError: regexp.MustCompile(`host "nowhere" is not configured`),
		}},
	})
}

// The nested host's GPU stand-in (QEMU's VGA on the NVIDIA stand-in driver,
// its HDMI audio beside it in one IOMMU group): first free on its host
// driver, then bound by hand to vfio-pci with no VM (still free: vfio-pci
// is not use), then claimed through claim and virt by a VM being created
// (claimed, naming the VM), then given by hand to a domain defined with
// virsh (in use, naming it; a VM asking for a GPU there is refused, naming
// it). The claim, the domain and the binding are undone after.
func TestAccGPUCapacity_nested(t *testing.T) {
	h := nestedhost.Require(t)
	mine := []string{h.GPU, h.GPUAudio}
	for _, a := range mine {
		if nestedhost.Driver(t, h, a) == vfio.DriverVFIO {
			t.Fatalf("the nested host is not in its initial state: %s is on vfio-pci", a)
		}
	}
	addr, err := vfio.ParseAddress(h.GPU)
	if err != nil {
		t.Fatal(err)
	}
	c := vmClient(t, h.URI)
	ctx := context.Background()
	cl := &claim.Claimer{Host: c}
	const byHand = "kohaku-acc-capacity-byhand"
	removeNestedDomainAfter(t, h, byHand)
	removeNestedDomainAfter(t, h, "kohaku-acc-capacity-asks")
	holder := claim.Holder{VM: "kohaku-acc-capacity", UUID: "6f3c1b2a-8d4e-4f5a-9b6c-7d8e9f0a1b2c", Workspace: "acc-capacity"}
	_, poolErr := nestedhost.VirshErr(h, "pool-info", claim.Pool)
	t.Cleanup(func() {
		_ = cl.Release(context.Background(), addr, holder)
		if poolErr != nil { // the test's claim made the pool: leave the host as found
			_, _ = nestedhost.VirshErr(h, "pool-destroy", claim.Pool)
			_, _ = nestedhost.VirshErr(h, "pool-delete", claim.Pool)
			_, _ = nestedhost.VirshErr(h, "pool-undefine", claim.Pool)
		}
		for _, a := range mine {
			if out, err := nestedhost.VirshErr(h, "nodedev-dumpxml", nestedhost.NodeDeviceName(a)); err == nil && strings.Contains(out, "<name>vfio-pci</name>") {
				_, _ = nestedhost.VirshErr(h, "nodedev-reattach", nestedhost.NodeDeviceName(a))
			}
		}
	})
	gpu := tfjsonpath.New("capacity").AtMapKey("").AtMapKey("gpus").AtSliceIndex(0)
	models := tfjsonpath.New("capacity").AtMapKey("").AtMapKey("gpu_models")
	counts := func(free, claimed int64) knownvalue.Check {
		return knownvalue.ListExact([]knownvalue.Check{knownvalue.ObjectExact(map[string]knownvalue.Check{
			"model": knownvalue.StringExact(""), "total": knownvalue.Int64Exact(1),
			"free": knownvalue.Int64Exact(free), "claimed": knownvalue.Int64Exact(claimed),
			"in_use": knownvalue.Int64Exact(0), "host_process": knownvalue.Int64Exact(0), "quarantined": knownvalue.Int64Exact(0), "vgpus": knownvalue.Int64Exact(0),
		})})
	}
	cfg := providerBlock(h.URI) + `data "kohaku_capacity" "nested" {}` + "\n"
	ds := "data.kohaku_capacity.nested"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				// on its host driver, nothing holds it (over qemu+tcp the
				// host's processes are not read)
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("capacity").AtMapKey("").AtMapKey("gpus"), knownvalue.ListSizeExact(1)),
					statecheck.ExpectKnownValue(ds, gpu, knownvalue.ObjectExact(map[string]knownvalue.Check{
						"address":    knownvalue.StringExact(h.GPU),
						"model":      knownvalue.StringExact(""),
						"vendor_id":  knownvalue.StringExact("1234"),
						"device_id":  knownvalue.StringExact("1111"),
						"memory_gib": knownvalue.Null(), // qemu+tcp cannot read the BARs
						"numa_node":  knownvalue.Int64Exact(1),
						"state":      knownvalue.StringExact("free"),
						"holder":     knownvalue.Null(),
						"mdev_types": knownvalue.ListExact([]knownvalue.Check{}),
					})),
					statecheck.ExpectKnownValue(ds, models, counts(1, 0)),
				},
			},
			{
				// bound to vfio-pci by hand, no VM: free
				PreConfig: func() {
					for _, a := range mine {
						nestedhost.Virsh(t, h, "nodedev-detach", nestedhost.NodeDeviceName(a), "--driver", "vfio")
					}
				},
				Config: cfg,
				Check:  expectDrivers(h, map[string]string{h.GPU: vfio.DriverVFIO, h.GPUAudio: vfio.DriverVFIO}),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, gpu.AtMapKey("state"), knownvalue.StringExact("free")),
					statecheck.ExpectKnownValue(ds, gpu.AtMapKey("holder"), knownvalue.Null()),
					statecheck.ExpectKnownValue(ds, models, counts(1, 0)),
				},
			},
			{
				// claimed through the claim protocol by a VM being
				// created (no domain yet): claimed, naming the VM
				PreConfig: func() {
					if _, err := cl.Take(ctx, claim.Device{Address: addr, Functions: []vfio.Address{addr}}, holder); err != nil {
						t.Fatalf("claiming %s: %v", addr, err)
					}
				},
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, gpu.AtMapKey("state"), knownvalue.StringExact("claimed")),
					statecheck.ExpectKnownValue(ds, gpu.AtMapKey("holder"), knownvalue.StringRegexp(regexp.MustCompile(
						`VM kohaku-acc-capacity \(`+holder.UUID+`\) of workspace acc-capacity`))),
					statecheck.ExpectKnownValue(ds, models, counts(0, 1)),
				},
			},
			{
				// given by hand to a domain (virsh define with a hostdev),
				// the claim released: in use, naming the domain; placement
				// refuses it to a VM asking for a GPU here, naming it too,
				// and makes nothing
				PreConfig: func() {
					if err := cl.Release(ctx, addr, holder); err != nil {
						t.Fatalf("releasing the claim: %v", err)
					}
					f := filepath.Join(t.TempDir(), "byhand.xml")
					xml := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os>`+
						`<devices><hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/></source></hostdev></devices></domain>`,
						byHand, addr.Domain, addr.Bus, addr.Slot, addr.Function)
					if err := os.WriteFile(f, []byte(xml), 0o600); err != nil {
						t.Fatal(err)
					}
					nestedhost.Virsh(t, h, "define", f)
				},
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, gpu.AtMapKey("state"), knownvalue.StringExact("in_use")),
					statecheck.ExpectKnownValue(ds, gpu.AtMapKey("holder"), knownvalue.StringRegexp(regexp.MustCompile(byHand+` \(.*\) \(given by hand, no claim\)`))),
					statecheck.ExpectKnownValue(ds, models, knownvalue.ListExact([]knownvalue.Check{knownvalue.ObjectExact(map[string]knownvalue.Check{
						"model": knownvalue.StringExact(""), "total": knownvalue.Int64Exact(1),
						"free": knownvalue.Int64Exact(0), "claimed": knownvalue.Int64Exact(0),
						"in_use": knownvalue.Int64Exact(1), "host_process": knownvalue.Int64Exact(0), "quarantined": knownvalue.Int64Exact(0), "vgpus": knownvalue.Int64Exact(0),
					})})),
				},
			},
			{
				Config:      cfg + placedVMConfig("asks", "kohaku-acc-capacity-asks", 1, ""),
				ExpectError: regexp.MustCompile(`(?s)` + byHand),
			},
		},
	})
	if out, err := nestedhost.VirshErr(h, "domstate", "kohaku-acc-capacity-asks"); err == nil {
		t.Errorf("the refused VM was defined on the nested host (%s)", out)
	}
}
