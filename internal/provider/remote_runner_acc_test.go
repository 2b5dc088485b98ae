package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"golang.org/x/crypto/ssh"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// These tests run the way a Terraform Cloud worker does: HOME is an empty
// directory (no ~/.ssh, no ~/.pki), no ssh-agent, no TLS file at any path
// libvirt's client looks at; every credential arrives as a Terraform
// variable or an environment variable. terraform-plugin-testing serves the
// provider in this process, so t.Setenv isolates the provider itself.

// remoteRunner empties HOME and the agent and returns the TRACE log file
// the provider and Terraform write to.
func remoteRunner(t *testing.T) string {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("SSH_AUTH_SOCK", "")
	os.Unsetenv("SSH_AUTH_SOCK")
	for _, f := range []string{"/etc/pki/CA/cacert.pem", "/etc/pki/libvirt/clientcert.pem", "/etc/pki/libvirt/private/clientkey.pem"} {
		if _, err := os.Stat(f); err == nil {
			t.Fatalf("%s exists: this test must prove that no TLS file is needed, so none may be at a default path", f)
		}
	}
	log := filepath.Join(t.TempDir(), "trace.log")
	t.Setenv("TF_ACC_LOG_PATH", log)
	return log
}

// tlsValues reads a libvirt client PKI directory: the values a remote
// runner holds as variables.
func tlsValues(t *testing.T, pki string) config.Variables {
	t.Helper()
	vars := config.Variables{}
	for name, file := range map[string]string{"ca_cert": "cacert.pem", "client_cert": "clientcert.pem", "client_key": "clientkey.pem"} {
		b, err := os.ReadFile(filepath.Join(pki, file))
		if err != nil {
			t.Fatal(err)
		}
		vars[name] = config.StringVariable(string(b))
	}
	vars["tls_uri"] = config.StringVariable(acctest.Env(t, "KOHAKU_TEST_TLS_URI"))
	return vars
}

// sshValues puts the loopback sshd's client key and host key into the
// environment, as a runner's variable set does.
func sshValues(t *testing.T, sshd *acctest.SSHD, hostKey string) (uri string, secret string) {
	t.Helper()
	key, err := os.ReadFile(sshd.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envSSHPrivateKey, string(key))
	t.Setenv(envSSHHostKey, hostKey)
	return fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port), string(key)
}

// remoteProviders is the provider block of a remote run: the ssh host's
// credentials come from KOHAKU_SSH_*, the tls host's (a host of the hosts
// map) from variables. Not a provider alias: terraform-plugin-testing serves
// one in-process provider to every alias, so the last alias configured
// would win for all (in real use each alias is a process of its own).
const remoteProviders = `
variable "ssh_uri" { type = string }
variable "tls_uri" { type = string }
variable "ca_cert" { type = string }
variable "client_cert" { type = string }
variable "client_key" {
  type      = string
  sensitive = true
}

provider "kohaku" {
  uri = var.ssh_uri
  ssh = { use_agent = false }

  hosts = {
    tls = {
      uri = var.tls_uri
      tls = {
        ca_cert     = var.ca_cert
        client_cert = var.client_cert
        client_key  = var.client_key
      }
    }
  }
}
`

// noSecretIn fails when the log holds a line of a PEM secret, and also when
// the log is empty (then it proves nothing).
func noSecretIn(log string, secrets ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		b, err := os.ReadFile(log)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "kohaku configured") {
			return fmt.Errorf("the TRACE log %s has no provider line: it cannot show that secrets stay out", log)
		}
		for _, s := range secrets {
			for _, l := range keyLines(s) {
				if strings.Contains(string(b), l) {
					return fmt.Errorf("the TRACE log %s contains key material", log)
				}
			}
		}
		return nil
	}
}

