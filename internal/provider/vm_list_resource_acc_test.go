package provider

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// queryConfig is a list block for kohaku_vm with the given config lines.
func queryConfig(config string) string {
	return fmt.Sprintf("list \"kohaku_vm\" \"found\" {\n  provider = kohaku\n  config {\n%s  }\n}\n", config)
}

// The kohaku_vm list resource under Terraform 1.14: terraform query lists
// a domain a kohaku_vm made and one defined by hand (virsh define), its
// filters narrow the list, and in a fresh working directory the
// configuration `terraform query -generate-config-out` writes imports both
// (import blocks by identity) with no replacement; the plan afterwards is
// empty.
func TestAccVMList_queryAndAdopt(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_vm list resource (terraform query)")
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "query")
	header := "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" + providerBlock(env.URI)
	made := header + fmt.Sprintf(`
resource "kohaku_vm" "made" {
  name       = "%[1]smade"
  type       = "qemu"
  memory_mib = 96
  running    = false
  kernel     = %[2]q
  initrd     = %[3]q
}
`, prefix, env.Kernel, env.Initrd)
	w := acctest.NewWorkspace(t, made)
	w.Must("apply", "-auto-approve", "-input=false")
	// A domain defined by hand that boots a kernel, as a kohaku_vm can
	// describe (acctest.DefineByHand's has nothing to boot from).
	byHand := filepath.Join(t.TempDir(), "byhand.xml")
	if err := os.WriteFile(byHand, []byte(fmt.Sprintf(`<domain type='qemu'><name>%sbyhand</name>
<memory unit='MiB'>96</memory><vcpu>1</vcpu><cpu mode='maximum'/>
<os><type arch='x86_64' machine='q35'>hvm</type><kernel>%s</kernel><initrd>%s</initrd></os></domain>`,
		prefix, env.Kernel, env.Initrd)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := acctest.Virsh(env.URI, "define", byHand); err != nil {
		t.Fatalf("virsh define: %v\n%s", err, out)
	}

	query := func(w *acctest.Workspace, config string, extra ...string) []string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(w.Dir(), "main.tfquery.hcl"), []byte(queryConfig(config)), 0o644); err != nil {
			t.Fatal(err)
		}
		out := w.Must(append([]string{"query", "-json"}, extra...)...)
		var names []string
		for _, line := range strings.Split(out, "\n") {
			var msg struct {
				Type         string `json:"type"`
				ListResource struct {
					DisplayName string         `json:"display_name"`
					Identity    map[string]any `json:"identity"`
				} `json:"list_resource_found"`
			}
			if json.Unmarshal([]byte(line), &msg) != nil || msg.Type != "list_resource_found" {
				continue
			}
			if msg.ListResource.Identity["uuid"] == "" || msg.ListResource.Identity["uuid"] == nil {
				t.Errorf("result %s has no uuid in its identity: %s", msg.ListResource.DisplayName, line)
			}
			names = append(names, msg.ListResource.DisplayName)
		}
		return names
	}
	want := func(what string, got []string, names ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(names, ",") {
			t.Errorf("%s: query found %v, want %v", what, got, names)
		}
	}
	want("by prefix", query(w, fmt.Sprintf("    name_prefix = %q\n", prefix)), prefix+"byhand", prefix+"made")
	want("made by Kohaku", query(w, fmt.Sprintf("    name_prefix = %q\n    made_by_kohaku = true\n", prefix)), prefix+"made")
	want("made otherwise", query(w, fmt.Sprintf("    name_prefix = %q\n    made_by_kohaku = false\n", prefix)), prefix+"byhand")
	want("running", query(w, fmt.Sprintf("    name_prefix = %q\n    running = true\n", prefix)))

	// Adopt both from a fresh working directory through the generated
	// configuration: imports, no replacement, then an empty plan.
	adopt := acctest.NewWorkspace(t, header)
	query(adopt, fmt.Sprintf("    name_prefix = %q\n", prefix), "-generate-config-out=generated.tf")
	gen, err := os.ReadFile(filepath.Join(adopt.Dir(), "generated.tf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generated configuration:\n%s", gen)
	for _, frag := range []string{`resource "kohaku_vm"`, "import {", "identity = {", prefix + "byhand", prefix + "made"} {
		if !strings.Contains(string(gen), frag) {
			t.Errorf("the generated configuration lacks %q", frag)
		}
	}
	out := adopt.Must("plan", "-input=false", "-out=adopt.plan")
	if !strings.Contains(out, "2 to import, 0 to add") || !strings.Contains(out, "0 to destroy") {
		t.Errorf("the plan of the generated configuration is not two imports with nothing added or destroyed:\n%s", out)
	}
	adopt.Must("apply", "-input=false", "adopt.plan")
	if out, err := adopt.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after adopting is not empty (%v):\n%s", err, out)
	}
	uuids := map[string]bool{}
	for _, r := range adopt.State() {
		uuids[fmt.Sprint(r.Values["uuid"])] = true
	}
	for _, r := range w.State() {
		if !uuids[fmt.Sprint(r.Values["uuid"])] {
			t.Errorf("the adopted state lacks %s (UUID %v): it was replaced", r.Address, r.Values["uuid"])
		}
	}
	adopt.Must("destroy", "-auto-approve", "-input=false")
	if err := acctest.CheckExact(env, prefix, nil); err != nil {
		t.Error(err)
	}
}
