package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// With Terraform and the provider both logging at TRACE, the phone-home
// token, user data and password hashes never reach the logs.
func TestAccSeed_secretsStayOutOfTraceLogs(t *testing.T) {
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	logs := t.TempDir()
	t.Setenv("TF_ACC_LOG", "TRACE") // Terraform CLI
	t.Setenv("TF_LOG", "TRACE")     // the provider under test, run in-process
	t.Setenv("TF_LOG_PATH_MASK", filepath.Join(logs, "%s.log"))
	name := "kohaku-acc-seed-secrets.iso"
	woSecret := "wo-secret-5e1f0c"
	udSecret := "ud-secret-93ab7d"
	hashSecret := "$6$rounds=4096$trace$h4shS3cr3tNeverLogged0123456789abcdefABCDEF./"
	storedHash := "$6$rounds=4096$trace$st0redH4shS3cr3t0123456789abcdefABCDEF./"
	var token string
	// Secrets come in through variables, as they would in real use (the
	// test harness itself logs the configuration text).
	cfg := phoneHomeProvider(acctest.URI(t)) + fmt.Sprintf(`
variable "wo" {
  type      = string
  sensitive = true
  ephemeral = true
}
variable "vendor" {
  type      = string
  sensitive = true
}
variable "hash" {
  type      = string
  sensitive = true
  ephemeral = true
}
variable "stored_hash" {
  type      = string
  sensitive = true
}
resource "kohaku_seed" "test" {
  name         = %q
  pool         = %q
  phone_home   = true
  user_data_wo = "#cloud-config\nwrite_files:\n  - path: /root/wo\n    content: ${var.wo}\n"
  vendor_data  = "#cloud-config\nruncmd:\n  - echo ${var.vendor}\n"
  users = [
    { name = "alice", password_hash_wo = var.hash },
    { name = "bob", password_hash = var.stored_hash },
  ]
}
`, name, pool)
	vars := config.Variables{"wo": config.StringVariable(woSecret), "vendor": config.StringVariable(udSecret),
		"hash": config.StringVariable(hashSecret), "stored_hash": config.StringVariable(storedHash)}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkVolumeGone(t, pool, name),
		Steps: []resource.TestStep{
			{
				Config:          cfg,
				ConfigVariables: vars,
				Check: func(s *terraform.State) error {
					u := s.RootModule().Resources["kohaku_seed.test"].Primary.Attributes["phone_home_url"]
					token = u[strings.LastIndex(u, "/")+1:]
					return nil
				},
			},
			{Config: cfg, ConfigVariables: vars, PlanOnly: true},
		},
	})
	if len(token) < 40 {
		t.Fatalf("no phone-home token to look for (%q)", token)
	}
	files, _ := filepath.Glob(filepath.Join(logs, "*"))
	var total int
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
		all.Write(b)
		for what, secret := range map[string]string{"the phone-home token": token, "write-only user data": woSecret, "vendor data": udSecret,
			"a write-only password hash": hashSecret, "a password hash": storedHash} {
			if i := strings.Index(string(b), secret); i >= 0 {
				lo := max(0, i-300)
				t.Errorf("%s appears in %s:\n...%s...", what, filepath.Base(f), b[lo:min(len(b), i+100)])
			}
		}
	}
	if !strings.Contains(all.String(), "uploading seed") {
		t.Errorf("the provider's own log lines are not in the logs searched")
	}
	if total < 10000 {
		t.Fatalf("only %d bytes of TRACE logs in %d files: the test would prove nothing", total, len(files))
	}
	t.Logf("searched %d bytes of TRACE logs in %d files", total, len(files))
}