// One guest: the VM on the ssh host, the tiny test guest, boots and
// reports ready over the libvirt channel carried by SSH, for its own seed.
// (That a cloud-init guest becomes ready, configured as declared, over
// qemu+ssh is TestAccReady_channel's; here what matters is the credentials
// given as values, with no file on disk.) On the tls host a seed is
// uploaded and a VM defined but not started: the apply, the read of the host
// data source and the empty plan after it prove the connection.
func TestAccRemoteRunner_noFiles(t *testing.T) {
	env := acctest.NewVMEnv(t)
	sshd := acctest.StartSSHD(t)
	log := remoteRunner(t)
	hostKey := strings.SplitN(sshd.KnownHostsLine, " ", 2)[1] // the bare public key
	sshURI, sshKey := sshValues(t, sshd, hostKey)
	vars := tlsValues(t, acctest.Env(t, "KOHAKU_TEST_TLS_PKI"))
	vars["ssh_uri"] = config.StringVariable(sshURI)
	prefix := vmTestPrefix(t, env, "w20rr")
	cfg := remoteProviders +
		tinyGuest(t, env.Pool, "ssh", "ssh", prefix+"s-seed.iso", prefix+"s-vm", "tiny-ssh", "  timeouts {\n    create = \"15m\"\n  }\n") +
		readyResources(env, prefix+"t-", t.TempDir(), "tls", "", `  host = "tls"`, "  running  = false\n  wait_for = \"none\"\n  host     = \"tls\"") + `
data "kohaku_host" "tls" {
  host = "tls"
}
`
	keyPEM, _ := os.ReadFile(filepath.Join(acctest.Env(t, "KOHAKU_TEST_TLS_PKI"), "clientkey.pem"))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:          cfg,
				ConfigVariables: vars,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("kohaku_vm.ssh", tfjsonpath.New("guest").AtMapKey("ready_via"), knownvalue.StringExact("channel")),
					statecheck.ExpectKnownValue("kohaku_vm.ssh", tfjsonpath.New("guest").AtMapKey("hostname"), knownvalue.StringExact("tiny-ssh")),
					statecheck.CompareValuePairs("kohaku_vm.ssh", tfjsonpath.New("guest").AtMapKey("instance_id"),
						"kohaku_seed.ssh", tfjsonpath.New("instance_id"), compare.ValuesSame()),
					statecheck.ExpectKnownValue("kohaku_vm.tls", tfjsonpath.New("running"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.kohaku_host.tls", tfjsonpath.New("uri"), knownvalue.StringExact(acctest.Env(t, "KOHAKU_TEST_TLS_URI"))),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					acctest.CheckDomState(env, prefix+"s-vm", "running"),
					acctest.CheckDomState(env, prefix+"t-vm", "shut off"),
					func(*terraform.State) error {
						if _, err := os.Stat(filepath.Join(os.Getenv("HOME"), ".ssh")); err == nil {
							return fmt.Errorf("something wrote ~/.ssh during a run with a pinned host key")
						}
						return nil
					},
					noSecretIn(log, sshKey, string(keyPEM)),
				),
			},
			{
				// Reading both hosts again over SSH and TLS: nothing
				// changed (PlanOnly fails on a non-empty plan).
				Config:          cfg,
				ConfigVariables: vars,
				PlanOnly:        true,
			},
		},
	})
}

// A host key value that is not the server's: refused, with the fingerprint
// the server showed.
func TestAccRemoteRunner_wrongHostKey(t *testing.T) {
	acctest.URI(t)
	sshd := acctest.StartSSHD(t)
	log := remoteRunner(t)
	// Another key pinned: the public half of a key the server does not have.
	other, err := ssh.ParsePrivateKey([]byte(readFile(t, sshd.WriteOtherKey(t))))
	if err != nil {
		t.Fatal(err)
	}
	uri, key := sshValues(t, sshd, string(ssh.MarshalAuthorizedKey(other.PublicKey())))
	seen, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.SplitN(sshd.KnownHostsLine, " ", 2)[1]))
	if err != nil {
		t.Fatal(err)
	}
	fp := ssh.FingerprintSHA256(seen)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      providerBlock(uri) + `data "kohaku_host" "this" {}`,
			ExpectError: regexp.MustCompile(`(?s)SSH host key of\s+127\.0\.0\.1:\d+\s+\(ssh-ed25519\s+` + regexp.QuoteMeta(fp) + `\)\s+does\s+NOT\s+match\s+ssh\.host_key`),
		}},
	})
	if err := noSecretIn(log, key)(nil); err != nil {
		t.Error(err)
	}
}

// A client certificate libvirtd does not trust, given as values: the
// diagnostic says libvirtd refused it and names the value and its subject.
func TestAccRemoteRunner_strangerClientCert(t *testing.T) {
	acctest.URI(t)
	log := remoteRunner(t)
	stranger := acctest.Env(t, "KOHAKU_TEST_TLS_STRANGER_PKI")
	vars := tlsValues(t, stranger)
	good := tlsValues(t, acctest.Env(t, "KOHAKU_TEST_TLS_PKI"))
	vars["ca_cert"] = good["ca_cert"] // trust the server: only our certificate is wrong
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: `
variable "tls_uri" { type = string }
variable "ca_cert" { type = string }
variable "client_cert" { type = string }
variable "client_key" {
  type      = string
  sensitive = true
}
provider "kohaku" {
  uri = var.tls_uri
  tls = {
    ca_cert     = var.ca_cert
    client_cert = var.client_cert
    client_key  = var.client_key
  }
}
data "kohaku_host" "this" {}
`,
			ConfigVariables: vars,
			ExpectError:     regexp.MustCompile(`(?s)transport tls.*libvirtd\s+refused\s+the\s+client\s+certificate\s+tls\.client_cert\s+\(subject\s+CN=kohaku-stranger.*ca_file`),
		}},
	})
	if err := noSecretIn(log, readFile(t, filepath.Join(stranger, "clientkey.pem")))(nil); err != nil {
		t.Error(err)
	}
}

func readFile(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
