package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// kohaku_network's and kohaku_pool's own checks run at plan time, on the
// attribute at fault, before any host is asked.
func TestNetworkRejectsBadInputAtPlan(t *testing.T) {
	t.Parallel()
	const base = `name = "lab"
  ipv4_address = "192.168.131.1/24"
  dhcp_start   = "192.168.131.100"
  dhcp_end     = "192.168.131.199"
`
	for name, tc := range map[string]struct {
		body string
		want []string
	}{
		"unknown mode": {
			body: base + `  mode = "passthrough"`,
			want: []string{`Invalid Attribute Value Match`, `mode`, `nat`},
		},
		"address without prefix": {
			body: `name = "lab"
  ipv4_address = "192.168.131.1"`,
			want: []string{`Invalid address`, `ipv4_address`, `prefix length is missing`},
		},
		"v6 given as v4": {
			body: `name = "lab"
  ipv4_address = "fd00::1/64"`,
			want: []string{`Invalid address`, `ipv4_address`, `IPv4 address with a prefix`},
		},
		"range outside the subnet": {
			body: `name = "lab"
  ipv4_address = "192.168.131.1/24"
  dhcp_start   = "192.168.132.100"
  dhcp_end     = "192.168.131.199"`,
			want: []string{`Invalid network`, `dhcp_start`, `outside the network's subnet 192.168.131.0/24`},
		},
		"half a range": {
			body: `name = "lab"
  ipv4_address = "192.168.131.1/24"
  dhcp_start   = "192.168.131.100"`,
			want: []string{`dhcp_end`},
		},
		"upper-case MAC": {
			body: base + `  dhcp_hosts = [{ mac = "52:54:00:AA:00:01", ip = "192.168.131.10" }]`,
			want: []string{`Invalid Attribute Value Match`, `mac`, `lower case`},
		},
		"duplicate MAC": {
			body: base + `  dhcp_hosts = [
    { mac = "52:54:00:aa:00:01", ip = "192.168.131.10" },
    { mac = "52:54:00:aa:00:01", ip = "192.168.131.11" },
  ]`,
			want: []string{`Invalid network`, `dhcp_hosts`, `MAC 52:54:00:aa:00:01 has two reservations`},
		},
		"duplicate IP": {
			body: base + `  dhcp_hosts = [
    { mac = "52:54:00:aa:00:01", ip = "192.168.131.10" },
    { mac = "52:54:00:aa:00:02", ip = "192.168.131.10" },
  ]`,
			want: []string{`Invalid network`, `dhcp_hosts`, `192.168.131.10 is reserved twice`},
		},
		"bridge mode without a bridge": {
			body: `name = "lan"
  mode = "bridge"`,
			want: []string{`Invalid network`, `bridge`, `br0`},
		},
		"nat without an address": {
			body: `name = "lab"`,
			want: []string{`Invalid network`, `kohaku_network.n`, `needs the host's IPv4 address`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config:      vmPlanProvider + "resource \"kohaku_network\" \"n\" {\n  " + tc.body + "\n}\n",
					PlanOnly:    true,
					ExpectError: vmErrRE(tc.want...),
				}},
			})
		})
	}
}

func TestPoolRejectsRelativePathAtPlan(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      vmPlanProvider + "resource \"kohaku_pool\" \"p\" {\n  name = \"vms\"\n  path = \"srv/vms\"\n}\n",
			PlanOnly:    true,
			ExpectError: vmErrRE(`Invalid Attribute Value Match`, `path`, `must be an absolute path`),
		}},
	})
}

func TestNetworkAndPoolImportIDs(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string][2]string{
		"lab":      {"", "lab"},
		"gpu2/lab": {"gpu2", "lab"},
		"a/b/lab":  {"a/b", "lab"},
	} {
		host, name, ok := parseNameImportID(raw)
		if !ok || host != want[0] || name != want[1] {
			t.Errorf("%q: got %q, %q, %t; want %q, %q", raw, host, name, ok, want[0], want[1])
		}
	}
	for _, raw := range []string{"", "/", "gpu2/", "/lab"} {
		if _, _, ok := parseNameImportID(raw); ok {
			t.Errorf("%q accepted", raw)
		}
	}
}
