package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// declaredConfigResources is readyResources with one declaration the guest
// cannot satisfy by construction (a second share whose tag the VM does not
// export, so its mount fails) and the guest's own view of its IPv4 routes
// and resolv.conf written to the share, to judge the reporter by.
func declaredConfigResources(env acctest.VMEnv, prefix, share, res, vmExtra string) string {
	cfg := readyResources(env, prefix, share, res, "", "", vmExtra)
	cfg = strings.Replace(cfg, `shared_folders = [{ tag = "kohaku_shared", path = "/shared" }]`,
		`shared_folders = [{ tag = "kohaku_shared", path = "/shared" }, { tag = "w16r_absent", path = "/w16r-absent" }]`, 1)
	return strings.Replace(cfg, "      - sync\n", "      - ip -4 route show > /shared/routes\n      - cat /etc/resolv.conf > /shared/resolv.conf\n      - sync\n", 1)
}

// A real Debian 12 guest checked against its seed's declaration, with the
// default on_config_mismatch ("warn"): create succeeds although the guest
// lacks a declared share, and guest carries the routes and DNS servers the
// guest really has (compared with what the guest itself wrote through the
// share: on Debian 12 without net-tools the IPv4 default route is there
// exactly when the seed renders the gateway in a form ifupdown applies), and
// a later plan is empty.
func TestAccReady_declaredConfig(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "w16r")
	share := t.TempDir()
	cfg := fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", env.URI) +
		declaredConfigResources(env, prefix, share, "warn", "  timeouts {\n    create = \"30m\"\n  }")
	addr := "kohaku_vm.warn"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("on_config_mismatch"), knownvalue.StringExact("warn")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("guest").AtMapKey("ready_via"), knownvalue.StringExact("channel")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckTypeSetElemNestedAttrs(addr, "guest.routes.*", map[string]string{"destination": "10.0.2.0/24", "gateway": ""}),
					routesMatchTheGuest(addr, share),
					dnsMatchesTheGuest(addr, share),
				),
			},
			{
				// The computed guest attributes, new ones included, stay quiet.
				Config:   cfg,
				PlanOnly: true,
			},
		},
	})
}

// The same seed with on_config_mismatch = "fail" fails the create naming
// what is missing (the share that cannot be mounted), and
// on_ready_failure = "destroy" leaves nothing behind.
func TestAccReady_declaredConfigFail(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "w16rf")
	cfg := fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", env.URI) +
		declaredConfigResources(env, prefix, t.TempDir(), "fail",
			"  on_config_mismatch = \"fail\"\n  on_ready_failure   = \"destroy\"\n  timeouts {\n    create = \"30m\"\n  }")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:      cfg,
				ExpectError: regexp.MustCompile(`(?s)failed at step\s+"wait for the guest to be ready".*VM\s+` + regexp.QuoteMeta(prefix) + `vm\s+is\s+not\s+configured\s+as\s+its\s+seed\s+declared:.*no\s+share\s+mounted\s+at\s+/w16r-absent.*Rolled\s+back`),
			},
			{
				PreConfig: func() {
					if out, err := acctest.Virsh(env.URI, "domstate", prefix+"vm"); err == nil {
						t.Errorf("on_ready_failure = destroy left the domain (%s)", out)
					}
				},
				// The failed VM is in no state: the plan creates it again.
				Config:             cfg,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// routesMatchTheGuest: the IPv4 default route is in guest.routes exactly
// when the guest's own `ip route` has it.
func routesMatchTheGuest(addr, share string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		b, err := os.ReadFile(filepath.Join(share, "routes"))
		if err != nil {
			return fmt.Errorf("the guest did not write its routes to the share: %v", err)
		}
		guestHas := regexp.MustCompile(`(?m)^default via 10\.0\.2\.2 `).Match(b)
		attrs := s.RootModule().Resources[addr].Primary.Attributes
		reported := false
		for k, v := range attrs {
			if strings.HasPrefix(k, "guest.routes.") && strings.HasSuffix(k, ".destination") && v == "0.0.0.0/0" &&
				attrs[strings.TrimSuffix(k, "destination")+"gateway"] == "10.0.2.2" {
				reported = true
			}
		}
		fmt.Fprintf(os.Stderr, "w16r: the guest's IPv4 routes:\n%s(default route via 10.0.2.2 in the guest: %v, reported: %v)\n", b, guestHas, reported)
		if guestHas != reported {
			return fmt.Errorf("the guest's ip route says default via 10.0.2.2 is %v, guest.routes says %v:\n%s", guestHas, reported, b)
		}
		return nil
	}
}

// dnsMatchesTheGuest: guest.dns_servers are resolv.conf's nameservers
// (the test image has no systemd-resolved).
func dnsMatchesTheGuest(addr, share string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		b, err := os.ReadFile(filepath.Join(share, "resolv.conf"))
		if err != nil {
			return fmt.Errorf("the guest did not write resolv.conf to the share: %v", err)
		}
		var want []string
		for _, m := range regexp.MustCompile(`(?m)^nameserver\s+(\S+)`).FindAllSubmatch(b, -1) {
			want = append(want, string(m[1]))
		}
		attrs := s.RootModule().Resources[addr].Primary.Attributes
		var got []string
		for i := 0; ; i++ {
			v, ok := attrs[fmt.Sprintf("guest.dns_servers.%d", i)]
			if !ok {
				break
			}
			got = append(got, v)
		}
		fmt.Fprintf(os.Stderr, "w16r: the guest's resolv.conf:\n%s(reported dns_servers: %v)\n", b, got)
		if strings.Join(got, " ") != strings.Join(want, " ") || attrs["guest.dns_servers.#"] != fmt.Sprint(len(want)) {
			return fmt.Errorf("guest.dns_servers = %v, the guest's resolv.conf has %v", got, want)
		}
		return nil
	}
}
