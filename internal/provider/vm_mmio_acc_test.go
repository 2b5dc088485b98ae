package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// The nested host's 256 GiB BAR stand-in, passed through with a
// pci_mmio64_gib too small for it, is refused at plan time on that
// attribute, naming the size the BAR needs: the plan reads the BAR from L1's
// sysfs over SSH. Nothing is created, no guest boots.
func TestAccVM_mmioTooSmallForALargeBAR(t *testing.T) {
	h := nestedhost.RequireBigBAR(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: providerBlock(h.SSHURI) + fmt.Sprintf(`
resource "kohaku_vm" "vm" {
  name           = "kohaku-acc-bigbar-plan"
  type           = "qemu"
  memory_mib     = 128
  kernel         = "/vmlinuz"
  initrd         = "/initrd.img"
  hostdevs       = [%q]
  pci_mmio64_gib = 128
}
`, h.BigBAR),
			PlanOnly: true,
			ExpectError: messageRE("pci_mmio64_gib is too small",
				"128 GiB cannot hold the 64-bit prefetchable BARs passed through", "so at least 256 GiB; set 512"),
		}},
	})
}

// bigBARSeen polls L2's QEMU (its HMP `info pci`, through L1's libvirt) until
// the guest's firmware has enumerated the bus (the q35 SATA controller's
// BAR 5 assigned), then returns where the 256 GiB stand-in's BAR 2 went:
// its address, or "" when the firmware left it unassigned. SeaBIOS writes
// the 32-bit BARs before the 64-bit ones, and under emulation in emulation
// a poll can fall between the two: an unassigned BAR 2 counts only once it
// has stayed so for bigBARSettle after the bus was enumerated (the write
// of a 256 GiB BAR can keep L2's QEMU busy for minutes: SeaBIOS's was seen
// 5 s after start with BAR 2 still unassigned, and 2m42s after start
// assigned).
func bigBARSeen(h *nestedhost.Host, name string) (string, time.Duration, error) {
	enumerated := regexp.MustCompile(`(?s)PCI device 8086:2922.*?BAR5: 32 bit memory at 0x[0-9a-f]{1,7}[^f ]`)
	bar2 := regexp.MustCompile(`(?s)PCI device 1af4:1110.*?BAR2: 64 bit prefetchable memory at 0x([0-9a-f]+) `)
	start := time.Now()
	var pci string
	var err error
	var unassignedSince time.Time
	for deadline := start.Add(8 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		pci, err = nestedhost.VirshErr(h, "qemu-monitor-command", "--hmp", name, "info pci")
		if err != nil || !enumerated.MatchString(pci) {
			continue
		}
		m := bar2.FindStringSubmatch(pci)
		if m == nil {
			return "", 0, fmt.Errorf("L2's QEMU lists no ivshmem BAR 2 (1af4:1110):\n%s", pci)
		}
		if strings.Trim(m[1], "f") != "" {
			return "0x" + m[1], time.Since(start), nil
		}
		if unassignedSince.IsZero() {
			unassignedSince = time.Now()
		}
		if time.Since(unassignedSince) >= bigBARSettle {
			return "", time.Since(start), nil
		}
	}
	if !unassignedSince.IsZero() {
		return "", time.Since(start), nil
	}
	return "", 0, fmt.Errorf("L2's firmware had not enumerated the bus after 8 minutes (%v):\n%s", err, pci)
}

// bigBARSettle is how long BAR 2 must stay unassigned after the bus was
// enumerated to count as left unassigned.
const bigBARSettle = 3 * time.Minute

// The 64-bit window Kohaku sizes for the nested host's 256 GiB BAR
// stand-in (ivshmem-plain, passed through from L1 to an L2 guest) gets the
// BAR assigned, under both firmwares; without a window OVMF leaves it
// unassigned, as it leaves an H100's 128 GiB BAR. Over SSH the plan sizes
// the window from L1's sysfs (512 GiB: the BAR plus room, rounded up) and
// OVMF places the BAR at 512 GiB, then SeaBIOS (the firmware changed, the VM
// replaced) places it too; over plain tcp, where the host's files cannot be
// read, the window stays null with a warning, and OVMF, POSTing the same
// guest, leaves BAR 2 unassigned. Each guest only has to POST: L2 QEMU's
// `info pci` after the firmware's enumeration shows where the BAR went.
func TestAccVM_largeBARWindowAssigned(t *testing.T) {
	h := nestedhost.RequireBigBAR(t)
	const name = "kohaku-acc-bigbar"
	removeNestedDomainAfter(t, h, name)
	t.Cleanup(func() { // only after a failure: destroy gives it back
		if out, err := nestedhost.VirshErr(h, "nodedev-dumpxml", nestedhost.NodeDeviceName(h.BigBAR)); err == nil && strings.Contains(out, "<name>vfio-pci</name>") {
			_, _ = nestedhost.VirshErr(h, "nodedev-reattach", nestedhost.NodeDeviceName(h.BigBAR))
		}
	})
	cfg := func(uri, firmware string) string {
		return providerBlock(uri) + fmt.Sprintf(`
resource "kohaku_gpu_binding" "bar" {
  address = %q
}
`, h.BigBAR) + nestedVM(name, fmt.Sprintf("firmware = %q", firmware), "gpus = [kohaku_gpu_binding.bar.id]")
	}
	assigned := func(firmware, want string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			at, took, err := bigBARSeen(h, name)
			if err != nil {
				return err
			}
			t.Logf("%s: BAR 2 at %q, %s after the guest started", firmware, at, took.Round(time.Second))
			if at != want {
				return fmt.Errorf("%s: BAR 2 of the 256 GiB stand-in at %q in L2, want %q", firmware, at, want)
			}
			return nil
		}
	}
	start := time.Now()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             nestedDomainGone(h, name),
		Steps: []resource.TestStep{
			{
				Config: cfg(h.SSHURI, "uefi"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("pci_mmio64_gib"), knownvalue.Int64Exact(512)),
				}},
				Check: assigned("OVMF, window 512 GiB", "0x8000000000"),
			},
			{
				Config: cfg(h.SSHURI, "bios"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.vm", plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("pci_mmio64_gib"), knownvalue.Int64Exact(512)),
				}},
				Check: func(s *terraform.State) error {
					at, took, err := bigBARSeen(h, name)
					if err != nil {
						return err
					}
					t.Logf("SeaBIOS, window 512 GiB: BAR 2 at %q, %s after the guest started", at, took.Round(time.Second))
					if at == "" {
						return fmt.Errorf("SeaBIOS left BAR 2 of the 256 GiB stand-in unassigned with a 512 GiB window")
					}
					return nil
				},
			},
		},
	})
	t.Logf("OVMF and SeaBIOS with the window Kohaku sized: %s", time.Since(start).Round(time.Second))
	start = time.Now()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             nestedDomainGone(h, name),
		Steps: []resource.TestStep{{
			Config: cfg(h.URI, "uefi"),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("pci_mmio64_gib"), knownvalue.Null()),
			}},
			Check: assigned("OVMF, no window", ""),
		}},
	})
	t.Logf("OVMF without a window: %s", time.Since(start).Round(time.Second))
}
