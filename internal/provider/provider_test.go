package provider

import (
	"fmt"
	"os/exec"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts/libvirthost"
)

// protoV6Providers serves the provider in-process to Terraform in tests.
var protoV6Providers = map[string]func() (tfprotov6.ProviderServer, error){
	"kohaku": providerserver.NewProtocol6WithError(New("test", libvirthost.Connect)()),
}

// virshVersion returns what `virsh version` reports for the daemon and the
// hypervisor: an independent reading to check ours against.
func virshVersion(t *testing.T, uri string) (daemon, hypervisor string) {
	t.Helper()
	out, err := exec.Command("virsh", "-c", uri, "version", "--daemon").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh -c %s version: %v\n%s", uri, err, out)
	}
	d := regexp.MustCompile(`Running against daemon: (\S+)`).FindSubmatch(out)
	h := regexp.MustCompile(`Running hypervisor: \S+ (\S+)`).FindSubmatch(out)
	if d == nil || h == nil {
		t.Fatalf("cannot read versions from virsh output:\n%s", out)
	}
	return string(d[1]), string(h[1])
}

func providerBlock(uri string) string {
	return fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", uri)
}

// compareSame passes when two state values are equal.
type compareSame struct{}

func (compareSame) CompareValues(values ...any) error {
	for _, v := range values[1:] {
		if fmt.Sprint(v) != fmt.Sprint(values[0]) {
			return fmt.Errorf("values differ: %v and %v", values[0], v)
		}
	}
	return nil
}

// TestMain runs the tests, or with -sweep=<anything> the sweepers that
// remove what a crashed acceptance run left on the test host:
//
//	go test ./internal/provider -v -sweep=local
func TestMain(m *testing.M) {
	resource.TestMain(m)
}

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
