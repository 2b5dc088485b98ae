package provider

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// The SR-IOV stand-in of the nested host (nestedhost.sh): QEMU's NVMe
// controller with SR-IOV, whose VFs the NVIDIA stand-in module gives the
// vendor's vGPU files (an L40S's time-sliced Q types, 48 GiB in all).
const (
	standInType12 = "NVIDIA L40S-12Q"
	standInType24 = "NVIDIA L40S-24Q"
	standInType48 = "NVIDIA L40S-48Q"
)

// requireSRIOV returns the nested host over SSH (Kohaku reads and writes
// L1's sysfs) and its SR-IOV stand-in's PF, with no VFs enabled.
func requireSRIOV(t *testing.T) (*nestedhost.Host, string) {
	t.Helper()
	h := nestedhost.RequireSRIOV(t)
	pf := h.SRIOVPF
	if n := strings.TrimSpace(nestedhost.SSH(t, h, "cat /sys/bus/pci/devices/"+pf+"/sriov_numvfs")); n != "0" {
		t.Fatalf("the nested host is not in its initial state: %s has %s VFs enabled", pf, n)
	}
	t.Cleanup(func() { sriovReset(t, h, pf) })
	return h, pf
}

// sriovReset puts the stand-in back as a failed test may leave it: every
// VF's type cleared, back from vfio-pci, VFs disabled.
func sriovReset(t *testing.T, h *nestedhost.Host, pf string) {
	nestedhost.SSH(t, h, `pf=/sys/bus/pci/devices/`+pf+`
for vf in $pf/virtfn*; do
  [ -e "$vf" ] || continue
  a=$(basename "$(readlink -f "$vf")")
  [ -e "$vf/driver" ] && [ "$(basename "$(readlink -f "$vf/driver")")" = vfio-pci ] && echo "$a" > "$vf/driver/unbind"
  echo > "$vf/driver_override" 2>/dev/null
  [ -e "$vf/nvidia/current_vgpu_type" ] && echo 0 > "$vf/nvidia/current_vgpu_type"
done
echo 0 > $pf/sriov_numvfs; true`)
}

