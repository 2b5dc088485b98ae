package provider

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// The subnets of these tests, clear of accNetPrefix (TestAccNetwork_*)
// and testhost.sh's networks.
const (
	accQueryMadeNet = "192.168.215"
	accQueryHandNet = "192.168.216"
)

const tfHeader = "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n"

// defineByHand defines, builds (pools) and starts a pool or network from
// XML with virsh, as someone without Kohaku would.
func defineByHand(t *testing.T, uri, kind, name, doc string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), name+".xml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := [][]string{{"net-define", f}, {"net-start", name}}
	if kind == "pool" {
		steps = [][]string{{"pool-define", f}, {"pool-build", name}, {"pool-start", name}}
	}
	for _, args := range steps {
		if out, err := acctest.Virsh(uri, args...); err != nil {
			t.Fatalf("virsh %s: %v\n%s\n%s", strings.Join(args, " "), err, out, doc)
		}
	}
}

// tfstateIdentity reads the identity terraform.tfstate keeps for a
// resource (Terraform 1.12 and later keep it beside the attributes).
func tfstateIdentity(t *testing.T, w *acctest.Workspace, typ, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.Dir(), "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Resources []struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			Instances []struct {
				Identity map[string]any `json:"identity"`
			} `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Resources {
		if r.Type == typ && r.Name == name && len(r.Instances) == 1 {
			return r.Instances[0].Identity
		}
	}
	t.Fatalf("terraform.tfstate has no %s.%s:\n%s", typ, name, b)
	return nil
}

// poolDefinition is a pool's persistent XML without the sizes libvirt
// reports in it, which follow the free space of the file system.
func poolDefinition(t *testing.T, uri, name string) string {
	t.Helper()
	doc, err := acctest.Virsh(uri, "pool-dumpxml", "--inactive", name)
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`(?m)^\s*<(capacity|allocation|available)\b[^\n]*\n`).ReplaceAllString(doc, "")
}

// mustContainAll fails the test for each of want that doc lacks.
func mustContainAll(t *testing.T, what, doc string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(doc, w) {
			t.Errorf("%s lost %q:\n%s", what, w, doc)
		}
	}
}

// adoptGenerated runs terraform query -generate-config-out for lists in a
// fresh working directory and applies what it wrote: imports of want
// objects and nothing else, then an empty plan.
func adoptGenerated(t *testing.T, uri, lists string, want int) {
	t.Helper()
	adopt := acctest.NewWorkspace(t, tfHeader+providerBlock(uri))
	queryFound(t, adopt, lists, nil, "-generate-config-out=generated.tf")
	gen, err := os.ReadFile(filepath.Join(adopt.Dir(), "generated.tf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generated configuration:\n%s", gen)
	out := adopt.Must("plan", "-input=false", "-out=adopt.plan")
	if !strings.Contains(out, fmt.Sprintf("%d to import, 0 to add, 0 to change, 0 to destroy", want)) {
		t.Errorf("the plan of the generated configuration is not %d imports and nothing else:\n%s", want, out)
	}
	adopt.Must("apply", "-input=false", "adopt.plan")
	if out, err := adopt.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after adopting is not empty (%v):\n%s", err, out)
	}
}

// kohaku_pool under Terraform 1.14: a pool Kohaku made has its identity in
// state and imports by identity and by ID with empty plans; a pool defined
// by hand (permissions and a UUID Kohaku has no attribute for, not
// autostarted) imports by identity with an empty plan and keeps its
// definition through an autostart change; terraform query lists both under
// name_prefix, and in a fresh working directory the configuration
// -generate-config-out writes adopts both with nothing but imports, and
// the next plan is empty.
func TestAccPool_importAndQuery(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "kohaku_pool's identity and list resource (terraform query)")
	uri := acctest.URI(t)
	prefix := acctest.Prefix(t, "poolq", func(prefix string) error { return sweepPools(uri, prefix) })
	made, hand := prefix+"made", prefix+"hand"
	madeDir, handDir := filepath.Join(accPoolRoot, made), filepath.Join(accPoolRoot, hand)
	madeConfig := providerBlock(uri) + fmt.Sprintf(`
resource "kohaku_pool" "made" {
  name = %q
  path = %q
}
`, made, madeDir)

	// Made by Kohaku: identity, then imports by identity and by ID.
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config: madeConfig,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity("kohaku_pool.made", map[string]knownvalue.Check{
						"host": knownvalue.Null(),
						"name": knownvalue.StringExact(made),
					}),
					statecheck.ExpectIdentityValueMatchesState("kohaku_pool.made", tfjsonpath.New("name")),
				},
			},
			{Config: madeConfig, ResourceName: "kohaku_pool.made", ImportState: true, ImportStateKind: resource.ImportBlockWithResourceIdentity},
			{Config: madeConfig, ResourceName: "kohaku_pool.made", ImportState: true, ImportStateKind: resource.ImportBlockWithID},
		},
	})
	// resource.Test destroyed it; make it again for the query.
	w := acctest.NewWorkspace(t, tfHeader+madeConfig)
	w.Must("apply", "-auto-approve", "-input=false")

	// By hand.
	defineByHand(t, uri, "pool", hand, fmt.Sprintf(`<pool type='dir'><name>%s</name>
