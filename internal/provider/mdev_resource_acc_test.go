package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
)

// mttyAvailable reads, with virsh, how many more instances of an mtty type
// the nested host's mtty parent can create.
func mttyAvailable(h *nestedhost.Host, typ string) (int, error) {
	doc, err := nestedhost.VirshErr(h, "nodedev-dumpxml", h.MdevParent)
	if err != nil {
		return 0, fmt.Errorf("virsh nodedev-dumpxml %s: %v: %s", h.MdevParent, err, doc)
	}
	m := regexp.MustCompile(`(?s)<type id='` + regexp.QuoteMeta(typ) + `'>.*?<availableInstances>(\d+)</availableInstances>`).FindStringSubmatch(doc)
	if m == nil {
		return 0, fmt.Errorf("%s offers no %s:\n%s", h.MdevParent, typ, doc)
	}
	return strconv.Atoi(m[1])
}

// An mdev of the nested host's mtty made through kohaku_mdev: libvirt has it
// active, persistent and autostarted, the parent has one instance fewer
// (virsh, and kohaku_pci_devices), and a VM in L2 that names it in mdevs
// runs with it: L2's QEMU shows mtty's PCI device (4348:3253) among its
// devices. The plan refuses a type mtty does not offer, a parent L1 does not
// have and a UUID that is taken, each naming what the parent offers or who
// has it; with every instance left taken by transient devices made with
// virsh, a new one is refused for having none left. Import reads the device
// back, and the VM with it in mdevs. With
// the VM gone, the device stays; stopped and no longer autostarted with
// virsh, it shows as an in-place change of active and autostart, and apply
// starts and marks it again. Destroy removes the device's definition, and
// the parent has its instances back.
func TestAccMdev_nested(t *testing.T) {
	h := nestedhost.RequireMdev(t)
	const uuid = "6b6f6861-6b75-4d64-8000-00000000ac01"
	name := "kohaku-acc-mdev-vm"
	nodeName := "mdev_" + strings.ReplaceAll(uuid, "-", "_") + "_mtty"
	removeNestedDomainAfter(t, h, name)
	t.Cleanup(func() { // only after a failure: destroy removes it
		_, _ = nestedhost.VirshErr(h, "nodedev-destroy", nodeName)
		_, _ = nestedhost.VirshErr(h, "nodedev-undefine", nodeName)
	})
	before, err := mttyAvailable(h, "mtty-2")
	if err != nil {
		t.Fatal(err)
	}
	mdevRes := func(res, u string) string {
		return fmt.Sprintf(`
resource "kohaku_mdev" %q {
  parent = %q
  type   = "mtty-2"
  uuid   = %q
}
`, res, h.MdevParent, u)
	}
	cfg := providerBlock(h.URI) + mdevRes("m", uuid) + nestedVM(name, "mdevs = [kohaku_mdev.m.uuid]") + `
data "kohaku_pci_devices" "after" {
  vendor_id  = "1234"
  depends_on = [kohaku_mdev.m]
}
`
	// fill takes n more mtty-2 instances with transient mdevs made through
	// libvirt; unfill removes them (also at the end, after a failure).
	var filled []string
	unfill := func(t *testing.T) {
		for _, n := range filled {
			if out, err := nestedhost.VirshErr(h, "nodedev-destroy", n); err != nil {
				t.Errorf("virsh nodedev-destroy %s: %v: %s", n, err, out)
			}
		}
		filled = nil
	}
	t.Cleanup(func() { unfill(t) })
	fill := func(t *testing.T, n int) {
		for i := range n {
			file := filepath.Join(t.TempDir(), "fill.xml")
			u := fmt.Sprintf("6b6f6861-6b75-4d64-8000-0000000f%04x", i)
			doc := fmt.Sprintf(`<device><parent>%s</parent><capability type='mdev'><type id='mtty-2'/><uuid>%s</uuid></capability></device>`, h.MdevParent, u)
			if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := nestedhost.VirshErr(h, "nodedev-create", file); err != nil {
				t.Fatalf("virsh nodedev-create (%d of %d): %v: %s", i+1, n, err, out)
			}
			filled = append(filled, "mdev_"+strings.ReplaceAll(u, "-", "_")+"_mtty")
		}
	}
	// mdevSays checks virsh nodedev-info's lines about the device.
	mdevSays := func(want ...string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			info, err := nestedhost.VirshErr(h, "nodedev-info", nodeName)
			if err != nil {
				return fmt.Errorf("virsh nodedev-info %s: %v: %s", nodeName, err, info)
			}
			for _, w := range want {
				if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(info) {
					return fmt.Errorf("nodedev-info %s lacks %q:\n%s", nodeName, w, info)
				}
			}
			return nil
		}
	}
	hostSays := func(*terraform.State) error {
		info, err := nestedhost.VirshErr(h, "nodedev-info", nodeName)
		if err != nil {
			return fmt.Errorf("virsh nodedev-info %s: %v: %s", nodeName, err, info)
		}
		for _, want := range []string{"Parent: +" + h.MdevParent, "Active: +yes", "Persistent: +yes", "Autostart: +yes"} {
			if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(info) {
				return fmt.Errorf("nodedev-info %s lacks %q:\n%s", nodeName, want, info)
			}
		}
		if n, err := mttyAvailable(h, "mtty-2"); err != nil || n != before-1 {
			return fmt.Errorf("mtty-2 available: %d (%v), want %d", n, err, before-1)
		}
		doc, err := nestedhost.VirshErr(h, "dumpxml", name)
		if err != nil {
			return fmt.Errorf("virsh dumpxml %s: %v: %s", name, err, doc)
		}
		if !regexp.MustCompile(`(?s)<hostdev mode='subsystem' type='mdev'[^>]* model='vfio-pci'[^>]*>\s*<source>\s*<address uuid='` + uuid + `'/>`).MatchString(doc) {
			return fmt.Errorf("domain %s has no mdev hostdev for %s:\n%s", name, uuid, doc)
		}
		// L2's QEMU, asked through L1's libvirt, has the device on the
		// hostdev's id, backed by the mdev's sysfs node ...
		qtree, err := nestedhost.VirshErr(h, "qemu-monitor-command", "--hmp", name, "info qtree")
		if err != nil {
			return fmt.Errorf("info qtree of %s: %v: %s", name, err, qtree)
		}
		if !regexp.MustCompile(`dev: vfio-pci, id "hostdev0"\s+host = "[^"]*"\s+sysfsdev = "/sys/bus/mdev/devices/` + uuid + `"`).MatchString(qtree) {
			return fmt.Errorf("L2's QEMU has no vfio-pci hostdev0 on mdev %s:\n%s", uuid, qtree)
		}
		// ... and once L2's firmware has enumerated the bus, the guest sees
		// mtty's dual-port serial card (4348:3253, as the mdev's config space
		// says through VFIO) with the I/O BAR the firmware gave it
		seen := regexp.MustCompile(`PCI device 4348:3253\s+PCI subsystem 4348:3253\s+IRQ \d+, pin A\s+BAR0: I/O at 0x[0-9a-e][0-9a-f]{0,3} `)
		var pci string
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(2 * time.Second) {
			pci, err = nestedhost.VirshErr(h, "qemu-monitor-command", "--hmp", name, "info pci")
			if err == nil && seen.MatchString(pci) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("L2's guest shows no 4348:3253 device with an I/O BAR after 90 s (%v):\n%s", err, pci)
			}
		}
		return nil
	}
	var start time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(nestedDomainGone(h, name), func(*terraform.State) error {
			// libvirt lists an undefined mdev for a moment after
			var list string
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Second) {
				list, err = nestedhost.VirshErr(h, "nodedev-list", "--cap", "mdev", "--all")
				if err == nil && !strings.Contains(list, nodeName) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil || strings.Contains(list, nodeName) {
				return fmt.Errorf("after destroy, the mdevs of L1 are %q (%v), want no %s", list, err, nodeName)
			}
			if n, err := mttyAvailable(h, "mtty-2"); err != nil || n != before {
				return fmt.Errorf("after destroy, mtty-2 available: %d (%v), want %d as before", n, err, before)
			}
			t.Logf("create, checks, import, refusals and destroy took %s", time.Since(start).Round(time.Second))
			return nil
		}),
		Steps: []resource.TestStep{
			{
				PreConfig: func() { start = time.Now() },
				Config:    cfg,
				Check:     hostSays,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_mdev.m", tfjsonpath.New("id"), knownvalue.StringExact(uuid)),
					statecheck.ExpectKnownValue("kohaku_mdev.m", tfjsonpath.New("node_device"), knownvalue.StringExact(nodeName)),
					statecheck.ExpectKnownValue("kohaku_mdev.m", tfjsonpath.New("active"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("kohaku_mdev.m", tfjsonpath.New("autostart"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("kohaku_vm.vm", tfjsonpath.New("mdevs"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact(uuid)})),
					statecheck.ExpectKnownValue("data.kohaku_pci_devices.after", tfjsonpath.New("mdev_parents"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectExact(map[string]knownvalue.Check{
							"node_device": knownvalue.StringExact(h.MdevParent),
							"address":     knownvalue.StringExact(""),
							"mdev_types": knownvalue.ListExact([]knownvalue.Check{
								knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact("mtty-1"), "name": knownvalue.StringExact("Single port serial")}),
								knownvalue.ObjectExact(map[string]knownvalue.Check{
									"id": knownvalue.StringExact("mtty-2"), "name": knownvalue.StringExact("Dual port serial"),
									"device_api": knownvalue.StringExact("vfio-pci"), "available_instances": knownvalue.Int64Exact(int64(before - 1)),
								}),
							}),
						}),
					})),
				},
			},
			{Config: cfg, PlanOnly: true},
			{
				// an import of the VM reads the mdev back into mdevs
				Config:        cfg,
				ResourceName:  "kohaku_vm.vm",
				ImportState:   true,
				ImportStateId: name,
				ImportStateCheck: func(is []*terraform.InstanceState) error {
					for _, st := range is {
						if a := st.Attributes; a["name"] == name {
							if a["mdevs.#"] != "1" || a["mdevs.0"] != uuid {
								return fmt.Errorf("imported mdevs.# = %q, mdevs.0 = %q; want [%s]", a["mdevs.#"], a["mdevs.0"], uuid)
							}
							return nil
						}
					}
					return fmt.Errorf("no imported VM %s among %d resources", name, len(is))
				},
			},
			{
				Config:            cfg,
				ResourceName:      "kohaku_mdev.m",
				ImportState:       true,
				ImportStateId:     strings.ToUpper(uuid),
				ImportStateVerify: true,
			},
			{
				Config:      cfg + strings.Replace(mdevRes("bad", "6b6f6861-6b75-4d64-8000-00000000ac02"), `"mtty-2"`, `"mtty-9"`, 1),
				PlanOnly:    true,
				ExpectError: messageRE(`Parent mtty_mtty offers no mediated device type "mtty-9"; it offers mtty-1 (`, `available), mtty-2 (`+strconv.Itoa(before-1)+` available)`),
			},
			{
				Config:      cfg + strings.Replace(mdevRes("bad", "6b6f6861-6b75-4d64-8000-00000000ac02"), h.MdevParent, "0000:7f:00.0", 1),
				PlanOnly:    true,
				ExpectError: messageRE("The host has no node device pci_0000_7f_00_0", "Parents that offer mediated devices: mtty_mtty (mtty-1 ("),
			},
			{
				Config:      cfg + mdevRes("again", uuid),
				PlanOnly:    true,
				ExpectError: messageRE("A mediated device with uuid " + uuid + " exists already (node device " + nodeName),
			},
			{
				// the parent full: every mtty-2 instance left taken by
				// transient devices made with virsh, a new one is refused
				PreConfig: func() {
					fill(t, before-1)
					if n, err := mttyAvailable(h, "mtty-2"); err != nil || n != 0 {
						t.Fatalf("after filling the parent, mtty-2 available: %d (%v), want 0", n, err)
					}
				},
				Config:      cfg + mdevRes("full", "6b6f6861-6b75-4d64-8000-00000000ac02"),
				PlanOnly:    true,
				ExpectError: messageRE("Parent mtty_mtty has no instances of mtty-2 left (0 available)", "Remove a mediated device of this type, or choose another type."),
			},
			{
				// the VM gone, the device stays
				PreConfig: func() { unfill(t) },
				Config:    providerBlock(h.URI) + mdevRes("m", uuid),
				Check:     resource.ComposeAggregateTestCheckFunc(nestedDomainGone(h, name), mdevSays("Active: +yes", "Autostart: +yes")),
			},
			{
				// stopped and no longer autostarted behind Terraform's back:
				// the plan shows it, apply restores it in place
				PreConfig: func() {
					for _, args := range [][]string{{"nodedev-destroy", nodeName}, {"nodedev-autostart", "--disable", nodeName}} {
						if out, err := nestedhost.VirshErr(h, args...); err != nil {
							t.Fatalf("virsh %v: %v: %s", args, err, out)
						}
					}
					// libvirt hears of the stop from udev, a moment later
					for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Second) {
						err := mdevSays("Active: +no", "Persistent: +yes", "Autostart: +no")(nil)
						if err == nil {
							break
						}
						if time.Now().After(deadline) {
							t.Fatal(err)
						}
					}
				},
				Config: providerBlock(h.URI) + mdevRes("m", uuid),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_mdev.m", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("kohaku_mdev.m", tfjsonpath.New("active"), knownvalue.Bool(true)),
					plancheck.ExpectKnownValue("kohaku_mdev.m", tfjsonpath.New("autostart"), knownvalue.Bool(true)),
				}},
				Check: mdevSays("Active: +yes", "Persistent: +yes", "Autostart: +yes"),
			},
		},
	})
}

