package provider

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// Every test here runs against the nested host only: nestedhost.Require
// checks that the URI is its loopback-forwarded port and that the daemon
// behind it reports the nested host's hostname and UUID. The GPU tests bind
// the same devices, so they do not run in parallel.

func gpuBindingConfig(h *nestedhost.Host, extra string) string {
	return providerBlock(h.URI) + fmt.Sprintf(`
resource "kohaku_gpu_binding" "gpu" {
  address = %q
}
`, h.GPU) + extra
}

// expectDrivers checks, with virsh reading node-device XML independently of
// the provider, that each function has the given host driver.
func expectDrivers(h *nestedhost.Host, want map[string]string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		var bad []string
		for addr, drv := range want {
			out, err := nestedhost.VirshErr(h, "nodedev-dumpxml", nestedhost.NodeDeviceName(addr))
			if err != nil {
				return fmt.Errorf("virsh nodedev-dumpxml %s: %v: %s", addr, err, out)
			}
			got := ""
			if m := regexp.MustCompile(`(?s)<driver>\s*<name>([^<]+)</name>`).FindStringSubmatch(out); m != nil {
				got = m[1]
			}
			if got != drv {
				bad = append(bad, fmt.Sprintf("%s is on %q, want %q", addr, got, drv))
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("%s", strings.Join(bad, "; "))
		}
		return nil
	}
}

// removeNestedDomainAfter removes the named domain from the nested host
// when the test ends, if it is still there (only after a failure: a test's
// own destroy removes it).
func removeNestedDomainAfter(t *testing.T, h *nestedhost.Host, name string) {
	t.Cleanup(func() {
		if _, err := nestedhost.VirshErr(h, "domstate", name); err == nil {
			_, _ = nestedhost.VirshErr(h, "destroy", name)
			_, _ = nestedhost.VirshErr(h, "undefine", "--nvram", name)
		}
	})
}

// nestedDomainGone checks, with virsh, that the named domain is not defined
// on the nested host.
func nestedDomainGone(h *nestedhost.Host, name string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		if out, err := nestedhost.VirshErr(h, "domstate", name); err == nil {
			return fmt.Errorf("domain %s is still defined (%s)", name, out)
		}
		return nil
	}
}

// nestedVM is a kohaku_vm "vm" on the nested host: it boots L1's own
// kernel and initrd with no disk (it only has to run), type qemu since L1
// offers no KVM, with the given lines (what it passes through) added.
func nestedVM(name string, lines ...string) string {
	return fmt.Sprintf(`
resource "kohaku_vm" "vm" {
  name             = %q
  type             = "qemu"
  vcpu             = 1
  memory_mib       = 128
  kernel           = "/vmlinuz"
  initrd           = "/initrd.img"
  cmdline          = "console=ttyS0 panic=-1"
  shutdown_timeout = "1s"
  %s
}
`, name, strings.Join(lines, "\n  "))
}

// nestedGPUVM is nestedVM with the binding "gpu"'s GPU.
func nestedGPUVM(name string) string {
	return nestedVM(name, "gpus = [kohaku_gpu_binding.gpu.id]")
}

func onVFIO(h *nestedhost.Host) map[string]string {
	return map[string]string{h.GPU: "vfio-pci", h.GPUAudio: "vfio-pci"}
}

func onHost(h *nestedhost.Host) map[string]string {
	return map[string]string{h.GPU: "nvidia", h.GPUAudio: "snd_hda_intel"}
}

// iommuGroupOf reads a function's IOMMU group number with virsh.
func iommuGroupOf(t *testing.T, h *nestedhost.Host, addr string) int64 {
	t.Helper()
	doc := nestedhost.Virsh(t, h, "nodedev-dumpxml", nestedhost.NodeDeviceName(addr))
	m := regexp.MustCompile(`<iommuGroup number='(\d+)'`).FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("%s has no IOMMU group on the nested host:\n%s", addr, doc)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatalf("%s: IOMMU group %q: %v", addr, m[1], err)
	}
	return n
}

