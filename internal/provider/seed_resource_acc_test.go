package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
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
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// virsh runs virsh against the test host: an independent way to look at
// what the provider did.
func virsh(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-c", acctest.URI(t)}, args...)...).CombinedOutput()
	return string(out), err
}

// downloadWithVirsh fetches a volume with virsh vol-download.
func downloadWithVirsh(t *testing.T, pool, name string) []byte {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if out, err := virsh(t, "vol-download", "--pool", pool, name, f); err != nil {
		t.Fatalf("virsh vol-download %s/%s: %v\n%s", pool, name, err, out)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkVolumeGone is a CheckDestroy that fails when a seed volume survived.
func checkVolumeGone(t *testing.T, pool string, names ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := virsh(t, "vol-list", "--pool", pool)
		if err != nil {
			return fmt.Errorf("virsh vol-list: %v\n%s", err, out)
		}
		for _, n := range names {
			if strings.Contains(out, n) {
				return fmt.Errorf("volume %s/%s still exists after destroy:\n%s", pool, n, out)
			}
		}
		return nil
	}
}

func seedConfig(pool, name, extra string) string {
	return providerBlock(os.Getenv("KOHAKU_URI")) + fmt.Sprintf(`
resource "kohaku_seed" "test" {
  name     = %q
  pool     = %q
  hostname = "acc-guest"

  user = {
    name                = "kohaku"
    ssh_authorized_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ1c2VkZm9ydGVzdGluZ29ubHkwMDAwMDAwMDAwMDAw test@kohaku"]
  }
  network = [{
    addresses   = ["10.0.2.15/24"]
    gateway4    = "10.0.2.2"
    nameservers = ["10.0.2.3"]
  }]
  shared_folders = [{ tag = "kohaku_shared", path = "/shared" }]
  write_files = [{ path = "/etc/kohaku/hello", content = "hello from kohaku\n", permissions = "0644" }]
%s
}
`, name, pool, extra)
}

// The seed on the host is exactly what the plan said: same checksum when
// virsh downloads it, documents that read back, MAC derived from the name.
func TestAccSeed_lifecycle(t *testing.T) {
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	name := "kohaku-acc-seed-life.iso"
	addr := "kohaku_seed.test"
	checkOnHost := func(s *terraform.State) error {
		rs := s.RootModule().Resources[addr].Primary.Attributes
		iso := downloadWithVirsh(t, pool, name)
		sum := sha256.Sum256(iso)
		if got := hex.EncodeToString(sum[:]); got != rs["sha256"] {
			return fmt.Errorf("volume on host has sha256 %s, state says %s", got, rs["sha256"])
		}
		in, err := seed.Inspect(iso)
		if err != nil {
			return err
		}
		if in.Label != "cidata" || in.InstanceID != rs["instance_id"] {
			return fmt.Errorf("ISO label %q instance %q, state instance %q", in.Label, in.InstanceID, rs["instance_id"])
		}
		if !strings.Contains(string(in.Files["user-data"]), "hello from kohaku") {
			return fmt.Errorf("user-data on the host lacks the write_files entry:\n%s", in.Files["user-data"])
		}
		if string(in.Files["network-config"]) != rs["rendered_network_config"] {
			return fmt.Errorf("network-config on the host differs from rendered_network_config")
		}
		if ud := sha256.Sum256(in.Files["user-data"]); hex.EncodeToString(ud[:]) != rs["user_data_sha256"] {
			return fmt.Errorf("user-data on the host has sha256 %x, state's user_data_sha256 is %s", ud, rs["user_data_sha256"])
		}
		return nil
	}
	// userDataOnHost matches the user-data document on the host.
	userDataOnHost := func(re *regexp.Regexp) resource.TestCheckFunc {
		return func(*terraform.State) error {
			in, err := seed.Inspect(downloadWithVirsh(t, pool, name))
			if err != nil {
				return err
			}
			if !re.Match(in.Files["user-data"]) {
				return fmt.Errorf("user-data on the host does not match %s:\n%s", re, in.Files["user-data"])
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkVolumeGone(t, pool, name),
		Steps: []resource.TestStep{
			{
				Config: seedConfig(pool, name, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(pool+"/"+name)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("macs"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(seed.DeriveMAC(name))})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("instance_id"), knownvalue.StringRegexp(regexp.MustCompile(`^kohaku-acc-seed-life\.iso-[0-9a-f]{12}$`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("rendered_network_config"), knownvalue.StringRegexp(regexp.MustCompile(`macaddress: ['"]?`+regexp.QuoteMeta(seed.DeriveMAC(name))))),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkOnHost,
					resource.TestMatchResourceAttr(addr, "volume_path", regexp.MustCompile(`/`+regexp.QuoteMeta(name)+`$`)),
				),
			},
			// Nothing changed: the plan is empty (the ISO is reproducible).
			{Config: seedConfig(pool, name, ""), PlanOnly: true},
			// Import by pool/volume; inputs cannot be read back from an ISO.
			{
				ResourceName:            addr,
				ImportState:             true,
				ImportStateId:           pool + "/" + name,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"hostname", "user", "network", "shared_folders", "write_files"},
			},
			// Editing the user data updates the seed in place: same id, new
			// checksum and instance id, no surprise replacement.
			{
				Config: seedConfig(pool, name, `  user_data = "#cloud-config\nruncmd:\n  - echo extra\n"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(pool+"/"+name)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkOnHost,
					userDataOnHost(regexp.MustCompile(`(?s)multipart/mixed.*echo extra.*hello from kohaku`)),
				),
			},
		},
	})
}

// A volume deleted or changed out of band is noticed by the next plan.
func TestAccSeed_drift(t *testing.T) {
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	name := "kohaku-acc-seed-drift.iso"
	addr := "kohaku_seed.test"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkVolumeGone(t, pool, name),
		Steps: []resource.TestStep{
			{Config: seedConfig(pool, name, "")},
			{
				// Deleted out of band: the plan creates it again.
				PreConfig: func() {
					if out, err := virsh(t, "vol-delete", "--pool", pool, name); err != nil {
						t.Fatalf("virsh vol-delete: %v\n%s", err, out)
					}
				},
				Config: seedConfig(pool, name, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
				}},
			},
			{
				// Content changed out of band (same size): the plan uploads the
				// right content again.
				PreConfig: func() {
					iso := downloadWithVirsh(t, pool, name)
					copy(iso[len(iso)-4096:], strings.Repeat("X", 16))
					f := filepath.Join(t.TempDir(), "tampered.iso")
					if err := os.WriteFile(f, iso, 0o600); err != nil {
						t.Fatal(err)
					}
					if out, err := virsh(t, "vol-upload", "--pool", pool, name, f); err != nil {
						t.Fatalf("virsh vol-upload: %v\n%s", err, out)
					}
				},
				Config: seedConfig(pool, name, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
			},
			{
				// As documented: a refresh reads what follows the ISO's
				// 32 KiB system area, which the guest never reads, so a
				// change confined to it plans nothing.
				PreConfig: func() {
					iso := downloadWithVirsh(t, pool, name)
					copy(iso[1024:], strings.Repeat("X", 16))
					f := filepath.Join(t.TempDir(), "system-area.iso")
					if err := os.WriteFile(f, iso, 0o600); err != nil {
						t.Fatal(err)
					}
					if out, err := virsh(t, "vol-upload", "--pool", pool, name, f); err != nil {
						t.Fatalf("virsh vol-upload: %v\n%s", err, out)
					}
				},
				Config:   seedConfig(pool, name, ""),
				PlanOnly: true,
			},
		},
	})
}

// A volume Kohaku did not create is never overwritten, and a missing pool
// leaves nothing behind.
func TestAccSeed_refusesForeignVolumeAndMissingPool(t *testing.T) {
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	name := "kohaku-acc-seed-foreign.iso"
	if out, err := virsh(t, "vol-create-as", pool, name, "1024"); err != nil {
		t.Fatalf("virsh vol-create-as: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := virsh(t, "vol-delete", "--pool", pool, name); err != nil {
			t.Logf("cleanup: virsh vol-delete %s/%s: %v\n%s", pool, name, err, out)
		}
	})
	before := downloadWithVirsh(t, pool, name)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config:      seedConfig(pool, name, ""),
				ExpectError: regexp.MustCompile(`(?s)already has a volume named\s+"kohaku-acc-seed-foreign\.iso".*did not\s+create`),
			},
			{
				Config:      seedConfig("kohaku-acc-no-such-pool", "kohaku-acc-seed-nopool.iso", ""),
				ExpectError: regexp.MustCompile(`(?s)storage\s+pool\s+not\s+found:\s+the\s+host\s+has\s+no\s+pool\s+"kohaku-acc-no-such-pool".*kohaku-acc`),
			},
		},
	})
	if after := downloadWithVirsh(t, pool, name); string(after) != string(before) {
		t.Errorf("the foreign volume was modified")
	}
}

// user_data_wo never reaches state, yet a change to it is still planned.
func TestAccSeed_writeOnlyUserData(t *testing.T) {
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	name := "kohaku-acc-seed-wo.iso"
	addr := "kohaku_seed.test"
	secret := "s3cr3t-token-7f2a9"
	cfg := func(v string) string {
		return seedConfig(pool, name, fmt.Sprintf(`  user_data_wo = "#cloud-config\nwrite_files:\n  - path: /root/token\n    content: %s\n"`, v))
	}
	noSecretInState := func(s *terraform.State) error {
		for k, v := range s.RootModule().Resources[addr].Primary.Attributes {
			if strings.Contains(v, secret) {
				return fmt.Errorf("state attribute %s holds the write-only secret", k)
			}
		}
		iso := downloadWithVirsh(t, pool, name)
		if !strings.Contains(string(iso), secret) {
			return fmt.Errorf("the seed on the host does not carry the write-only user data")
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkVolumeGone(t, pool, name),
		Steps: []resource.TestStep{
			{
				Config: cfg(secret),
				Check: resource.ComposeAggregateTestCheckFunc(noSecretInState,
					resource.TestCheckNoResourceAttr(addr, "user_data_sha256")),
			},
			{Config: cfg(secret), PlanOnly: true},
			{
				Config: cfg(secret + "-rotated"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
			},
		},
	})
}

func phoneHomeProvider(uri string) string {
	return fmt.Sprintf(`provider "kohaku" {
  uri = %q
  phone_home = {
    listen_address = "127.0.0.1:8787"
    base_url       = "http://10.0.2.2:8787"
  }
}
`, uri)
}

// A phone-home seed gets its own secret token at create, keeps it across
// plans, and carries the URL in the ISO where kohaku_vm will look for it.
func TestAccSeed_phoneHome(t *testing.T) {
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	name := "kohaku-acc-seed-ph.iso"
	addr := "kohaku_seed.test"
	cfg := phoneHomeProvider(acctest.URI(t)) + fmt.Sprintf(`
resource "kohaku_seed" "test" {
  name       = %q
  pool       = %q
  phone_home = true
}
`, name, pool)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkVolumeGone(t, pool, name),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestMatchResourceAttr(addr, "phone_home_url", regexp.MustCompile(`^http://10\.0\.2\.2:8787/v1/phone-home/[A-Za-z0-9_-]{43}$`)),
					func(s *terraform.State) error {
						want := s.RootModule().Resources[addr].Primary.Attributes["phone_home_url"]
						in, err := seed.Inspect(downloadWithVirsh(t, pool, name))
						if err != nil {
							return err
						}
						if in.PhoneHomeURL != want {
							return fmt.Errorf("the ISO phones home to %q, state says %q", in.PhoneHomeURL, want)
						}
						return nil
					},
				),
			},
			{Config: cfg, PlanOnly: true},
		},
	})
}