// A mediated device's identity is its UUID (host null for the default
// host), and an import block that gives only the identity imports it with a
// plan that changes nothing. Resource identity came with Terraform 1.12;
// make testacc-tf114 runs this under a newer one.
func TestAccMdev_importByIdentity(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 12, "Import by resource identity")
	h := nestedhost.RequireMdev(t)
	const uuid = "6b6f6861-6b75-4d64-8000-00000000ac03"
	nodeName := "mdev_" + strings.ReplaceAll(uuid, "-", "_") + "_mtty"
	t.Cleanup(func() { // only after a failure: destroy removes it
		_, _ = nestedhost.VirshErr(h, "nodedev-destroy", nodeName)
		_, _ = nestedhost.VirshErr(h, "nodedev-undefine", nodeName)
	})
	config := providerBlock(h.URI) + fmt.Sprintf(`
resource "kohaku_mdev" "m" {
  parent = %q
  type   = "mtty-1"
  uuid   = %q
}
`, h.MdevParent, uuid)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: func(*terraform.State) error {
			// libvirt lists an undefined mdev for a moment after
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Second) {
				out, err := nestedhost.VirshErr(h, "nodedev-info", nodeName)
				switch {
				case strings.Contains(out, "Node device not found"):
					return nil
				case err != nil:
					return fmt.Errorf("virsh nodedev-info %s: %v: %s", nodeName, err, out)
				case time.Now().After(deadline):
					return fmt.Errorf("20 s after destroy L1 still has %s:\n%s", nodeName, out)
				}
			}
		},
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity("kohaku_mdev.m", map[string]knownvalue.Check{
						"host": knownvalue.Null(),
						"uuid": knownvalue.StringExact(uuid),
					}),
					statecheck.ExpectIdentityValueMatchesState("kohaku_mdev.m", tfjsonpath.New("uuid")),
				},
			},
			{
				Config:          config,
				ResourceName:    "kohaku_mdev.m",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
			},
		},
	})
}
