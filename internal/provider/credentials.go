package provider

import (
	"fmt"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
)

// Credentials as values, for runs with no files on disk (Terraform Cloud and
// other remote runners). Each value can also come from an environment
// variable; those apply to the default host only: a hosts entry names its
// own credentials (a key pinned for one host is wrong for every other), and
// HCL can pass the same variable to several entries.
const (
	envSSHPrivateKey = "KOHAKU_SSH_PRIVATE_KEY"
	envSSHPassphrase = "KOHAKU_SSH_PRIVATE_KEY_PASSPHRASE"
	envSSHHostKey    = "KOHAKU_SSH_HOST_KEY"
	envTLSCACert     = "KOHAKU_TLS_CA_CERT"
	envTLSClientCert = "KOHAKU_TLS_CLIENT_CERT"
	envTLSClientKey  = "KOHAKU_TLS_CLIENT_KEY"
)

// sshEnvNote and tlsEnvNote end the ssh and tls descriptions: each names
// the environment variables of its own transport.
const sshEnvNote = "the environment variables `" + envSSHPrivateKey + "`, `" + envSSHPassphrase + "` and `" +
	envSSHHostKey + "` supply them for the default host when the block does not set them or their file " +
	"counterparts (they do not apply to `hosts` entries). " + valuesOverFiles

const tlsEnvNote = "the environment variables `" + envTLSCACert + "`, `" + envTLSClientCert + "` and `" +
	envTLSClientKey + "` supply them for the default host when the block does not set them or their file " +
	"counterparts (they do not apply to `hosts` entries). " + valuesOverFiles

const valuesOverFiles = "Values win over files; a value and its file counterpart in the same block are " +
	"refused at validate (`terraform validate`, and so every plan), naming both."

// sibling points a validator at another attribute of the same block.
func sibling(name string) path.Expression { return path.MatchRelative().AtParent().AtName(name) }

// unset is true for a null attribute; unknown counts as set.
func unset(v types.String) bool { return v.IsNull() }

// envSources maps an attribute ("ssh.private_key") to the environment
// variable its value came from, for diagnostics.
type envSources map[string]string

// fromEnv fills v (attribute attr) from the environment variable when it
// is unset.
func (src envSources) fromEnv(v *types.String, attr, env string) {
	if e := os.Getenv(env); e != "" && unset(*v) {
		*v = types.StringValue(e)
		src[attr] = env
	}
}

// ssh applies the KOHAKU_SSH_* variables to the default host's ssh
// block where neither the value nor its file counterpart is set.
func (src envSources) ssh(m *sshModel) *sshModel {
	if m == nil {
		m = &sshModel{
			KeyFile: types.StringNull(), KnownHostsFile: types.StringNull(), KnownHostsVerify: types.StringNull(),
			UseAgent: types.BoolNull(), Password: types.StringNull(),
			PrivateKey: types.StringNull(), KeyPassphrase: types.StringNull(), HostKey: types.StringNull(),
		}
	}
	if unset(m.KeyFile) {
		src.fromEnv(&m.PrivateKey, "ssh.private_key", envSSHPrivateKey)
		src.fromEnv(&m.KeyPassphrase, "ssh.private_key_passphrase", envSSHPassphrase)
	}
	if unset(m.KnownHostsFile) && unset(m.KnownHostsVerify) {
		src.fromEnv(&m.HostKey, "ssh.host_key", envSSHHostKey)
	}
	return m
}

// tls applies the KOHAKU_TLS_* variables to the default host's tls
// block where neither the value nor pki_path is set.
func (src envSources) tls(m *tlsModel) *tlsModel {
	if m == nil {
		m = &tlsModel{PKIPath: types.StringNull(), NoVerify: types.BoolNull(),
			CACert: types.StringNull(), ClientCert: types.StringNull(), ClientKey: types.StringNull()}
	}
	if !unset(m.PKIPath) {
		return m
	}
	if !m.NoVerify.ValueBool() {
		src.fromEnv(&m.CACert, "tls.ca_cert", envTLSCACert)
	}
	src.fromEnv(&m.ClientCert, "tls.client_cert", envTLSClientCert)
	src.fromEnv(&m.ClientKey, "tls.client_key", envTLSClientKey)
	return m
}

