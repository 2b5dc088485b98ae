package provider

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"golang.org/x/crypto/ssh"
)

// newSSHKeyText returns a fresh ed25519 private key as OpenSSH text,
// encrypted with passphrase when it is set.
func newSSHKeyText(t *testing.T, passphrase string) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var blk *pem.Block
	if passphrase == "" {
		blk, err = ssh.MarshalPrivateKey(priv, "")
	} else {
		blk, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(blk))
}

// keyLines are the base64 lines of a PEM text: what no output may contain.
func keyLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if len(l) > 16 && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// Bad or conflicting credentials are refused at plan, before any dial,
// naming the attribute (or the environment variable) and holding no key
// material. None of these needs a libvirt host.
func TestProviderRefusesBadCredentials(t *testing.T) {
	key := newSSHKeyText(t, "")
	encrypted := newSSHKeyText(t, "right")
	dataSource := "\ndata \"kohaku_host\" \"this\" {}\n"
	cases := map[string]struct {
		config string
		env    map[string]string
		want   string
		secret string // must not show up in the error
	}{
		"private_key and key_file": {
			config: fmt.Sprintf(`provider "kohaku" {
  uri = "qemu+ssh://root@127.0.0.1:1/system"
  ssh = {
    private_key = %q
    key_file    = "/root/.ssh/id_ed25519"
  }
}`, key),
			want: `(?s)Attribute "ssh\.(private_key|key_file)" cannot be specified when\s+"ssh\.(key_file|private_key)" is specified`, secret: key,
		},
		"host_key and known_hosts_file in a hosts entry": {
			config: `provider "kohaku" {
  uri   = "qemu:///system"
  hosts = { gpu1 = { uri = "qemu+ssh://root@gpu1/system", ssh = { host_key = "ssh-ed25519 AAAA", known_hosts_file = "/tmp/kh" } } }
}`,
			want: `(?s)Attribute "hosts\[\\"gpu1\\"\]\.ssh\.known_hosts_file" cannot be specified when\s+"hosts\[\\"gpu1\\"\]\.ssh\.host_key" is specified`,
		},
		"ca_cert and pki_path": {
			config: `provider "kohaku" {
  uri = "qemu+tls://127.0.0.1/system"
  tls = {
    ca_cert  = "-----BEGIN CERTIFICATE-----"
    pki_path = "/etc/pki/libvirt"
  }
}`,
			want: `(?s)Attribute "tls\.pki_path" cannot be specified when "tls\.ca_cert" is\s+specified`,
		},
		"client_cert without client_key": {
			config: `provider "kohaku" {
  uri = "qemu+tls://127.0.0.1/system"
  tls = { client_cert = "x" }
}`,
			want: `(?s)Attribute "tls\.client_key" must be specified when "tls\.client_cert" is\s+specified`,
		},
		"not a private key": {
			config: `provider "kohaku" {
  uri = "qemu+ssh://root@127.0.0.1:1/system"
  ssh = { private_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ1c2Vk" }
}`,
			want: `(?s)Invalid SSH private key.*ssh\.private_key is not a private key Kohaku can\s+read \(no PEM block found\).*BEGIN OPENSSH PRIVATE KEY`,
		},
		"wrong passphrase in a hosts entry": {
			config: fmt.Sprintf(`provider "kohaku" {
  uri   = "qemu:///system"
  hosts = { gpu1 = { uri = "qemu+ssh://root@gpu1/system", ssh = { private_key = %q, private_key_passphrase = "wrong" } } }
}`, encrypted),
			want: `(?s)hosts\["gpu1"\]\.ssh\.private_key.*cannot be decrypted:\s+private_key_passphrase is not its passphrase`, secret: encrypted,
		},
		"encrypted key from the environment without its passphrase": {
			config: `provider "kohaku" {
  uri = "qemu+ssh://root@127.0.0.1:1/system"
}`,
			env:  map[string]string{envSSHPrivateKey: encrypted},
			want: `(?s)ssh\.private_key \(from KOHAKU_SSH_PRIVATE_KEY\) is encrypted: set\s+private_key_passphrase \(or KOHAKU_SSH_PRIVATE_KEY_PASSPHRASE\)`, secret: encrypted,
		},
		"host key that is no key": {
			config: `provider "kohaku" {
  uri = "qemu+ssh://root@127.0.0.1:1/system"
}`,
			env:  map[string]string{envSSHHostKey: "gpu1.example.com"},
			want: `(?s)Invalid SSH host key.*ssh\.host_key \(from KOHAKU_SSH_HOST_KEY\) line 1 is neither a\s+public key nor a known_hosts line`,
		},
		"TLS key from the environment is a certificate": {
			config: `provider "kohaku" {
  uri = "qemu+tls://127.0.0.1/system"
}`,
			env:  map[string]string{envTLSClientCert: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", envTLSClientKey: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
			want: `(?s)Invalid TLS credentials.*tls\.client_cert cannot be parsed`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			want := regexp.MustCompile(tc.want)
			seen := false
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				// ExpectError cannot say "and not this": ErrorCheck checks
				// the whole error, and the test fails if there was none.
				Steps: []resource.TestStep{{Config: tc.config + dataSource, PlanOnly: true}},
				ErrorCheck: func(err error) error {
					seen = true
					// Terraform wraps long lines: match on one.
					if !want.MatchString(strings.Join(strings.Fields(err.Error()), " ")) {
						return fmt.Errorf("error does not match %s:\n%v", want, err)
					}
					for _, l := range keyLines(tc.secret) {
						if strings.Contains(err.Error(), l) {
							return fmt.Errorf("the error leaks key material:\n%v", err)
						}
					}
					return nil
				},
			})
			if !seen {
				t.Errorf("no error, want %s", want)
			}
		})
	}
}

