package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// These need no libvirt host: bad settings are refused before any dial.
func TestProviderRejectsBadSettings(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		config string
		want   string
	}{
		"bad duration": {
			config: `provider "kohaku" {
  call_timeout = "soon"
}`,
			want: `(?s)Invalid duration.*"soon" is not a positive duration.*"2m"`,
		},
		"bad host key policy": {
			config: `provider "kohaku" {
  ssh = { known_hosts_verify = "trusting" }
}`,
			want: `(?s)known_hosts_verify.*value must be one of`,
		},
		"unsupported transport": {
			config: `provider "kohaku" {
  uri = "qemu+ftp://gpu1/system"
}`,
			want: `(?s)Invalid libvirt connection settings.*transport "ftp".*unix, tcp, tls or ssh`,
		},
		"host not in the hosts map": {
			config: `provider "kohaku" {
  uri   = "qemu:///system?socket=/nonexistent.sock"
  hosts = { gpu1 = { uri = "qemu+ssh://root@gpu1/system" } }
}`,
			want: `(?s)host "gpu2" is not a key of the provider's hosts map; the keys\s+are gpu1`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config:      tc.config + "\ndata \"kohaku_host\" \"this\" {\n  host = \"gpu2\"\n}\n",
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
		})
	}
}
