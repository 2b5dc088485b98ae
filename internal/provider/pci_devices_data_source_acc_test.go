package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// The nested host's GPU stand-in shows as a display device with its HDMI
// audio stand-in as the other member of its IOMMU group; kohaku_host lists
// it among its gpus, and its NUMA nodes as virsh reads them.
func TestAccPCIDevicesDataSource_nested(t *testing.T) {
	h := nestedhost.Require(t)
	group := iommuGroupOf(t, h, h.GPU)
	display := "data.kohaku_pci_devices.display"
	qemu := "data.kohaku_pci_devices.qemu"
	all := "data.kohaku_pci_devices.all"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: providerBlock(h.URI) + `
data "kohaku_pci_devices" "display" {
  class_prefix = "03"
}
data "kohaku_pci_devices" "qemu" {
  vendor_id = "0x1234"
}
data "kohaku_pci_devices" "all" {}
data "kohaku_host" "nested" {}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(display, tfjsonpath.New("iommu_enabled"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue(display, tfjsonpath.New("devices"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"address":             knownvalue.StringExact(h.GPU),
						"vendor_id":           knownvalue.StringExact("1234"),
						"vendor_name":         knownvalue.StringExact(""),
						"product_id":          knownvalue.StringExact("1111"),
						"product_name":        knownvalue.StringExact(""),
						"class":               knownvalue.StringExact("030000"),
						"class_name":          knownvalue.StringExact("VGA compatible controller"),
						"driver":              knownvalue.StringExact("nvidia"),
						"iommu_group":         knownvalue.Int64Exact(group),
						"iommu_group_members": knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(h.GPU), knownvalue.StringExact(h.GPUAudio)}),
						"numa_node":           knownvalue.Int64Exact(1), // behind the expander bridge on node 1
						// qemu+tcp cannot read the host's sysfs
						"bars":          knownvalue.Null(),
						"reset_methods": knownvalue.Null(),
						// no SR-IOV: no VFs, not a VF, no vGPU files
						"max_vfs":              knownvalue.Int64Exact(0),
						"virtual_functions":    knownvalue.ListExact([]knownvalue.Check{}),
						"physical_function":    knownvalue.Null(),
						"vgpu_type":            knownvalue.Null(),
						"creatable_vgpu_types": knownvalue.Null(),
					}),
				})),
				// vendor 1234 is QEMU's: the VGA and the edu device, sorted by address
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices").AtSliceIndex(0).AtMapKey("address"), knownvalue.StringExact(h.EDU)),
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices").AtSliceIndex(0).AtMapKey("driver"), knownvalue.StringExact("")),
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices").AtSliceIndex(1).AtMapKey("address"), knownvalue.StringExact(h.GPU)),
				statecheck.ExpectKnownValue(qemu, tfjsonpath.New("devices"), knownvalue.ListSizeExact(2)),
				// the same stand-in as kohaku_host's GPU, checked field by field against virsh
				statecheck.ExpectKnownValue("data.kohaku_host.nested", tfjsonpath.New("gpus").AtSliceIndex(0).AtMapKey("address"), knownvalue.StringExact(h.GPU)),
				gpusCheck(t, h.URI, "data.kohaku_host.nested"),
				numaCheck(t, h.URI, "data.kohaku_host.nested"),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckTypeSetElemNestedAttrs(all, "devices.*", map[string]string{
					"address": h.GPUAudio, "class_name": "Audio device", "driver": "snd_hda_intel",
					"vendor_name": "Intel Corporation",
				}),
				resource.TestCheckTypeSetElemNestedAttrs(all, "devices.*", map[string]string{
					"address": h.NIC, "class": "020000", "driver": "e1000e",
				}),
			),
		}},
	})
}

// Over SSH the functions' BARs and reset methods come from L1's sysfs: every
// function's reset_methods is what its reset_method file says (empty where
// there is none), read here through the test's own SSH client, and the GPU
// stand-in's BARs are QEMU's VGA's: a 16 MiB 32-bit prefetchable frame
// buffer and a 4 KiB register BAR.
func TestAccPCIDevicesDataSource_nestedSysfs(t *testing.T) {
	h := nestedhost.RequireSSH(t)
	// One SSH session (each costs seconds against L1): every function's
	// reset_method, then what lspci says of the GPU stand-in's regions.
	out := nestedhost.SSH(t, h, `for d in /sys/bus/pci/devices/*; do printf '%s|%s\n' "${d##*/}" "$(cat $d/reset_method 2>/dev/null)"; done; `+
		`echo ==; lspci -vv -s `+strings.TrimPrefix(h.GPU, "0000:")+` | grep -o 'size=[0-9]*[KMG]'`)
	raw, lspci, _ := strings.Cut(out, "==\n")
	// lspci in L1 agrees with the sizes checked below.
	if got := strings.Fields(lspci); len(got) < 2 || got[0] != "size=16M" || got[1] != "size=4K" {
		t.Fatalf("lspci in L1 says %q of the GPU stand-in's regions", lspci)
	}
	var checks []knownvalue.Check
	lines := strings.Split(strings.TrimSpace(raw), "\n")
	kinds := map[string]bool{}
	for _, l := range lines {
		addr, methods, _ := strings.Cut(l, "|")
		want := []knownvalue.Check{}
		for _, m := range strings.Fields(methods) {
			want = append(want, knownvalue.StringExact(m))
		}
		kinds[methods] = true
		checks = append(checks, knownvalue.ObjectPartial(map[string]knownvalue.Check{
			"address":       knownvalue.StringExact(addr),
			"reset_methods": knownvalue.ListExact(want),
		}))
	}
	// L1 has functions with a bus reset only, with pm and bus, and with none.
	if !kinds["bus"] || !kinds["pm bus"] || !kinds[""] {
		t.Fatalf("the nested host's reset methods are not the mix the test expects: %q", raw)
	}
	all := "data.kohaku_pci_devices.all"
	gpu := "data.kohaku_pci_devices.gpu"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: providerBlock(h.SSHURI) + `
data "kohaku_pci_devices" "all" {}
data "kohaku_pci_devices" "gpu" {
  vendor_id    = "1234"
  class_prefix = "0300"
}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(all, tfjsonpath.New("devices"), knownvalue.ListExact(checks)),
				statecheck.ExpectKnownValue(gpu, tfjsonpath.New("devices").AtSliceIndex(0).AtMapKey("bars"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"index": knownvalue.Int64Exact(0), "size_bytes": knownvalue.Int64Exact(16 << 20),
						"is_64bit": knownvalue.Bool(false), "prefetchable": knownvalue.Bool(true), "io": knownvalue.Bool(false),
					}),
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"index": knownvalue.Int64Exact(2), "size_bytes": knownvalue.Int64Exact(4096),
						"is_64bit": knownvalue.Bool(false), "prefetchable": knownvalue.Bool(false), "io": knownvalue.Bool(false),
					}),
				})),
			},
		}},
	})
}