<target><path>%s</path><permissions><mode>0711</mode></permissions></target></pool>`, hand, handDir))
	uuid := regexp.MustCompile(`<uuid>[^<]+</uuid>`).FindString(poolDefinition(t, uri, hand))
	if uuid == "" {
		t.Fatalf("the hand-made pool %s has no UUID", hand)
	}
	handConfig := func(autostart bool) string {
		return tfHeader + providerBlock(uri) + fmt.Sprintf(`
import {
  to       = kohaku_pool.hand
  identity = { name = %[1]q }
}

resource "kohaku_pool" "hand" {
  name      = %[1]q
  path      = %[2]q
  autostart = %[3]t
}
`, hand, handDir, autostart)
	}
	byIdentity := acctest.NewWorkspace(t, handConfig(false))
	if out := byIdentity.Must("plan", "-input=false"); !strings.Contains(out, "1 to import, 0 to add, 0 to change, 0 to destroy") {
		t.Errorf("importing the hand-made pool by identity plans more than the import:\n%s", out)
	}
	byIdentity.Must("apply", "-auto-approve", "-input=false")
	if id := tfstateIdentity(t, byIdentity, "kohaku_pool", "hand"); id["name"] != hand || id["host"] != nil {
		t.Errorf("the adopted pool's identity is %v, want name %s and no host", id, hand)
	}
	if out, err := byIdentity.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the import is not empty (%v):\n%s", err, out)
	}
	byIdentity.Write(handConfig(true))
	if out := byIdentity.Must("apply", "-auto-approve", "-input=false"); !strings.Contains(out, "0 added, 1 changed, 0 destroyed") {
		t.Errorf("turning autostart on is not one change in place:\n%s", out)
	}
	if got, err := virshField(uri, "Autostart", "pool-info", hand); err != nil || got != "yes" {
		t.Errorf("autostart of %s is %q (%v), want yes", hand, got, err)
	}
	after := poolDefinition(t, uri, hand)
	mustContainAll(t, "the adopted pool's definition", after, uuid, "<mode>0711</mode>", handDir)

	// terraform query finds both, and adopts both from a fresh directory.
	lists := fmt.Sprintf(`
list "kohaku_pool" "mine" {
  provider = kohaku
  config {
    name_prefix = %q
  }
}
`, prefix)
	found := queryFound(t, w, lists, []string{"name"})
	if got, want := strings.Join(found["list.kohaku_pool.mine"], ","), hand+","+made; got != want {
		t.Errorf("terraform query found %s, want %s", got, want)
	}
	adoptGenerated(t, uri, lists, 2)
	if now := poolDefinition(t, uri, hand); now != after {
		t.Errorf("adopting through the generated configuration changed the pool:\n%s\nwas\n%s", now, after)
	}
}

// kohaku_network under Terraform 1.14: a network Kohaku made has its
// identity in state and imports by identity and by ID with empty plans; a
// network defined by hand with what Kohaku does not model (DNS host, MTU,
// domain, port group) and a reservation imports by identity with an empty
// plan, then takes a second reservation in place without a restart (same
// bridge ifindex and dnsmasq pid) and keeps all of that; terraform query
// lists both under name_prefix, and the configuration -generate-config-out
// writes adopts both with nothing but imports, and the next plan is empty.
// The networks are `open`: the test host has no iptables or nft.
func TestAccNetwork_importAndQuery(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "kohaku_network's identity and list resource (terraform query)")
	uri := acctest.URI(t)
	prefix := acctest.Prefix(t, "netq", func(prefix string) error { return sweepNetworks(uri, prefix) })
	rnd := strings.Split(prefix, "-")[3]
	made, hand := prefix+"made", prefix+"hand"
	handBridge := "kqh-" + rnd
	madeConfig := providerBlock(uri) + fmt.Sprintf(`
