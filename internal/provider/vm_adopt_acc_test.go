package provider

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// TestAccVM_adopt imports a domain defined by hand (virsh define, a boot
// disk by file path, a second disk, a VNC display, a tablet, a description
// and another tool's metadata, marked to autostart) with an import block:
// the first plan replaces nothing and changes nothing, autostart included
// though the configuration leaves it unset. Then memory and vCPUs change in
// place, and the definition before and after differs only in what Kohaku
// owns. The domain is never started.
func TestAccVM_adopt(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "adopt")
	name := prefix + "vm"
	root, data := prefix+"root.qcow2", prefix+"data.qcow2"
	addr := "kohaku_vm.adopted"
	for _, v := range []string{root, data} {
		if out, err := acctest.Virsh(env.URI, "vol-create-as", "--pool", env.Pool, v, "64M", "--format", "qcow2"); err != nil {
			t.Fatalf("creating volume %s: %v\n%s", v, err, out)
		}
	}
	rootPath, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, root)
	if err != nil {
		t.Fatal(err)
	}
	dataPath, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, data)
	if err != nil {
		t.Fatal(err)
	}
	defineXML := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <description>Made by hand, adopted by Terraform.</description>
  <metadata><ops:owner xmlns:ops='https://example.com/ops/1'>web-team</ops:owner></metadata>
  <memory unit='MiB'>128</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <on_crash>restart</on_crash>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='%s'/><target dev='vda' bus='virtio'/></disk>
    <disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='%s'/><target dev='vdb' bus='virtio'/></disk>
    <interface type='user'><mac address='52:54:00:ad:00:01'/><model type='virtio'/></interface>
    <serial type='pty'/>
    <graphics type='vnc' listen='127.0.0.1' autoport='yes'/>
    <input type='tablet' bus='usb'/>
    <video><model type='vga'/></video>
  </devices>
</domain>`, name, rootPath, dataPath)
	f := filepath.Join(t.TempDir(), "dom.xml")
	if err := os.WriteFile(f, []byte(defineXML), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := acctest.Virsh(env.URI, "define", f); err != nil {
		t.Fatalf("defining %s by hand: %v\n%s", name, err, out)
	}
	if out, err := acctest.Virsh(env.URI, "autostart", name); err != nil {
		t.Fatalf("marking %s to autostart: %v\n%s", name, err, out)
	}

	config := func(memory, vcpu int, extra ...string) string {
		return providerBlock(env.URI) + fmt.Sprintf(`
import {
  to = kohaku_vm.adopted
  id = %q
}

resource "kohaku_vm" "adopted" {
  name       = %q
  vcpu       = %d
  memory_mib = %d
  running    = false

  disk = {
    pool   = %q
    volume = %q
  }

  network_interface = [{ type = "user", mac = "52:54:00:ad:00:01" }]
  %s
}
`, name, name, vcpu, memory, env.Pool, root, strings.Join(extra, "\n  "))
	}
	var before string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: func(s *terraform.State) error {
			if out, err := acctest.Virsh(env.URI, "dominfo", name); err == nil {
				return fmt.Errorf("domain %s is still defined after destroy:\n%s", name, out)
			}
			// The volumes were the user's: destroy leaves them, the test removes them.
			for _, v := range []string{root, data} {
				if out, err := acctest.Virsh(env.URI, "vol-delete", "--pool", env.Pool, v); err != nil {
					return fmt.Errorf("destroy removed the user's volume %s, or it cannot be removed: %v\n%s", v, err, out)
				}
			}
			return acctest.CheckNothingLeft(env, prefix)(s)
		},
		Steps: []resource.TestStep{
			{
				// The import plans no replacement and no change.
				Config: config(128, 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					expectNoReplacement(addr),
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("disk").AtMapKey("pool"), knownvalue.StringExact(env.Pool)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("disk").AtMapKey("volume"), knownvalue.StringExact(root)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("type"), knownvalue.StringExact("qemu")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest_agent"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("serial_log_path"), knownvalue.StringExact("")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("autostart"), knownvalue.Bool(true)),
				},
				Check: func(*terraform.State) error {
					before, err = acctest.Virsh(env.URI, "dumpxml", "--inactive", name)
					return err
				},
			},
			{
				// Memory and vCPUs change in place, and autostart = false
				// turns autostart off; the rest of the definition is left
				// as it was.
				Config: config(256, 2, `autostart = false`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					expectNoReplacement(addr),
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("autostart"), knownvalue.Bool(false)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					acctest.CheckDomState(env, name, "shut off"),
					func(*terraform.State) error {
						out, err := acctest.Virsh(env.URI, "dominfo", name)
						if err != nil {
							return err
						}
						if !regexp.MustCompile(`(?m)^Autostart:\s+disable`).MatchString(out) {
							return fmt.Errorf("autostart = false left %s marked to autostart:\n%s", name, out)
						}
						return nil
					},
					func(*terraform.State) error {
						after, err := acctest.Virsh(env.URI, "dumpxml", "--inactive", name)
						if err != nil {
							return err
						}
						return adoptDiff(before, after)
					},
				),
			},
			{
				// Written out as generated configuration writes it, the
				// CPU libvirt gave a domain made without <cpu> reads
				// "custom": accepted, and it plans nothing.
				Config: config(256, 2, `cpu_mode = "custom"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cpu_mode"), knownvalue.StringExact("custom")),
				},
			},
		},
	})
}

