package provider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// The configuration `terraform query -generate-config-out` writes for a
// domain plans as one import and nothing else, with no edits, whatever
// made the domain: a kohaku_vm (an overlay and a data disk), virsh define
// with a volume, a file outside every pool, a qcow2 overlay volume, no
// disk (kernel boot), several disks, and the domains virt-install and
// dmacvicar's provider leave (internal/domain/testdata/merge).
func TestAccVMList_generatedConfigPlans(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_vm list resource (terraform query)")
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "gen")
	header := "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" + providerBlock(env.URI)
	files := t.TempDir()
	// Volumes and files the hand-made domains boot from (contents do not
	// matter: nothing boots).
	vol := func(name string, extra ...string) {
		t.Helper()
		args := append([]string{"vol-create-as", env.Pool, prefix + name, "64M", "--format", "qcow2"}, extra...)
		if out, err := acctest.Virsh(env.URI, args...); err != nil {
			t.Fatalf("virsh %v: %v\n%s", args, err, out)
		}
	}
	file := func(name string) string {
		t.Helper()
		p := filepath.Join(files, prefix+name)
		if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "64M").CombinedOutput(); err != nil {
			t.Fatalf("qemu-img create %s: %v\n%s", p, err, out)
		}
		return p
	}
	define := func(xml string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "dom.xml")
		if err := os.WriteFile(f, []byte(xml), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := acctest.Virsh(env.URI, "define", f); err != nil {
			t.Fatalf("virsh define: %v\n%s\n%s", err, out, xml)
		}
	}
	disk := func(dev, source string) string {
		if strings.HasPrefix(source, "/") {
			return fmt.Sprintf("<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='%s'/><target dev='%s' bus='virtio'/></disk>", source, dev)
		}
		return fmt.Sprintf("<disk type='volume' device='disk'><driver name='qemu' type='qcow2'/><source pool='%s' volume='%s'/><target dev='%s' bus='virtio'/></disk>", env.Pool, source, dev)
	}
	byHand := func(name, devices string) {
		t.Helper()
		define(fmt.Sprintf(`<domain type='qemu'><name>%s%s</name><memory unit='MiB'>96</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>%s</devices></domain>`, prefix, name, devices))
	}

	// made by Kohaku: an overlay on the test's base volume and a data disk.
	made := acctest.NewWorkspace(t, header+fmt.Sprintf(`
resource "kohaku_vm" "made" {
  name       = "%[1]smade"
  type       = "qemu"
  memory_mib = 96
  running    = false
  disk = {
    base_pool   = %[2]q
    base_volume = %[3]q
    pool        = %[4]q
  }
  data_disks = [{ name = "scratch", size_gib = 1, pool = %[4]q }]
}
`, prefix, env.ImagePool, env.Base, env.Pool))
	made.Must("apply", "-auto-approve", "-input=false")

	vol("vol.qcow2")
	byHand("volume", disk("vda", prefix+"vol.qcow2"))
	byHand("file", disk("vda", file("outside.qcow2")))
	basePath, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.ImagePool, env.Base)
	if err != nil {
		t.Fatalf("the base volume's path: %v\n%s", err, basePath)
	}
	vol("overlay.qcow2", "--backing-vol", strings.TrimSpace(basePath), "--backing-vol-format", "qcow2")
	byHand("overlay", disk("vda", prefix+"overlay.qcow2"))
	define(fmt.Sprintf(`<domain type='qemu'><name>%snodisk</name><memory unit='MiB'>96</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='q35'>hvm</type><kernel>%s</kernel><initrd>%s</initrd></os></domain>`, prefix, env.Kernel, env.Initrd))
	vol("two-a.qcow2")
	vol("two-b.qcow2")
	byHand("several", disk("vda", prefix+"two-a.qcow2")+disk("vdb", prefix+"two-b.qcow2")+disk("vdc", file("three.qcow2")))

	// Other tools' domains, as they left them: names, UUIDs and disk
	// sources rewritten to this test's, KVM to TCG.
	others := map[string]string{
		"virtinstall-bios": "virt-install-bios-vnc.defined.xml",
		"virtinstall-uefi": "virt-install-uefi-spice.defined.xml",
		"peer":             "peer-dmacvicar-v0.9.7.xml",
	}
	n := 0
	for name, f := range others {
		b, err := os.ReadFile(filepath.Join("..", "domain", "testdata", "merge", f))
		if err != nil {
			t.Fatal(err)
		}
		x := string(b)
		x = regexp.MustCompile(`<name>[^<]*</name>`).ReplaceAllString(x, "<name>"+prefix+name+"</name>")
		x = regexp.MustCompile(`<uuid>[^<]*</uuid>\s*`).ReplaceAllString(x, "")
		x = strings.Replace(x, "type='kvm'", "type='qemu'", 1)
		x = regexp.MustCompile(`<source file='[^']*'`).ReplaceAllStringFunc(x, func(string) string {
			n++
			return "<source file='" + file(fmt.Sprintf("%s-%d.qcow2", name, n)) + "'"
		})
		x = regexp.MustCompile(`<source pool='[^']*' volume='[^']*'`).ReplaceAllStringFunc(x, func(string) string {
			v := fmt.Sprintf("%s-vol.iso", name)
			vol(v)
			return fmt.Sprintf("<source pool='%s' volume='%s%s'", env.Pool, prefix, v)
		})
		define(x)
	}

	shapes := []string{"made", "volume", "file", "overlay", "nodisk", "several", "virtinstall-bios", "virtinstall-uefi", "peer"}
	for _, shape := range shapes {
		t.Run(shape, func(t *testing.T) {
			w := acctest.NewWorkspace(t, header)
			q := fmt.Sprintf("list \"kohaku_vm\" \"found\" {\n  provider = kohaku\n  include_resource = true\n  config {\n    name_prefix = %q\n  }\n}\n", prefix+shape)
			if err := os.WriteFile(filepath.Join(w.Dir(), "main.tfquery.hcl"), []byte(q), 0o644); err != nil {
				t.Fatal(err)
			}
			w.Must("query", "-generate-config-out=generated.tf")
			gen, err := os.ReadFile(filepath.Join(w.Dir(), "generated.tf"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(gen), `resource "kohaku_vm"`); n != 1 {
				t.Fatalf("the generated configuration has %d kohaku_vm blocks, want 1:\n%s", n, gen)
			}
			out, err := w.Run("plan", "-input=false", "-no-color")
			if err != nil || !strings.Contains(out, "Plan: 1 to import, 0 to add, 0 to change, 0 to destroy.") {
				t.Errorf("the generated configuration does not plan as one import and nothing else (%v):\n%s\ngenerated:\n%s", err, out, gen)
			}
		})
	}
}