// vfType reads a VF's current_vgpu_type in L1.
func vfType(t *testing.T, h *nestedhost.Host, vf string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(nestedhost.SSH(t, h, "cat "+sriov.CurrentPath(mustAddr(t, vf)))))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustAddr(t *testing.T, s string) vfio.Address {
	t.Helper()
	a, err := vfio.ParseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func sriovFleet(h *nestedhost.Host) string {
	return fmt.Sprintf("provider \"kohaku\" {\n  uri   = %q\n  hosts = { l1 = { uri = %q } }\n}\n", accURI(), h.SSHURI)
}

// SR-IOV vGPU on the nested host, end to end, no guest OS booted (L2 runs
// L1's kernel to prove the device reaches it):
//   - kohaku_gpu_sriov enables two VFs on the stand-in; kohaku_vgpu "a"
//     names the GPU and takes a VF with the 12Q type (written through L1's
//     sysfs, read back there), bound to vfio-pci; a VM passes it through
//     and L2's QEMU shows the VF as its PCI device.
//   - kohaku_capacity and kohaku_pci_devices show the type running, the
//     VF's user and what is left; the plan after is empty.
//   - A 24Q beside the running 12Q is refused at plan on type's line,
//     naming the VF that runs 12Q; nothing is made.
//   - kohaku_vgpu "b" asks the fleet for a 12Q and gets the other VF.
//   - Import of "a" reads the type back from the VF.
//   - Destroy clears both types, gives the VFs back and disables them.
func TestAccGPU_sriovVGPU(t *testing.T) {
	h, pf := requireSRIOV(t)
	requireNoLocalStandIn(t)
	name := "kohaku-acc-vgpu"
	removeNestedDomainAfter(t, h, name)
	sriovRes := fmt.Sprintf(`
resource "kohaku_gpu_sriov" "g" {
  host    = "l1"
  gpu     = %q
  num_vfs = 2
}
`, pf)
	vgpuA := fmt.Sprintf(`
resource "kohaku_vgpu" "a" {
  host = "l1"
  gpu  = kohaku_gpu_sriov.g.gpu
  type = %q
}
`, "L40S-12Q")
	vm := nestedVM(name, "host = \"l1\"\n  hostdevs = [kohaku_vgpu.a.address]")
	reads := `
data "kohaku_capacity" "l1" {
  hosts      = ["l1"]
  depends_on = [kohaku_vm.vm]
}
data "kohaku_pci_devices" "l1" {
  host       = "l1"
  depends_on = [kohaku_vm.vm]
}
`
	base := sriovFleet(h) + sriovRes + vgpuA + vm
	vgpuB := `
resource "kohaku_vgpu" "b" {
  hosts = ["l1"]
  type  = "NVIDIA L40S-12Q"
  depends_on = [kohaku_vgpu.a]
}
`
	conflict := `
resource "kohaku_vgpu" "c" {
  host = "l1"
  gpu  = kohaku_gpu_sriov.g.gpu
  type = "` + standInType24 + `"
}
`
	var vfA string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: resource.ComposeTestCheckFunc(nestedDomainGone(h, name), func(*terraform.State) error {
			if n := strings.TrimSpace(nestedhost.SSH(t, h, "cat /sys/bus/pci/devices/"+pf+"/sriov_numvfs")); n != "0" {
				return fmt.Errorf("%s still has %s VFs after destroy", pf, n)
			}
			if out := nestedhost.SSH(t, h, "dmesg | grep -cE 'nvidia-standin: "+vfA+" vgpu type [0-9]+ cleared' || true"); strings.TrimSpace(out) == "0" {
				return fmt.Errorf("L1's kernel log does not show %s's vGPU type cleared", vfA)
			}
			return nil
		}),
		Steps: []resource.TestStep{
			{
				Config: base + reads,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_gpu_sriov.g", tfjsonpath.New("num_vfs"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue("kohaku_gpu_sriov.g", tfjsonpath.New("virtual_functions"), knownvalue.ListSizeExact(2)),
					statecheck.ExpectKnownValue("kohaku_vgpu.a", tfjsonpath.New("host"), knownvalue.StringExact("l1")),
					statecheck.ExpectKnownValue("kohaku_vgpu.a", tfjsonpath.New("type_name"), knownvalue.StringExact(standInType12)),
				},
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["kohaku_vgpu.a"].Primary.Attributes
					vfA = a["address"]
					if id, _ := strconv.Atoi(a["type_id"]); vfType(t, h, vfA) != id || id == 0 {
						return fmt.Errorf("L1 says %s runs type %d, state says %s", vfA, vfType(t, h, vfA), a["type_id"])
					}
					if d := nestedhost.Driver(t, h, vfA); d != vfio.DriverVFIO {
						return fmt.Errorf("VF %s is on %q, want vfio-pci", vfA, d)
					}
					// L2's QEMU has the VF as its PCI device (QEMU's NVMe VF, 1b36:0010).
					seen := regexp.MustCompile(`PCI device 1b36:0010`)
					var pci string
					for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(2 * time.Second) {
						var err error
						pci, err = nestedhost.VirshErr(h, "qemu-monitor-command", "--hmp", name, "info pci")
						if err == nil && seen.MatchString(pci) {
							break
						}
						if time.Now().After(deadline) {
							return fmt.Errorf("L2 shows no 1b36:0010 device after 90 s (%v):\n%s", err, pci)
						}
					}
					caps := s.RootModule().Resources["data.kohaku_capacity.l1"].Primary.Attributes
					found := false
					for k, v := range caps {
						if strings.HasPrefix(k, "capacity.l1.sriov_gpus.0.vfs.") && strings.HasSuffix(k, ".address") && v == vfA {
							p := strings.TrimSuffix(k, "address")
							if caps[p+"vgpu_type"] != standInType12 || caps[p+"used_by"] != name || caps[p+"driver"] != vfio.DriverVFIO {
								return fmt.Errorf("capacity's VF %s: type %q, used by %q, driver %q", vfA, caps[p+"vgpu_type"], caps[p+"used_by"], caps[p+"driver"])
							}
							found = true
						}
					}
					if !found || caps["capacity.l1.sriov_gpus.0.address"] != pf || caps["capacity.l1.sriov_gpus.0.mechanism"] != sriov.MechanismVF {
						return fmt.Errorf("capacity does not show %s with VF %s: %v", pf, vfA, caps)
					}
					pci2 := s.RootModule().Resources["data.kohaku_pci_devices.l1"].Primary.Attributes
					for k, v := range pci2 {
						if strings.HasSuffix(k, ".address") && v == vfA {
							p := strings.TrimSuffix(k, "address")
							if pci2[p+"physical_function"] != pf || pci2[p+"vgpu_type"] != a["type_id"] {
								return fmt.Errorf("pci_devices' VF %s: pf %q, vgpu_type %q", vfA, pci2[p+"physical_function"], pci2[p+"vgpu_type"])
							}
							return nil
						}
					}
					return fmt.Errorf("kohaku_pci_devices does not list VF %s", vfA)
				},
			},
			{Config: base + reads, PlanOnly: true},
			{
				Config:      base + conflict,
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)No GPU can take this vGPU type.*runs NVIDIA\s+L40S-12Q.*one\s+time-sliced\s+vGPU\s+type\s+at\s+a\s+time`),
			},
			{
				Config: base + vgpuB,
				Check: func(s *terraform.State) error {
					b := s.RootModule().Resources["kohaku_vgpu.b"].Primary.Attributes
					if b["host"] != "l1" || b["gpu"] != pf || b["address"] == vfA || vfType(t, h, b["address"]) == 0 {
						return fmt.Errorf("b took %s on %s of %q (a has %s)", b["address"], b["gpu"], b["host"], vfA)
					}
					return nil
				},
			},
			{
				ResourceName:            "kohaku_vgpu.a",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateIdFunc:       func(*terraform.State) (string, error) { return "l1/" + pf + "/" + vfA, nil },
				ImportStateVerifyIgnore: []string{"type"},
			},
			{Config: base + vgpuB, PlanOnly: true},
		},
	})
}

// Two terraform apply processes with their own state, started together,
// both asking the fleet for a 48Q, of which the stand-in holds one:
// exactly one gets a VF, the other fails having made nothing. Five rounds
// in make check (ten rounds ran by hand twice, 196 s and 174 s, all
// passing; the nested lane competes with the main lane for CPU).
func TestAccGPU_sriovRaceForTheLastVGPU(t *testing.T) {
	h, pf := requireSRIOV(t)
	nestedhost.SSH(t, h, "echo 2 > /sys/bus/pci/devices/"+pf+"/sriov_numvfs")
	time.Sleep(2 * time.Second) // udev, then libvirt, list the VFs
	cfg := func(res string) string {
		return faultCLIHead + sriovFleet(h) + fmt.Sprintf(`
resource "kohaku_vgpu" %q {
  hosts = ["l1"]
  type  = %q
}
`, res, standInType48)
	}
	ws := []*acctest.Workspace{acctest.NewWorkspace(t, cfg("a")), acctest.NewWorkspace(t, cfg("b"))}
	for round := 1; round <= 5; round++ {
		won, outs := raceApply(t, round, ws)
		lost := 1 - won
		if !regexp.MustCompile(`(No VF could be given this vGPU type|No GPU can take this vGPU type)`).MatchString(outs[lost]) {
			t.Errorf("round %d: the loser does not say the type was taken:\n%s", round, tail(outs[lost], 3000))
		}
		if st := ws[lost].State(); len(st) != 0 {
			t.Errorf("round %d: the loser's state holds %d resources", round, len(st))
		}
		set := strings.Fields(nestedhost.SSH(t, h, "cat /sys/bus/pci/devices/"+pf+"/virtfn*/nvidia/current_vgpu_type"))
		busy := 0
		for _, v := range set {
			if v != "0" {
				busy++
			}
		}
		if busy != 1 {
			t.Errorf("round %d: %d VFs have a type (%v), want the winner's one", round, busy, set)
		}
		ws[won].Must("destroy", "-auto-approve", "-input=false")
		if out := strings.Fields(nestedhost.SSH(t, h, "cat /sys/bus/pci/devices/"+pf+"/virtfn*/nvidia/current_vgpu_type")); strings.Join(out, "") != "00" {
			t.Fatalf("round %d: after the winner's destroy the VFs' types are %v", round, out)
		}
		if t.Failed() {
			return
		}
	}
}
