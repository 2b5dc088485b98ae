package provider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// accPoolRoot is where the pool tests put their directories: beside the
// test host's kohaku-acc pool, which testhost.sh makes.
const accPoolRoot = "/var/lib/kohaku-acc"

// The networks of these tests use 192.168.213.0/24 and bridges named
// kacc-<random>, clear of testhost.sh's kohaku-quickstart network
// (192.168.123.0/24 on kohaku-qs0).
const accNetPrefix = "192.168.213"

func init() {
	resource.AddTestSweepers("kohaku_network", &resource.Sweeper{
		Name: "kohaku_network",
		F:    func(string) error { return sweepNetworks(accURI(), accPrefix) },
	})
	resource.AddTestSweepers("kohaku_pool", &resource.Sweeper{
		Name: "kohaku_pool",
		F:    func(string) error { return sweepPools(accURI(), accPrefix) },
	})
}

func accURI() string {
	if uri := os.Getenv("KOHAKU_URI"); uri != "" {
		return uri
	}
	return "qemu:///system"
}

// virshNames lists the names virsh prints for a list command (net-list,
// pool-list) that start with prefix.
func virshNames(uri, prefix string, args ...string) ([]string, error) {
	out, err := acctest.Virsh(uri, args...)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Fields(out) {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	return names, nil
}

// sweepNetworks stops and undefines every network whose name starts with
// prefix.
func sweepNetworks(uri, prefix string) error {
	if !strings.HasPrefix(prefix, accPrefix) {
		return fmt.Errorf("refusing to sweep %q: only names under %q belong to the tests", prefix, accPrefix)
	}
	names, err := virshNames(uri, prefix, "net-list", "--all", "--name")
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		_, _ = acctest.Virsh(uri, "net-destroy", n) // fails when it is stopped already
		if _, err := acctest.Virsh(uri, "net-undefine", n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sweepPools stops and undefines every pool whose name starts with prefix,
// and removes its directory when it is one of the tests' (under
// accPoolRoot, named for the test), whatever it holds.
func sweepPools(uri, prefix string) error {
	if !strings.HasPrefix(prefix, accPrefix) {
		return fmt.Errorf("refusing to sweep %q: only names under %q belong to the tests", prefix, accPrefix)
	}
	names, err := virshNames(uri, prefix, "pool-list", "--all", "--name")
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		dir := ""
		if doc, err := acctest.Virsh(uri, "pool-dumpxml", n); err == nil {
			if m := regexp.MustCompile(`<path>([^<]+)</path>`).FindStringSubmatch(doc); m != nil {
				dir = m[1]
			}
		}
		_, _ = acctest.Virsh(uri, "pool-destroy", n) // fails when it is stopped already
		if _, err := acctest.Virsh(uri, "pool-undefine", n); err != nil {
			errs = append(errs, err)
		}
		if filepath.Dir(dir) == accPoolRoot && strings.HasPrefix(filepath.Base(dir), prefix) {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// a directory whose pool is gone already
	dirs, _ := filepath.Glob(filepath.Join(accPoolRoot, prefix+"*"))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// virshField reads one "Key: value" line of virsh pool-info or net-info.
func virshField(uri, key string, args ...string) (string, error) {
	out, err := acctest.Virsh(uri, args...)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("virsh %s printed no %s:\n%s", strings.Join(args, " "), key, out)
}

func checkVirshField(uri, key, want string, args ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		got, err := virshField(uri, key, args...)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("virsh %s: %s is %q, want %q", strings.Join(args, " "), key, got, want)
		}
		return nil
	}
}

// A directory pool: created with its directory, started and autostarted;
// destroy refused while it holds a volume Kohaku did not make; imported;
// found gone and made again over the directory that stayed; autostart and
// force_destroy changed in place; destroyed with force, volume and
// directory gone.
func TestAccPool_lifecycle(t *testing.T) {
	uri := acctest.URI(t)
	prefix := acctest.Prefix(t, "pool", func(prefix string) error { return sweepPools(uri, prefix) })
	name := prefix + "p"
	dir := filepath.Join(accPoolRoot, prefix+"dir")
	provider := fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", uri)
	cfg := func(autostart, force bool) string {
		return provider + fmt.Sprintf(`
resource "kohaku_pool" "p" {
  name          = %q
  path          = %q
  autostart     = %t
  force_destroy = %t
}
`, name, dir, autostart, force)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: func(*terraform.State) error {
			if _, err := acctest.Virsh(uri, "pool-info", name); err == nil {
				return fmt.Errorf("pool %s is still defined", name)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("the pool's directory %s is still there (%v)", dir, err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: cfg(true, false),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_pool.p", tfjsonpath.New("id"), knownvalue.StringExact(name)),
					statecheck.ExpectKnownValue("kohaku_pool.p", tfjsonpath.New("active"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("kohaku_pool.p", tfjsonpath.New("autostart"), knownvalue.Bool(true)),
				},
				Check: resource.ComposeTestCheckFunc(
					checkVirshField(uri, "State", "running", "pool-info", name),
					checkVirshField(uri, "Autostart", "yes", "pool-info", name),
					func(*terraform.State) error {
						if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
							return fmt.Errorf("the pool's directory %s was not made: %v", dir, err)
						}
						return nil
					},
				),
			},
			{
				// a volume someone else made; then the pool leaves the configuration
				PreConfig: func() {
					if out, err := acctest.Virsh(uri, "vol-create-as", name, "foreign.raw", "1M"); err != nil {
						t.Fatalf("%v: %s", err, out)
					}
				},
				Config:      provider,
				ExpectError: regexp.MustCompile(`(?s)is not empty.*foreign\.raw.*force_destroy`),
			},
			{
				// the refused destroy changed nothing: same pool, volume kept
				Config: cfg(true, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: func(*terraform.State) error {
					out, err := acctest.Virsh(uri, "vol-list", "--pool", name)
					if err != nil || !strings.Contains(out, "foreign.raw") {
						return fmt.Errorf("the foreign volume is gone after a refused destroy (%v):\n%s", err, out)
					}
					return nil
				},
			},
			{
				ResourceName:      "kohaku_pool.p",
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
			{
				// gone behind Terraform's back (its directory stays): made again
				PreConfig: func() {
					for _, args := range [][]string{{"pool-destroy", name}, {"pool-undefine", name}} {
						if out, err := acctest.Virsh(uri, args...); err != nil {
							t.Fatalf("%v: %s", err, out)
						}
					}
				},
				Config: cfg(true, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("kohaku_pool.p", plancheck.ResourceActionCreate)},
				},
				Check: checkVirshField(uri, "State", "running", "pool-info", name),
			},
			{
				Config: cfg(false, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("kohaku_pool.p", plancheck.ResourceActionUpdate)},
				},
				Check: resource.ComposeTestCheckFunc(
					checkVirshField(uri, "Autostart", "no", "pool-info", name),
					checkVirshField(uri, "State", "running", "pool-info", name),
				),
			},
			// the final destroy runs with force_destroy = true: foreign.raw,
			// the pool and its directory go (CheckDestroy)
		},
	})
}

// bridgeIdentity is what changes when a network is restarted: the bridge's
// interface index (the bridge is deleted and made again) and, when libvirt
// writes one, the pid of the network's dnsmasq.
func bridgeIdentity(name, bridge string) (string, error) {
	idx, err := os.ReadFile(filepath.Join("/sys/class/net", bridge, "ifindex"))
	if err != nil {
		return "", fmt.Errorf("reading the ifindex of bridge %s: %w", bridge, err)
	}
	id := "ifindex " + strings.TrimSpace(string(idx))
	if pid, err := os.ReadFile(filepath.Join("/run/libvirt/network", name+".pid")); err == nil {
		id += ", dnsmasq pid " + strings.TrimSpace(string(pid))
	}
	return id, nil
}

// Reservations are added, changed and removed on a running network, which
// is never restarted: its bridge keeps its interface index and its dnsmasq
// its pid, and dnsmasq's hosts file follows each change.
func TestAccNetwork_dhcpHostsLive(t *testing.T) {
	uri := acctest.URI(t)
	prefix := acctest.Prefix(t, "net", func(prefix string) error { return sweepNetworks(uri, prefix) })
	name := prefix + "n"
	bridge := "kacc-" + strings.Split(prefix, "-")[3] // 10 characters, under IFNAMSIZ
	provider := fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", uri)
	cfg := func(hosts string) string {
		return provider + fmt.Sprintf(`
resource "kohaku_network" "n" {
  name         = %[1]q
  mode         = "open" # the test host has no iptables or nft; open needs neither
  bridge       = %[2]q
  ipv4_address = "%[3]s.1/24"
  dhcp_start   = "%[3]s.100"
  dhcp_end     = "%[3]s.199"
  %[4]s
}
`, name, bridge, accNetPrefix, hosts)
	}
	const (
		mac1 = "52:54:00:d5:00:01"
		mac2 = "52:54:00:d5:00:02"
	)
	one := fmt.Sprintf(`dhcp_hosts = [{ mac = %q, ip = "%s.10", name = "resv1" }]`, mac1, accNetPrefix)
	two := fmt.Sprintf(`dhcp_hosts = [{ mac = %q, ip = "%s.11" }]`, mac2, accNetPrefix)

	var identity string // the bridge's and dnsmasq's, as first made
	record := func(*terraform.State) error {
		var err error
		identity, err = bridgeIdentity(name, bridge)
		return err
	}
	notRestarted := func(*terraform.State) error {
		got, err := bridgeIdentity(name, bridge)
		if err != nil {
			return err
		}
		if got != identity {
			return fmt.Errorf("network %s was restarted: %s before, %s now", name, identity, got)
		}
		return nil
	}
	// reservation checks the live and the persistent XML, and dnsmasq's
	// hosts file when libvirt keeps it where it usually does.
	reservation := func(mac, ip string, want bool) resource.TestCheckFunc {
		re := regexp.MustCompile(`<host mac='` + regexp.QuoteMeta(mac) + `'[^>]*ip='` + regexp.QuoteMeta(ip) + `'`)
		return func(*terraform.State) error {
			for _, args := range [][]string{{"net-dumpxml", name}, {"net-dumpxml", "--inactive", name}} {
				doc, err := acctest.Virsh(uri, args...)
				if err != nil {
					return err
				}
				if re.MatchString(doc) != want {
					return fmt.Errorf("virsh %s: reservation %s -> %s present = %t, want %t:\n%s", strings.Join(args, " "), mac, ip, !want, want, doc)
				}
			}
			if hosts, err := os.ReadFile(filepath.Join("/var/lib/libvirt/dnsmasq", name+".hostsfile")); err == nil {
				if strings.Contains(string(hosts), mac) != want {
					return fmt.Errorf("dnsmasq's hosts file: %s present = %t, want %t:\n%s", mac, !want, want, hosts)
				}
			} else if want {
				t.Logf("dnsmasq's hosts file not read (%v); the live XML stands for it", err)
			}
			return nil
		}
	}
	inPlace := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("kohaku_network.n", plancheck.ResourceActionUpdate)}}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: func(*terraform.State) error {
			if _, err := acctest.Virsh(uri, "net-info", name); err == nil {
				return fmt.Errorf("network %s is still defined", name)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: cfg(""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_network.n", tfjsonpath.New("mode"), knownvalue.StringExact("open")),
					statecheck.ExpectKnownValue("kohaku_network.n", tfjsonpath.New("active"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("kohaku_network.n", tfjsonpath.New("dhcp_hosts"), knownvalue.Null()),
				},
				Check: resource.ComposeTestCheckFunc(
					checkVirshField(uri, "Active", "yes", "net-info", name),
					checkVirshField(uri, "Autostart", "yes", "net-info", name),
					checkVirshField(uri, "Bridge", bridge, "net-info", name),
					record,
				),
			},
			{
				Config:           cfg(one),
				ConfigPlanChecks: inPlace,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_network.n", tfjsonpath.New("dhcp_hosts"), knownvalue.SetExact([]knownvalue.Check{
						knownvalue.ObjectExact(map[string]knownvalue.Check{
							"mac": knownvalue.StringExact(mac1), "ip": knownvalue.StringExact(accNetPrefix + ".10"), "name": knownvalue.StringExact("resv1"),
						}),
					})),
				},
				Check: resource.ComposeTestCheckFunc(
					reservation(mac1, accNetPrefix+".10", true),
					checkVirshField(uri, "Active", "yes", "net-info", name),
					notRestarted,
				),
			},
			{
				// one reservation replaced by another, in place
				Config:           cfg(two),
				ConfigPlanChecks: inPlace,
				Check: resource.ComposeTestCheckFunc(
					reservation(mac1, accNetPrefix+".10", false),
					reservation(mac2, accNetPrefix+".11", true),
					notRestarted,
				),
			},
			{
				ResourceName:      "kohaku_network.n",
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
			{
				Config:           cfg(""),
				ConfigPlanChecks: inPlace,
				Check: resource.ComposeTestCheckFunc(
					reservation(mac2, accNetPrefix+".11", false),
					checkVirshField(uri, "Active", "yes", "net-info", name),
					notRestarted,
				),
			},
			{
				Config:   cfg(""),
				PlanOnly: true, // nothing left to change
			},
		},
	})
}
