package provider

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// queryFound runs terraform query with the given .tfquery.hcl content and
// returns, by list block address, the display names it found, each checked
// to carry the identity attributes named.
func queryFound(t *testing.T, w *acctest.Workspace, tfquery string, identity []string, extra ...string) map[string][]string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(w.Dir(), "main.tfquery.hcl"), []byte(tfquery), 0o644); err != nil {
		t.Fatal(err)
	}
	out := w.Must(append([]string{"query", "-json"}, extra...)...)
	found := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		var msg struct {
			Type  string `json:"type"`
			Found struct {
				Address     string         `json:"address"`
				DisplayName string         `json:"display_name"`
				Identity    map[string]any `json:"identity"`
			} `json:"list_resource_found"`
		}
		if json.Unmarshal([]byte(line), &msg) != nil || msg.Type != "list_resource_found" {
			continue
		}
		for _, id := range identity {
			if v, _ := msg.Found.Identity[id].(string); v == "" {
				t.Errorf("result %s has no %s in its identity: %s", msg.Found.DisplayName, id, line)
			}
		}
		found[msg.Found.Address] = append(found[msg.Found.Address], msg.Found.DisplayName)
	}
	for _, names := range found {
		sort.Strings(names)
	}
	return found
}

// uploadByHand makes a raw volume holding data with virsh, as someone
// without Kohaku would.
func uploadByHand(t *testing.T, env acctest.VMEnv, name string, data []byte) {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := acctest.Virsh(env.URI, "vol-create-as", env.Pool, name, fmt.Sprint(len(data)), "--format", "raw"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := acctest.Virsh(env.URI, "vol-upload", "--pool", env.Pool, name, file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// The kohaku_image and kohaku_seed list resources under Terraform 1.14:
// among volumes Kohaku made and volumes made by hand (virsh), terraform
// query finds the images and the seeds by content whatever their names,
// leaving out an overlay, a VM's disk, a blank disk and an ISO that is not
// a seed; in a fresh working directory the configuration
// -generate-config-out writes adopts all four with no upload and no
// replacement, and the plan afterwards is empty.
func TestAccVolumeList_queryAndAdopt(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_image and kohaku_seed list resources (terraform query)")
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "volq")
	mbr := make([]byte, 1<<20)
	mbr[510], mbr[511] = 0x55, 0xAA
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := os.WriteFile(disk, mbr, 0o644); err != nil {
		t.Fatal(err)
	}
	header := "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" + providerBlock(env.URI)
	w := acctest.NewWorkspace(t, header+fmt.Sprintf(`
resource "kohaku_image" "made" {
  pool   = %[1]q
  name   = "%[2]smade.img"
  source = %[3]q
}

resource "kohaku_seed" "made" {
  pool     = %[1]q
  name     = "%[2]smade.iso"
  hostname = "made"
}
`, env.Pool, prefix, disk))
	w.Must("apply", "-auto-approve", "-input=false")

	// By hand: a seed written by another tool's rules (NoCloud, label
	// cidata), a blank qcow2 disk (an image kohaku_image could hold), the
	// same as a domain's disk, an overlay on the made image, a blank raw
	// disk and an ISO that is not a seed: only the first two are found.
	byHandSeed, err := seed.BuildISO("cidata", map[string][]byte{
		"meta-data": []byte("instance-id: byhand-1\nlocal-hostname: byhand\n"),
		"user-data": []byte("#cloud-config\npackages: [htop]\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	uploadByHand(t, env, prefix+"byhand-cfg", byHandSeed)
	installer, err := seed.BuildISO("debian-12", map[string][]byte{"readme.txt": []byte("not a seed\n")})
	if err != nil {
		t.Fatal(err)
	}
	uploadByHand(t, env, prefix+"installer", installer)
	uploadByHand(t, env, prefix+"blank", make([]byte, 1<<20))
	base, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, prefix+"made.img")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"vol-create-as", env.Pool, prefix + "data", "16M", "--format", "qcow2"},
		{"vol-create-as", env.Pool, prefix + "vmdisk", "16M", "--format", "qcow2"},
		{"vol-create-as", env.Pool, prefix + "overlay", "16M", "--format", "qcow2", "--backing-vol", base, "--backing-vol-format", "raw"},
	} {
		if out, err := acctest.Virsh(env.URI, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// A blank qcow2 a domain has as its disk is that VM's, not an image.
	vmdisk, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, prefix+"vmdisk")
	if err != nil {
		t.Fatal(err)
	}
	holderXML := filepath.Join(t.TempDir(), "holder.xml")
	if err := os.WriteFile(holderXML, []byte(fmt.Sprintf(`<domain type='qemu'><name>%sholder</name>
<memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os><devices>
<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='%s'/><target dev='vda' bus='virtio'/></disk>
</devices></domain>`, prefix, vmdisk)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := acctest.Virsh(env.URI, "define", holderXML); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	lists := fmt.Sprintf(`
list "kohaku_image" "images" {
  provider = kohaku
  config {
    pool        = %[1]q
    name_prefix = %[2]q
  }
}

list "kohaku_seed" "seeds" {
  provider = kohaku
  config {
    name_prefix = %[2]q
  }
}
`, env.Pool, prefix)
	found := queryFound(t, w, lists, []string{"pool", "name"})
	want := map[string]string{
		"list.kohaku_image.images": env.Pool + "/" + prefix + "data," + env.Pool + "/" + prefix + "made.img",
		"list.kohaku_seed.seeds":   env.Pool + "/" + prefix + "byhand-cfg," + env.Pool + "/" + prefix + "made.iso",
	}
	for addr, names := range want {
		if got := strings.Join(found[addr], ","); got != names {
			t.Errorf("%s found %s, want %s", addr, got, names)
		}
	}

	// Adopt the four from a fresh working directory through the generated
	// configuration: imports, nothing added, changed or destroyed, then an
	// empty plan.
	adopt := acctest.NewWorkspace(t, header)
	queryFound(t, adopt, lists, nil, "-generate-config-out=generated.tf")
	gen, err := os.ReadFile(filepath.Join(adopt.Dir(), "generated.tf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generated configuration:\n%s", gen)
	out := adopt.Must("plan", "-input=false", "-out=adopt.plan")
	if !strings.Contains(out, "4 to import, 0 to add, 0 to change, 0 to destroy") {
		t.Errorf("the plan of the generated configuration is not four imports and nothing else:\n%s", out)
	}
	adopt.Must("apply", "-input=false", "adopt.plan")
	if out, err := adopt.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after adopting is not empty (%v):\n%s", err, out)
	}
	// The volumes Kohaku made are adopted as they were, not uploaded again.
	paths := map[string]any{}
	for _, r := range adopt.State() {
		paths[fmt.Sprint(r.Values["name"])] = r.Values["volume_path"]
	}
	for _, r := range w.State() {
		if name := fmt.Sprint(r.Values["name"]); paths[name] != r.Values["volume_path"] {
			t.Errorf("%s (%s at %v) is not in the adopted state as it was: %v", r.Address, name, r.Values["volume_path"], paths[name])
		}
	}

	// The overlay keeps the made image from being deleted: remove it, and
	// what Terraform does not hold, by hand first.
	if out, err := acctest.Virsh(env.URI, "undefine", prefix+"holder"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, v := range []string{"overlay", "blank", "installer", "vmdisk"} {
		if out, err := acctest.Virsh(env.URI, "vol-delete", "--pool", env.Pool, prefix+v); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	adopt.Must("destroy", "-auto-approve", "-input=false")
	if err := acctest.CheckExact(env, prefix, nil); err != nil {
		t.Error(err)
	}
}
