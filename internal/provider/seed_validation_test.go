package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// Bad seed input fails at plan time, naming the attribute, with no host:
// the provider points at a socket that does not exist, so any dial would
// fail with a different error.
func TestSeedRejectsBadInputAtPlan(t *testing.T) {
	t.Parallel()
	cases := map[string]acctest.PlanError{
		"bad mac": {
			Body: `network = [{ mac = "52:54:00:zz:00:01", dhcp4 = true }]`,
			Want: `(?s)network\[0\]\.mac.*52:54:00:zz:00:01`,
		},
		"bad cidr": {
			Body: `network = [{ addresses = ["10.0.2.300/24"] }]`,
			Want: `(?s)network\[0\]\.addresses\[0\].*10\.0\.2\.300/24`,
		},
		"gateway outside subnet": {
			Body: `network = [{ addresses = ["10.0.2.15/24"], gateway4 = "192.168.1.1" }]`,
			Want: `(?s)network\[0\]\.gateway4.*192\.168\.1\.1`,
		},
		"invalid cloud-config yaml": {
			Body: `user_data = "#cloud-config\nruncmd:\n  - echo ok\n   bad: [\n"`,
			Want: `(?s)user_data.*line \d+`,
		},
		"network and network_config": {
			Body: `
  network        = [{ dhcp4 = true }]
  network_config = "version: 2\n"`,
			Want: `(?s)network_config`,
		},
		"unknown format": {
			Body: `format = "iso"`,
			Want: `(?s)format.*value must be one of`,
		},
		"two kinds of user data": {
			Body: `
  user_data        = "#cloud-config\n"
  user_data_base64 = "I2Nsb3VkLWNvbmZpZwo="`,
			Want: `(?s)user_data`,
		},
		"plain password": {
			Body: `users = [{ name = "alice" }, { name = "bob", password_hash = "hunter2" }]`,
			Want: `(?s)users\[1\]\.password_hash.*not a crypt\(3\) hash.*mkpasswd`,
		},
		"plain write-only password": {
			Body: `user = { name = "kohaku", password_hash_wo = "hunter2" }`,
			Want: `(?s)user\.password_hash.*not a crypt\(3\) hash`,
		},
		"both password forms": {
			Body: `users = [{ name = "bob", password_hash = "$6$a$b", password_hash_wo = "$6$a$b" }]`,
			Want: `(?s)Invalid Attribute Combination.*users\[0\]\.password_hash_wo.*users\[0\]\.password_hash`,
		},
		"account twice": {
			Body: `
  user  = { name = "kohaku" }
  users = [{ name = "kohaku" }]`,
			Want: `(?s)users\[0\]\.name.*already declared by user`,
		},
		"unknown time zone": {
			Body: `timezone = "Europe/Atlantis"`,
			Want: `(?s)timezone.*Europe/Atlantis.*tz database.*Europe/Berlin`,
		},
		"bad locale": {
			Body: `locale = "English"`,
			Want: `(?s)locale.*en_US\.UTF-8`,
		},
		"package with a space": {
			Body: `packages = ["htop", "jq curl"]`,
			Want: `(?s)packages\[1\].*not a package name`,
		},
		"relative mount point": {
			Body: `shared_folders = [{ tag = "kohaku_shared", path = "shared" }]`,
			Want: `(?s)shared_folders\[0\]\.path`,
		},
	}
	acctest.ExpectPlanErrors(t, protoV6Providers, badSeed, cases)
}

func TestSeedPhoneHomeNeedsProviderBlock(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: providerBlock("qemu:///system?socket=/nonexistent/kohaku.sock") + `
resource "kohaku_seed" "ph" {
  name       = "ph-seed.iso"
  phone_home = true
}
`,
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)Phone home needs the provider's phone_home block.*base_url`),
		}},
	})
}

func TestProviderRejectsUnusablePhoneHome(t *testing.T) {
	t.Parallel()
	for want, block := range map[string]string{
		`(?s)listens on every address.*set\s+phone_home.base_url`: `phone_home = { listen_address = "0.0.0.0:8787" }`,
		`(?s)with a fixed port`:                                   `phone_home = { listen_address = "127.0.0.1:0" }`,
		`(?s)without a path`:                                      `phone_home = { base_url = "http://10.0.2.2:8787/hook" }`,
	} {
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: protoV6Providers,
			Steps: []resource.TestStep{{
				Config:      "provider \"kohaku\" {\n  " + block + "\n}\nresource \"kohaku_seed\" \"x\" {\n  name = \"x.iso\"\n}\n",
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(want),
			}},
		})
	}
}

// badSeed is a seed whose body plan is to refuse, on a provider whose
// socket does not exist: a plan that dialed would fail differently.
func badSeed(body string) string {
	return providerBlock("qemu:///system?socket=/nonexistent/kohaku.sock") + `
resource "kohaku_seed" "bad" {
  name = "bad-seed.iso"
  ` + body + `
}
`
}
