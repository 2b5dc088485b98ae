package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// hostChecks compares the data source with what virsh reports for the same
// host and with the test host's known pool.
func hostChecks(t *testing.T, virshURI, addr string) []statecheck.StateCheck {
	daemon, hypervisor := virshVersion(t, virshURI)
	return []statecheck.StateCheck{
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("libvirt_version"), knownvalue.StringExact(daemon)),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("hypervisor_version"), knownvalue.StringExact(hypervisor)),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("hypervisor_type"), knownvalue.StringExact("QEMU")),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("cpus"), knownvalue.Int64Func(func(v int64) error {
			if v < 1 {
				return fmt.Errorf("cpus = %d", v)
			}
			return nil
		})),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f-]{36}$`))),
	}
}

// poolCheck looks for the test host's pool, and for qemu (TCG) among the
// domain types, which every host with qemu-system offers.
func poolCheck(addr string) resource.TestCheckFunc {
	return resource.ComposeAggregateTestCheckFunc(
		resource.TestCheckTypeSetElemNestedAttrs(addr, "pools.*", map[string]string{
			"name":   "kohaku-acc",
			"type":   "dir",
			"active": "true",
		}),
		resource.TestCheckTypeSetElemAttr(addr, "domain_types.*", "qemu"),
	)
}

func TestAccHostDataSource_unixSocket(t *testing.T) {
	uri := acctest.URI(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            providerBlock(uri) + `data "kohaku_host" "this" {}`,
			ConfigStateChecks: hostChecks(t, uri, "data.kohaku_host.this"),
			Check: resource.ComposeAggregateTestCheckFunc(
				poolCheck("data.kohaku_host.this"),
				resource.TestCheckResourceAttr("data.kohaku_host.this", "uri", uri),
			),
		}},
	})
}

func TestAccHostDataSource_tcpLoopback(t *testing.T) {
	uri := acctest.Env(t, "KOHAKU_TEST_TCP_URI")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            providerBlock(uri) + `data "kohaku_host" "this" {}`,
			ConfigStateChecks: hostChecks(t, uri, "data.kohaku_host.this"),
			Check:             poolCheck("data.kohaku_host.this"),
		}},
	})
}

func sshConfig(uri, keyFile, knownHosts string) string {
	return fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  ssh = {
    key_file         = %q
    known_hosts_file = %q
    use_agent        = false
  }
}
data "kohaku_host" "this" {}
`, uri, keyFile, knownHosts)
}

func TestAccHostDataSource_ssh(t *testing.T) {
	local := acctest.URI(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            sshConfig(uri, sshd.ClientKey, sshd.WriteKnownHosts(t)),
			ConfigStateChecks: hostChecks(t, local, "data.kohaku_host.this"),
			Check: resource.ComposeAggregateTestCheckFunc(
				poolCheck("data.kohaku_host.this"),
				resource.TestCheckResourceAttr("data.kohaku_host.this", "uri", uri),
			),
		}},
	})
}

func TestAccHostDataSource_sshUnknownHostKey(t *testing.T) {
	acctest.URI(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: sshConfig(uri, sshd.ClientKey, sshd.Dir+"/empty_known_hosts"),
			// The diagnostic names the URI, says the key is unknown, shows
			// the fingerprint and the line to add.
			ExpectError: regexp.MustCompile(`(?s)Cannot use libvirt host qemu\+ssh://root@127\.0\.0\.1:\d+/system.*SSH host key of\s+127\.0\.0\.1:\d+ \(ssh-ed25519\s+SHA256:.*is not in.*empty_known_hosts.*\[127\.0\.0\.1\]:\d+ ssh-ed25519`),
		}},
	})
}

func TestAccHostDataSource_sshRefusedAuth(t *testing.T) {
	acctest.URI(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      sshConfig(uri, sshd.WriteOtherKey(t), sshd.WriteKnownHosts(t)),
			ExpectError: regexp.MustCompile(`(?s)transport ssh.*SSH server refused user\s+"root".*stranger_ed25519.*ssh.key_file`),
		}},
	})
}

func TestAccHostDataSource_unreachable(t *testing.T) {
	acctest.URI(t)
	port := acctest.ClosedPort(t)
	uri := fmt.Sprintf("qemu+tcp://127.0.0.1:%d/system", port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      providerBlock(uri) + `data "kohaku_host" "this" {}`,
			ExpectError: regexp.MustCompile(fmt.Sprintf(`(?s)qemu\+tcp://127\.0\.0\.1:%d/system.*transport tcp.*connection refused.*listen_tcp`, port)),
		}},
	})
}

// A down host in the hosts map fails only what is placed on it; the same
// daemon reached over two transports reports the same host.
func TestAccHostDataSource_hostsMap(t *testing.T) {
	local := acctest.URI(t)
	tcp := acctest.Env(t, "KOHAKU_TEST_TCP_URI")
	down := fmt.Sprintf("qemu+tcp://127.0.0.1:%d/system", acctest.ClosedPort(t))
	cfg := fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  hosts = {
    loopback = { uri = %q }
    down     = { uri = %q }
  }
}
data "kohaku_host" "default" {}
data "kohaku_host" "loopback" {
  host = "loopback"
}
`, local, tcp, down)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.CompareValuePairs("data.kohaku_host.default", tfjsonpath.New("id"),
						"data.kohaku_host.loopback", tfjsonpath.New("id"), compareSame{}),
					statecheck.ExpectKnownValue("data.kohaku_host.loopback", tfjsonpath.New("uri"), knownvalue.StringExact(tcp)),
				},
			},
			{
				Config:      cfg + "data \"kohaku_host\" \"down\" {\n  host = \"down\"\n}\n",
				ExpectError: regexp.MustCompile(`(?s)Cannot use libvirt host\s+qemu\+tcp://127\.0\.0\.1:\d+/system.*connection refused`),
			},
		},
	})
}