// The environment applies to the default host only and never over a value
// or file counterpart set in the block.
func TestCredentialsFromEnv(t *testing.T) {
	t.Setenv(envSSHPrivateKey, "env key")
	t.Setenv(envSSHHostKey, "env host key")
	t.Setenv(envTLSCACert, "env ca")
	t.Setenv(envTLSClientCert, "env cert")
	t.Setenv(envTLSClientKey, "env client key")
	src := envSources{}
	s, tl := src.ssh(nil), src.tls(nil)
	if s.PrivateKey.ValueString() != "env key" || s.HostKey.ValueString() != "env host key" || tl.CACert.ValueString() != "env ca" || tl.ClientKey.ValueString() != "env client key" {
		t.Errorf("empty blocks did not take the environment: %+v %+v", s, tl)
	}
	if src["ssh.private_key"] != envSSHPrivateKey || src["tls.client_key"] != envTLSClientKey {
		t.Errorf("sources: %v", src)
	}
	src = envSources{}
	s = src.ssh(&sshModel{KeyFile: strVal("/k"), KnownHostsVerify: strVal("auto"), PrivateKey: strNull(), KeyPassphrase: strNull(), HostKey: strNull(), KnownHostsFile: strNull()})
	if !s.PrivateKey.IsNull() || !s.HostKey.IsNull() || len(src) != 0 {
		t.Errorf("the environment overrode a file setting: %+v %v", s, src)
	}
	tl = src.tls(&tlsModel{PKIPath: strVal("/pki"), CACert: strNull(), ClientCert: strNull(), ClientKey: strNull()})
	if !tl.CACert.IsNull() || !tl.ClientKey.IsNull() {
		t.Errorf("the environment overrode pki_path: %+v", tl)
	}
	s = src.ssh(&sshModel{PrivateKey: strVal("hcl key"), KeyFile: strNull(), KnownHostsFile: strNull(), KnownHostsVerify: strNull(), HostKey: strNull(), KeyPassphrase: strNull()})
	if s.PrivateKey.ValueString() != "hcl key" {
		t.Errorf("the environment overrode an HCL value")
	}
}

func strVal(s string) types.String { return types.StringValue(s) }
func strNull() types.String        { return types.StringNull() }
