package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// User data cloud-init would ignore and SSH keys sshd would not read are
// refused at plan, with the attribute path, what is wrong and an example,
// and no host (the socket does not exist, so a dial would fail differently).
func TestSeedRefusesIgnoredInputAtPlan(t *testing.T) {
	t.Parallel()
	cases := map[string]acctest.PlanError{
		"user_data that is no cloud-init format": {
			Body: `user_data = "hello world"`,
			Want: `(?s)user_data: starts with "hello world", which is none of the formats cloud-init\s+accepts.*For\s+example:`,
		},
		"user_data_base64 that is no cloud-init format": {
			Body: `user_data_base64 = base64encode("runcmd:\n  - echo hi\n")`,
			Want: `(?s)user_data_base64: starts with "runcmd:".*cloud-init would ignore it.*For\s+example:`,
		},
		"gzip user_data_base64 of plain words": {
			Body: `user_data_base64 = base64gzip("hello world")`,
			Want: `(?s)user_data_base64: is gzip whose content starts with "hello world"`,
		},
		"write-only user data that is no cloud-init format": {
			Body: `user_data_wo = "#upstart-job\nstart on startup\n"`,
			Want: `(?s)user_data_wo: starts with "#upstart-job".*no longer\s+handled`,
		},
		"ssh key that is not a key": {
			Body: `user = { name = "kohaku", ssh_authorized_keys = ["not a key"] }`,
			Want: `(?s)user\.ssh_authorized_keys\[0\]: is not an OpenSSH public key.*For\s+example:\s+"ssh-ed25519`,
		},
		"private key given as a public key": {
			Body: `user = { name = "kohaku", ssh_authorized_keys = ["-----BEGIN OPENSSH PRIVATE KEY-----"] }`,
			Want: `(?s)user\.ssh_authorized_keys\[0\]: is a private key`,
		},
		"gateway outside the subnets (kept)": {
			Body: `network = [{ addresses = ["10.0.2.15/24"], gateway4 = "10.0.3.1" }]`,
			Want: `(?s)network\[0\]\.gateway4.*10\.0\.3\.1`,
		},
	}
	acctest.ExpectPlanErrors(t, protoV6Providers, badSeed, cases)
}

// The same checks accept what cloud-init and sshd accept.
func TestSeedAcceptsCloudInitFormatsAtPlan(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: providerBlock("qemu:///system?socket=/nonexistent/kohaku.sock") + `
resource "kohaku_seed" "ok" {
  name             = "ok-seed.iso"
  user_data_base64 = base64gzip("## template: jinja\n#cloud-config\nhostname: {{ v1.local_hostname }}\n")
  user = {
    name                = "kohaku"
    ssh_authorized_keys = ["from=\"10.0.0.0/8\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ docs@example"]
  }
}
`,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
	})
}