resource "kohaku_network" "made" {
  name         = %[1]q
  mode         = "open"
  bridge       = "kqm-%[2]s"
  ipv4_address = "%[3]s.1/24"
  dhcp_start   = "%[3]s.100"
  dhcp_end     = "%[3]s.199"
  dhcp_hosts   = [{ mac = "52:54:00:d5:15:01", ip = "%[3]s.10" }]
}
`, made, rnd, accQueryMadeNet)

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config: madeConfig,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity("kohaku_network.made", map[string]knownvalue.Check{
						"host": knownvalue.Null(),
						"name": knownvalue.StringExact(made),
					}),
					statecheck.ExpectIdentityValueMatchesState("kohaku_network.made", tfjsonpath.New("name")),
				},
			},
			{Config: madeConfig, ResourceName: "kohaku_network.made", ImportState: true, ImportStateKind: resource.ImportBlockWithResourceIdentity},
			{Config: madeConfig, ResourceName: "kohaku_network.made", ImportState: true, ImportStateKind: resource.ImportBlockWithID},
		},
	})
	w := acctest.NewWorkspace(t, tfHeader+madeConfig)
	w.Must("apply", "-auto-approve", "-input=false")

	defineByHand(t, uri, "network", hand, fmt.Sprintf(`<network><name>%[1]s</name><forward mode='open'/>
<bridge name='%[2]s' stp='on' delay='0'/><mtu size='1400'/><domain name='kacc.test' localOnly='yes'/>
<dns><host ip='%[3]s.20'><hostname>build</hostname></host></dns>
<ip address='%[3]s.1' netmask='255.255.255.0'><dhcp><range start='%[3]s.100' end='%[3]s.199'/>
<host mac='52:54:00:D5:16:01' name='web' ip='%[3]s.10'/></dhcp></ip>
<portgroup name='trusted' default='yes'/></network>`, hand, handBridge, accQueryHandNet))
	restarts, err := bridgeIdentity(hand, handBridge)
	if err != nil {
		t.Fatal(err)
	}
	handConfig := func(extra string) string {
		return tfHeader + providerBlock(uri) + fmt.Sprintf(`
import {
  to       = kohaku_network.hand
  identity = { name = %[1]q }
}

resource "kohaku_network" "hand" {
  name         = %[1]q
  mode         = "open"
  bridge       = %[2]q
  ipv4_address = "%[3]s.1/24"
  dhcp_start   = "%[3]s.100"
  dhcp_end     = "%[3]s.199"
  autostart    = false
  dhcp_hosts = [
    { mac = "52:54:00:d5:16:01", ip = "%[3]s.10", name = "web" },%[4]s
  ]
}
`, hand, handBridge, accQueryHandNet, extra)
	}
	byIdentity := acctest.NewWorkspace(t, handConfig(""))
	if out := byIdentity.Must("plan", "-input=false"); !strings.Contains(out, "1 to import, 0 to add, 0 to change, 0 to destroy") {
		t.Errorf("importing the hand-made network by identity plans more than the import:\n%s", out)
	}
	byIdentity.Must("apply", "-auto-approve", "-input=false")
	if id := tfstateIdentity(t, byIdentity, "kohaku_network", "hand"); id["name"] != hand || id["host"] != nil {
		t.Errorf("the adopted network's identity is %v, want name %s and no host", id, hand)
	}
	if out, err := byIdentity.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the import is not empty (%v):\n%s", err, out)
	}
	byIdentity.Write(handConfig(fmt.Sprintf(`
    { mac = "52:54:00:d5:16:02", ip = "%s.11" },`, accQueryHandNet)))
	if out := byIdentity.Must("apply", "-auto-approve", "-input=false"); !strings.Contains(out, "0 added, 1 changed, 0 destroyed") {
		t.Errorf("adding a reservation is not one change in place:\n%s", out)
	}
	if now, err := bridgeIdentity(hand, handBridge); err != nil || now != restarts {
		t.Errorf("the adopted network was restarted: %s before, %s now (%v)", restarts, now, err)
	}
	for _, args := range [][]string{{"net-dumpxml", hand}, {"net-dumpxml", "--inactive", hand}} {
		doc, err := acctest.Virsh(uri, args...)
		if err != nil {
			t.Fatal(err)
		}
		mustContainAll(t, "virsh "+strings.Join(args, " "), doc, "<mtu size='1400'/>", "kacc.test",
			"<hostname>build</hostname>", "<portgroup name='trusted' default='yes'", "52:54:00:d5:16:02")
	}

	lists := fmt.Sprintf(`
list "kohaku_network" "mine" {
  provider = kohaku
  config {
    name_prefix = %q
  }
}
`, prefix)
	found := queryFound(t, w, lists, []string{"name"})
	if got, want := strings.Join(found["list.kohaku_network.mine"], ","), hand+","+made; got != want {
		t.Errorf("terraform query found %s, want %s", got, want)
	}
	before, err := acctest.Virsh(uri, "net-dumpxml", "--inactive", hand)
	if err != nil {
		t.Fatal(err)
	}
	adoptGenerated(t, uri, lists, 2)
	if out, err := acctest.Virsh(uri, "net-dumpxml", "--inactive", hand); err != nil || out != before {
		t.Errorf("adopting through the generated configuration changed the network (%v):\n%s\nwas\n%s", err, out, before)
	}
}
