package hostconn

import "time"

// TLSSettings are the options of the tls transport; they win over the URI's
// pkipath and no_verify parameters.
type TLSSettings struct {
	// PKIPath is a directory holding cacert.pem, clientcert.pem and clientkey.pem.
	PKIPath string
	// NoVerify skips verification of the server certificate (insecure).
	NoVerify bool
	// NoVerifySet says NoVerify was given explicitly: then it wins over
	// the URI's no_verify, false included.
	NoVerifySet bool
	// CACert, ClientCert and ClientKey are PEM text; each set one is used
	// instead of its file (tls.go). ClientKey is never logged.
	CACert, ClientCert, ClientKey string
}

// Settings describe one libvirt host connection.
type Settings struct {
	URI string
	// DialTimeout bounds dialing and the libvirt handshake.
	DialTimeout time.Duration
	// CallTimeout bounds each libvirt call. A call that exceeds it means the
	// daemon is hung: the connection is dropped and the next call redials.
	CallTimeout time.Duration
	SSH         SSHSettings
	TLS         TLSSettings
}

// Host key policies, named as libvirt names its known_hosts_verify URI parameter.
const (
	// HostKeyNormal refuses hosts that are not in known_hosts (the default).
	HostKeyNormal = "normal"
	// HostKeyAuto trusts a host on first use and records its key.
	HostKeyAuto = "auto"
	// HostKeyIgnore skips host key checks entirely (insecure, explicit opt-out).
	HostKeyIgnore = "ignore"
)

// SSHSettings are the options of the ssh transport. Values set here win over
// the URI's query parameters of the same meaning.
type SSHSettings struct {
	// KeyFile is a private key to offer (URI parameter keyfile). When empty,
	// the usual ~/.ssh/id_* files that exist are offered.
	KeyFile string
	// KnownHostsFile is checked for the host's key (URI parameter known_hosts).
	// Default ~/.ssh/known_hosts.
	KnownHostsFile string
	// KnownHostsVerify is normal, auto or ignore (URI parameter known_hosts_verify).
	KnownHostsVerify string
	// DisableAgent stops Kohaku from asking the agent at SSH_AUTH_SOCK for keys.
	DisableAgent bool
	// Password is tried after keys when set. It is never logged.
	Password string
	// PrivateKey is a private key as text (PEM or OpenSSH format). When set,
	// it is offered instead of any key file; it is never logged.
	PrivateKey string
	// PrivateKeyPassphrase decrypts PrivateKey when it is encrypted.
	PrivateKeyPassphrase string
	// HostKey pins the host's key: public key or known_hosts lines as text.
	// When set, no known_hosts file is read or written.
	HostKey string
}