// messageRE matches the parts in order, whatever Terraform's line wrapping
// did to the spaces between words.
func messageRE(parts ...string) *regexp.Regexp {
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(regexp.QuoteMeta(p), " ", `\s+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(parts, ".*"))
}

func detail(i int, key string) tfjsonpath.Path {
	return tfjsonpath.New("function_details").AtSliceIndex(i).AtMapKey(key)
}

// Bind the VGA + HDMI-audio stand-in, see drift and fix it, import, destroy.
func TestAccGPUBinding_lifecycle(t *testing.T) {
	h := nestedhost.Require(t)
	group := iommuGroupOf(t, h, h.GPU)
	addr := "kohaku_gpu_binding.gpu"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             expectDrivers(h, onHost(h)),
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					if err := expectDrivers(h, onHost(h))(nil); err != nil {
						t.Fatalf("the nested host is not in its initial state: %v", err)
					}
				},
				Config: gpuBindingConfig(h, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(h.GPU)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("iommu_group"), knownvalue.Int64Exact(group)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("functions"), knownvalue.SetExact([]knownvalue.Check{
						knownvalue.StringExact(h.GPU), knownvalue.StringExact(h.GPUAudio),
					})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("nvidia_driver_version"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("function_details"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectExact(map[string]knownvalue.Check{
							"address": knownvalue.StringExact(h.GPU), "class": knownvalue.StringExact("030000"),
							"class_name": knownvalue.StringExact("VGA compatible controller"),
							"vendor_id":  knownvalue.StringExact("1234"), "product_id": knownvalue.StringExact("1111"),
							"original_driver": knownvalue.StringExact("nvidia"), "current_driver": knownvalue.StringExact("vfio-pci"),
						}),
						knownvalue.ObjectExact(map[string]knownvalue.Check{
							"address": knownvalue.StringExact(h.GPUAudio), "class": knownvalue.StringExact("040300"),
							"class_name": knownvalue.StringExact("Audio device"),
							"vendor_id":  knownvalue.StringExact("8086"), "product_id": knownvalue.StringExact("293e"),
							"original_driver": knownvalue.StringExact("snd_hda_intel"), "current_driver": knownvalue.StringExact("vfio-pci"),
						}),
					})),
				},
				Check: expectDrivers(h, onVFIO(h)),
			},
			{
				// Nothing changed: an empty plan.
				Config:   gpuBindingConfig(h, ""),
				PlanOnly: true,
			},
			{
				// Someone gives the audio function back by hand: the next plan
				// shows the drift.
				PreConfig: func() {
					nestedhost.Virsh(t, h, "nodedev-reattach", nestedhost.NodeDeviceName(h.GPUAudio))
					if err := expectDrivers(h, map[string]string{h.GPUAudio: "snd_hda_intel"})(nil); err != nil {
						t.Fatal(err)
					}
				},
				Config:             gpuBindingConfig(h, ""),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// Apply binds it again, in place, remembering its driver.
				Config: gpuBindingConfig(h, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, detail(1, "original_driver"), knownvalue.StringExact("snd_hda_intel")),
					statecheck.ExpectKnownValue(addr, detail(1, "current_driver"), knownvalue.StringExact("vfio-pci")),
					statecheck.ExpectKnownValue(addr, detail(0, "original_driver"), knownvalue.StringExact("nvidia")),
				},
				Check: expectDrivers(h, onVFIO(h)),
			},
			{
				// Import by PCI address. The original drivers of functions
				// found on vfio-pci cannot be known after an import.
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     h.GPU,
				ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{
					"function_details.0.original_driver",
					"function_details.1.original_driver",
				},
			},
		},
	})
}

// Binding only the VGA function of the pair is refused at plan time with a
// message about the group, and nothing on the host changes.
func TestAccGPUBinding_partialGroupRefused(t *testing.T) {
	h := nestedhost.Require(t)
	group := iommuGroupOf(t, h, h.GPU)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             expectDrivers(h, onHost(h)),
		Steps: []resource.TestStep{{
			Config: providerBlock(h.URI) + fmt.Sprintf(`
resource "kohaku_gpu_binding" "gpu" {
  address   = %q
  functions = [%q]
}
`, h.GPU, h.GPU),
			ExpectError: messageRE(fmt.Sprintf("Partial IOMMU group %d", group), "leaves out "+h.GPUAudio, "must move to vfio-pci together"),
		}},
	})
	if err := expectDrivers(h, onHost(h))(nil); err != nil {
		t.Errorf("a refused binding changed the host: %v", err)
	}
}

// The NIC stand-in is a network device: refused unless allowed. An address
// the host does not have is refused too, naming the display devices.
func TestAccGPUBinding_refusals(t *testing.T) {
	h := nestedhost.Require(t)
	for _, c := range []struct {
		name, config string
		want         *regexp.Regexp
	}{
		{"network device", fmt.Sprintf(`address = %q`, h.NIC), messageRE("holds devices the host may need", "Ethernet controller", "[network]", "allow_other_classes = true")},
		{"unknown address", `address = "0000:7f:1f.7"`, messageRE("Unknown PCI address 0000:7f:1f.7", h.GPU+" (VGA compatible controller")},
		{"function outside the group", fmt.Sprintf("address = %q\n  functions = [%q, %q, %q]", h.GPU, h.GPU, h.GPUAudio, h.EDU), messageRE("Function outside IOMMU group", h.EDU+", which is not in IOMMU group")},
	} {
		t.Run(c.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config:      providerBlock(h.URI) + "resource \"kohaku_gpu_binding\" \"x\" {\n  " + c.config + "\n}\n",
					ExpectError: c.want,
				}},
			})
		})
	}
}

// A host whose IOMMU the kernel cannot use (virtio-iommu on Debian 12) has no
// IOMMU groups: the data source says so and a binding is refused.
func TestAccGPUBinding_noIOMMU(t *testing.T) {
	h := nestedhost.RequireNoIOMMU(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config: providerBlock(h.URI) + `
data "kohaku_pci_devices" "vga" {
  vendor_id    = "1234"
  class_prefix = "0300"
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.kohaku_pci_devices.vga", tfjsonpath.New("iommu_enabled"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.kohaku_pci_devices.vga", tfjsonpath.New("devices").AtSliceIndex(0).AtMapKey("iommu_group"), knownvalue.Null()),
				},
			},
			{
				Config: providerBlock(h.URI) + `
data "kohaku_pci_devices" "vga" {
  vendor_id    = "1234"
  class_prefix = "0300"
}
resource "kohaku_gpu_binding" "gpu" {
  address = data.kohaku_pci_devices.vga.devices[0].address
}
`,
				ExpectError: messageRE("No usable IOMMU on the host", "no IOMMU group", "intel_iommu=on"),
			},
		},
	})
}