// expectNoReplacement fails a plan that would destroy the resource.
func expectNoReplacement(addr string) plancheck.PlanCheck { return noReplacement(addr) }

type noReplacement string

func (n noReplacement) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address == string(n) && (rc.Change.Actions.Replace() || rc.Change.Actions.Delete()) {
			resp.Error = fmt.Errorf("%s: planned %v, want no replacement", n, rc.Change.Actions)
		}
	}
}

// adoptDiff compares two definitions of the adopted domain element by
// element: memory, currentMemory and the vCPU count change; Kohaku's
// metadata element, its report channel (with the virtio-serial controller
// libvirt adds for it) and empty pcie-root-ports may be added; everything
// else is there before and after, the same.
func adoptDiff(before, after string) error {
	b, err := parseXMLNode(before)
	if err != nil {
		return err
	}
	a, err := parseXMLNode(after)
	if err != nil {
		return err
	}
	var problems []string
	owned := []string{"memory", "currentMemory", "vcpu", "metadata", "devices"}
	for _, pair := range [][2]*xmlNode{{&b, &a}, {&a, &b}} {
		for _, c := range pair[0].Children {
			if !slices.Contains(owned, c.XMLName.Local) && !pair[1].has(c) {
				problems = append(problems, "top-level element differs: "+c.canon())
			}
		}
	}
	if got := a.child("memory"); got == nil || got.canon() != "<memory unit=KiB>262144</memory>" {
		problems = append(problems, "memory is not 256 MiB")
	}
	if got := a.child("vcpu"); got == nil || strings.TrimSpace(got.Text) != "2" {
		problems = append(problems, "vcpu is not 2")
	}
	bm, am := b.child("metadata"), a.child("metadata")
	for _, c := range bm.Children {
		if am == nil || !am.has(c) {
			problems = append(problems, "metadata lost: "+c.canon())
		}
	}
	bd, ad := b.child("devices"), a.child("devices")
	for _, c := range bd.Children {
		if !ad.has(c) {
			problems = append(problems, "device lost or changed: "+c.canon())
		}
	}
	for _, c := range ad.Children {
		if bd.has(c) {
			continue
		}
		canon := c.canon()
		switch {
		case strings.HasPrefix(canon, "<controller") && (strings.Contains(canon, "model=pcie-root-port") || strings.Contains(canon, "type=virtio-serial")):
		case strings.HasPrefix(canon, "<channel") && strings.Contains(canon, "org.kohaku.report.0"):
		default:
			problems = append(problems, "device added that Kohaku does not own: "+canon)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the update changed more than Kohaku owns:\n  %s\n\nbefore:\n%s\n\nafter:\n%s", strings.Join(problems, "\n  "), before, after)
	}
	return nil
}

// xmlNode is an XML element in generic form.
type xmlNode struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []xmlNode  `xml:",any"`
}

func parseXMLNode(doc string) (xmlNode, error) {
	var n xmlNode
	err := xml.Unmarshal([]byte(doc), &n)
	return n, err
}

func (n *xmlNode) child(name string) *xmlNode {
	for i := range n.Children {
		if n.Children[i].XMLName.Local == name {
			return &n.Children[i]
		}
	}
	return nil
}

func (n *xmlNode) has(c xmlNode) bool {
	want := c.canon()
	return slices.ContainsFunc(n.Children, func(x xmlNode) bool { return x.canon() == want })
}

// canon is the element with sorted attributes and children, numbers in
// decimal and namespace declarations left out.
func (n xmlNode) canon() string {
	var attrs []string
	for _, a := range n.Attrs {
		if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
			continue
		}
		v := a.Value
		if u, err := strconv.ParseUint(v, 0, 64); err == nil && strings.HasPrefix(v, "0x") {
			v = strconv.FormatUint(u, 10)
		}
		attrs = append(attrs, a.Name.Local+"="+v)
	}
	sort.Strings(attrs)
	var children []string
	for _, c := range n.Children {
		children = append(children, c.canon())
	}
	sort.Strings(children)
	s := "<" + n.XMLName.Local
	for _, a := range attrs {
		s += " " + a
	}
	return s + ">" + strings.TrimSpace(n.Text) + strings.Join(children, "") + "</" + n.XMLName.Local + ">"
}