// checkCredentials parses every credential given as a value before any
// dial, so a bad one fails at plan with its attribute path. No diagnostic
// holds key material.
func checkCredentials(cfg *providerModel, src envSources) diag.Diagnostics {
	var diags diag.Diagnostics
	// name is how a diagnostic names an attribute: its path, and the
	// environment variable when the value came from one.
	name := func(p path.Path) string {
		if env, ok := src[p.String()]; ok {
			return p.String() + " (from " + env + ")"
		}
		return p.String()
	}
	check := func(root path.Path, s *sshModel, t *tlsModel) {
		if s != nil {
			p := root.AtName("ssh")
			for name, v := range map[string]types.String{"private_key": s.PrivateKey, "private_key_passphrase": s.KeyPassphrase, "host_key": s.HostKey} {
				if v.IsUnknown() {
					diags.AddAttributeError(p.AtName(name), "Credential is not known yet",
						"Kohaku needs its connection credentials to plan: set "+name+" from a variable or a value known at plan time, not from a resource's result.")
				}
			}
			if s.PrivateKey.ValueString() != "" {
				if err := hosts.CheckPrivateKey(name(p.AtName("private_key")), s.PrivateKey.ValueString(), s.KeyPassphrase.ValueString()); err != nil {
					diags.AddAttributeError(p.AtName("private_key"), "Invalid SSH private key", err.Error())
				}
			} else if s.KeyPassphrase.ValueString() != "" {
				diags.AddAttributeError(p.AtName("private_key_passphrase"), "Passphrase without a private key",
					fmt.Sprintf("private_key_passphrase decrypts private_key (or %s), and neither is set. Set "+
						"private_key, or remove the passphrase (keys in key_file files with a passphrase go "+
						"into ssh-agent).", envSSHPrivateKey))
			}
			if s.HostKey.ValueString() != "" {
				if err := hosts.CheckHostKeys(name(p.AtName("host_key")), s.HostKey.ValueString()); err != nil {
					diags.AddAttributeError(p.AtName("host_key"), "Invalid SSH host key", err.Error())
				}
			}
		}
		if t != nil {
			p := root.AtName("tls")
			for name, v := range map[string]types.String{"ca_cert": t.CACert, "client_cert": t.ClientCert, "client_key": t.ClientKey} {
				if v.IsUnknown() {
					diags.AddAttributeError(p.AtName(name), "Credential is not known yet",
						"Kohaku needs its connection credentials to plan: set "+name+" from a variable or a value known at plan time, not from a resource's result.")
				}
			}
			if (t.ClientCert.ValueString() == "") != (t.ClientKey.ValueString() == "") {
				diags.AddAttributeError(p, "Client certificate without its key",
					fmt.Sprintf("client_cert and client_key (or %s and %s) go together: set both, or neither to use the files.", envTLSClientCert, envTLSClientKey))
			}
			if err := hosts.CheckTLSMaterial(p.String()+".", t.CACert.ValueString(), t.ClientCert.ValueString(), t.ClientKey.ValueString()); err != nil {
				detail := err.Error()
				for _, a := range []string{"tls.ca_cert", "tls.client_cert", "tls.client_key"} {
					if env, ok := src[a]; ok && p.String() == "tls" {
						detail += fmt.Sprintf(" (%s came from %s)", a, env)
					}
				}
				diags.AddAttributeError(p, "Invalid TLS credentials", detail)
			}
		}
	}
	check(path.Empty(), cfg.SSH, cfg.TLS)
	for name, h := range cfg.Hosts {
		check(path.Root("hosts").AtMapKey(name), h.SSH, h.TLS)
	}
	return diags
}