// Pass the bound pair to a small VM inside the nested host with gpus alone
// and see it run with both functions as hostdevs; the plan after it is empty.
// After an import both are hostdevs, and moving them back to gpus changes
// nothing. A second binding of the same group is refused while the VM uses it.
func TestAccGPUBinding_vm(t *testing.T) {
	h := nestedhost.Require(t)
	name := "kohaku-acc-gpu-vm"
	removeNestedDomainAfter(t, h, name)
	// The L2 guest boots L1's own kernel and initrd with no disk: it only has
	// to run. type qemu: L1 offers no KVM. kohaku_vm's gpus passes through
	// every function the binding moved to vfio-pci: the VGA and its audio.
	vm := nestedGPUVM(name)
	running := func(*terraform.State) error {
		out, err := nestedhost.VirshErr(h, "domstate", name)
		if err != nil || out != "running" {
			return fmt.Errorf("domain %s on the nested host: %q %v", name, out, err)
		}
		doc, err := nestedhost.VirshErr(h, "dumpxml", name)
		if err != nil {
			return fmt.Errorf("virsh dumpxml %s: %v: %s", name, err, doc)
		}
		// Exactly the pair, each as an unmanaged VFIO hostdev with the host
		// function as its source.
		hostdevs := regexp.MustCompile(`(?s)<hostdev mode='subsystem' type='pci' managed='no'>.*?</hostdev>`).FindAllString(doc, -1)
		if len(hostdevs) != 2 {
			return fmt.Errorf("domain %s has %d unmanaged PCI hostdevs, want 2 (%s and %s):\n%s", name, len(hostdevs), h.GPU, h.GPUAudio, doc)
		}
		for _, a := range []string{h.GPU, h.GPUAudio} {
			var d, b, s, f uint
			if _, err := fmt.Sscanf(a, "%x:%x:%x.%x", &d, &b, &s, &f); err != nil {
				return fmt.Errorf("PCI address %q: %w", a, err)
			}
			src := fmt.Sprintf(`<source>\s*<address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/>`, d, b, s, f)
			found := false
			for _, hd := range hostdevs {
				found = found || regexp.MustCompile(src).MatchString(hd) && strings.Contains(hd, "<driver name='vfio'/>")
			}
			if !found {
				return fmt.Errorf("domain %s has no VFIO hostdev for %s:\n%s", name, a, doc)
			}
		}
		return nil
	}
	var domid string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			expectDrivers(h, onHost(h)),
			nestedDomainGone(h, name),
		),
		Steps: []resource.TestStep{
			{
				Config: gpuBindingConfig(h, vm),
				Check:  resource.ComposeAggregateTestCheckFunc(expectDrivers(h, onVFIO(h)), running),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("gpus"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact(h.GPU)})),
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("hostdevs"), knownvalue.Null()),
				},
			},
			{
				// Refresh attributes the audio function to the gpus entry.
				Config:   gpuBindingConfig(h, vm),
				PlanOnly: true,
			},
			{
				// Terraform forgets the VM, which runs on ...
				Config: gpuBindingConfig(h, `
removed {
  from = kohaku_vm.vm
  lifecycle {
    destroy = false
  }
}
`),
				Check: running,
			},
			{
				// ... and imports it: every passed-through function shows in
				// hostdevs.
				Config:             gpuBindingConfig(h, vm),
				ResourceName:       "kohaku_vm.vm",
				ImportState:        true,
				ImportStateId:      name,
				ImportStatePersist: true,
				ImportStateCheck: func(is []*terraform.InstanceState) error {
					for _, st := range is { // the binding is in the state too
						if a := st.Attributes; a["name"] == name {
							if a["hostdevs.#"] != "2" || (a["gpus.#"] != "" && a["gpus.#"] != "0") {
								return fmt.Errorf("imported hostdevs.# = %q, gpus.# = %q; want the two functions in hostdevs", a["hostdevs.#"], a["gpus.#"])
							}
							return nil
						}
					}
					return fmt.Errorf("no imported VM %s among %d resources", name, len(is))
				},
			},
			{
				// Moving them to gpus changes nothing on the host: the same
				// QEMU process runs on, and the plan after it is empty.
				PreConfig: func() { domid = nestedhost.Virsh(t, h, "domid", name) },
				Config:    gpuBindingConfig(h, vm),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.vm", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(running, func(*terraform.State) error {
					if now := nestedhost.Virsh(t, h, "domid", name); now != domid {
						return fmt.Errorf("domain %s was restarted (id %s, then %s)", name, domid, now)
					}
					return nil
				}),
			},
			{
				Config:   gpuBindingConfig(h, vm),
				PlanOnly: true,
			},
			{
				Config: gpuBindingConfig(h, vm+fmt.Sprintf(`
resource "kohaku_gpu_binding" "again" {
  address = %q
}
`, h.GPUAudio)),
				ExpectError: messageRE("is in use", h.GPU+" by "+name),
			},
		},
	})
}
