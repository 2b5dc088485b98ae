package virt

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

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

// ParsePrivateKey parses a private key given as text, decrypting it with
// passphrase when it is encrypted. Its errors name attr (the setting the
// key came from) and never contain key material.
func ParsePrivateKey(attr, text, passphrase string) (ssh.Signer, error) {
	b := []byte(strings.TrimSpace(text) + "\n")
	var signer ssh.Signer
	var err error
	if passphrase != "" {
		signer, err = ssh.ParsePrivateKeyWithPassphrase(b, []byte(passphrase))
	} else {
		signer, err = ssh.ParsePrivateKey(b)
	}
	var missing *ssh.PassphraseMissingError
	switch {
	case err == nil:
		return signer, nil
	case errors.As(err, &missing):
		return nil, fmt.Errorf("%s is encrypted: set private_key_passphrase (or KOHAKU_SSH_PRIVATE_KEY_PASSPHRASE) to its passphrase", attr)
	case errors.Is(err, x509.IncorrectPasswordError) || strings.Contains(err.Error(), "decryption password incorrect"):
		return nil, fmt.Errorf("%s cannot be decrypted: private_key_passphrase is not its passphrase", attr)
	case passphrase != "" && (strings.Contains(err.Error(), "not encrypted") || strings.Contains(err.Error(), "not password protected")):
		return nil, fmt.Errorf("%s is not encrypted, but private_key_passphrase is set: remove the passphrase", attr)
	}
	return nil, fmt.Errorf("%s is not a private key Kohaku can read (%s): give the whole key text, from \"-----BEGIN OPENSSH PRIVATE KEY-----\" (or \"-----BEGIN ... PRIVATE KEY-----\") to the matching END line", attr, keyParseReason(err))
}

// keyParseReason is the parser's error without anything taken from the input.
func keyParseReason(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "no key found") {
		return "no PEM block found"
	}
	if strings.Contains(msg, "unsupported key type") {
		return "unsupported key type"
	}
	return "the key data is malformed"
}

// ParseHostKeys parses pinned host keys given as text: each non-empty line
// is a public key ("ssh-ed25519 AAAA... comment") or a known_hosts line
// ("host ssh-ed25519 AAAA..."); "#" lines are comments. Errors name attr.
func ParseHostKeys(attr, text string) ([]ssh.PublicKey, error) {
	var keys []ssh.PublicKey
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
			keys = append(keys, k)
			continue
		}
		marker, _, k, _, _, err := ssh.ParseKnownHosts([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("%s line %d is neither a public key nor a known_hosts line; give e.g. \"ssh-ed25519 AAAAC3Nz...\" (the host's /etc/ssh/ssh_host_ed25519_key.pub) or the output of ssh-keyscan", attr, i+1)
		}
		if marker == "revoked" {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no public key; give e.g. \"ssh-ed25519 AAAAC3Nz...\" (the host's /etc/ssh/ssh_host_ed25519_key.pub) or the output of ssh-keyscan", attr)
	}
	return keys, nil
}

// pinnedHostKey accepts only the given keys; it reads and writes no file.
func pinnedHostKey(attr string, keys []ssh.PublicKey) ssh.HostKeyCallback {
	return func(hostname string, _ net.Addr, key ssh.PublicKey) error {
		for _, k := range keys {
			if k.Type() == key.Type() && bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
		}
		return &HostKeyMismatchError{Host: hostname, Pinned: attr, Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type()}
	}
}

// UnknownHostKeyError says the SSH server's key is not in known_hosts.
type UnknownHostKeyError struct {
	Host, File, Fingerprint, KeyType, Line string
}

func (e *UnknownHostKeyError) Error() string {
	return fmt.Sprintf("the SSH host key of %s (%s %s) is not in %s. If that fingerprint is the host's, add this line to %s:\n  %s\nor set known_hosts_verify = \"auto\" to trust the host on first use (\"ignore\" skips the check and is insecure)",
		e.Host, e.KeyType, e.Fingerprint, e.File, e.File, e.Line)
}

// HostKeyMismatchError says the SSH server presented a key other than the recorded one.
type HostKeyMismatchError struct {
	Host, File, Fingerprint string
	// Pinned names the setting the expected key came from (ssh.host_key)
	// when it was not a known_hosts file; KeyType is then the key's type.
	Pinned, KeyType string
}

func (e *HostKeyMismatchError) Error() string {
	if e.Pinned != "" {
		return fmt.Sprintf("the SSH host key of %s (%s %s) does NOT match %s: the host was reinstalled, %s holds another host's key, or someone is intercepting the connection. If that fingerprint is the host's, set %s to its public key (/etc/ssh/ssh_host_*_key.pub on the host)",
			e.Host, e.KeyType, e.Fingerprint, e.Pinned, e.Pinned, e.Pinned)
	}
	return fmt.Sprintf("the SSH host key of %s (%s) does NOT match the one recorded in %s: the host was reinstalled or someone is intercepting the connection. Check the host, then remove its old line from %s",
		e.Host, e.Fingerprint, e.File, e.File)
}

// AuthError says the SSH server refused every credential we offered.
type AuthError struct {
	User    string
	Offered []string
	Err     error
}

func (e *AuthError) Error() string {
	offered := "nothing"
	if len(e.Offered) > 0 {
		offered = strings.Join(e.Offered, ", ")
	}
	return fmt.Sprintf("the SSH server refused user %q (offered: %s): %v. Set ssh.key_file to a key in the user's authorized_keys, load the key into ssh-agent, or put the user in the URI (qemu+ssh://USER@host/system)",
		e.User, offered, e.Err)
}

// sshDialer reaches libvirtd's unix socket on the remote host through an SSH
// "direct-streamlocal" channel: no ssh binary, nc or virt-ssh-helper needed.
type sshDialer struct {
	addr    string
	socket  string
	user    string
	timeout time.Duration
	auth    []ssh.AuthMethod
	offered []string
	check   ssh.HostKeyCallback
}

func newSSHDialer(ep Endpoint, s SSHSettings, timeout time.Duration) (*sshDialer, error) {
	d := &sshDialer{
		addr:    net.JoinHostPort(ep.Host, ep.Port),
		socket:  ep.Socket,
		user:    ep.User,
		timeout: timeout,
	}
	if d.user == "" {
		d.user = currentUser()
	}
	keyFile := firstNonEmpty(s.KeyFile, ep.Params.Get("keyfile"))
	knownHosts := expandHome(firstNonEmpty(s.KnownHostsFile, ep.Params.Get("known_hosts"), "~/.ssh/known_hosts"))
	verify := firstNonEmpty(s.KnownHostsVerify, ep.Params.Get("known_hosts_verify"), HostKeyNormal)
	if ep.Params.Get("no_verify") == "1" {
		verify = HostKeyIgnore
	}
	password := firstNonEmpty(s.Password, ep.password)

	var signers []ssh.Signer
	var keyFiles []string
	if s.PrivateKey != "" {
		signer, err := ParsePrivateKey("ssh.private_key", s.PrivateKey, s.PrivateKeyPassphrase)
		if err != nil {
			return nil, err
		}
		signers = append(signers, signer)
		d.offered = append(d.offered, "ssh.private_key ("+ssh.FingerprintSHA256(signer.PublicKey())+")")
	} else if keyFile != "" {
		keyFiles = []string{expandHome(keyFile)}
	} else {
		for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			p := expandHome("~/.ssh/" + name)
			if _, err := os.Stat(p); err == nil {
				keyFiles = append(keyFiles, p)
			}
		}
	}
	for _, f := range keyFiles {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading SSH key %s: %w", f, err)
		}
		signer, err := ssh.ParsePrivateKey(pem)
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			if keyFile != "" {
				return nil, fmt.Errorf("SSH key %s is protected by a passphrase; load it into ssh-agent instead (ssh-add %s)", f, f)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("SSH key %s cannot be parsed: %w", f, err)
		}
		signers = append(signers, signer)
		d.offered = append(d.offered, "key "+f)
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" && !s.DisableAgent {
		if conn, err := net.Dial("unix", sock); err == nil {
			if agentSigners, err := agent.NewClient(conn).Signers(); err == nil && len(agentSigners) > 0 {
				signers = append(signers, agentSigners...)
				d.offered = append(d.offered, fmt.Sprintf("%d agent key(s)", len(agentSigners)))
			}
			// The signers keep using conn for signing during the handshake.
		}
	}
	if len(signers) > 0 {
		d.auth = append(d.auth, ssh.PublicKeys(signers...))
	}
	if password != "" {
		d.auth = append(d.auth, ssh.Password(password))
		d.offered = append(d.offered, "password")
	}

	if s.HostKey != "" {
		keys, err := ParseHostKeys("ssh.host_key", s.HostKey)
		if err != nil {
			return nil, err
		}
		d.check = pinnedHostKey("ssh.host_key", keys)
		return d, nil
	}
	switch verify {
	case HostKeyIgnore:
		d.check = ssh.InsecureIgnoreHostKey() //nolint:gosec // explicit user opt-out
	case HostKeyNormal, HostKeyAuto:
		d.check = hostKeyChecker(knownHosts, verify == HostKeyAuto)
	default:
		return nil, fmt.Errorf("known_hosts_verify must be normal, auto or ignore, not %q", verify)
	}
	return d, nil
}

// hostKeyChecker checks the server key against a known_hosts file, turning the
// library's errors into ones that tell the user what to do. With tofu set, an
// unknown host is recorded and accepted; a changed key is refused either way.
func hostKeyChecker(file string, tofu bool) ssh.HostKeyCallback {
	var mu sync.Mutex
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		mu.Lock()
		defer mu.Unlock()
		line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)
		fp := ssh.FingerprintSHA256(key)
		check, err := knownhosts.New(file)
		if errors.Is(err, os.ErrNotExist) {
			check = func(string, net.Addr, ssh.PublicKey) error { return &knownhosts.KeyError{} }
		} else if err != nil {
			return fmt.Errorf("reading known_hosts file %s: %w", file, err)
		}
		err = check(hostname, remote, key)
		var keyErr *knownhosts.KeyError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &keyErr) && len(keyErr.Want) > 0:
			return &HostKeyMismatchError{Host: hostname, File: file, Fingerprint: fp}
		case errors.As(err, &keyErr):
			if tofu {
				return appendLine(file, line)
			}
			return &UnknownHostKeyError{Host: hostname, File: file, Fingerprint: fp, KeyType: key.Type(), Line: line}
		default:
			return err
		}
	}
}

func appendLine(file, line string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("recording host key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("recording host key: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, line)
	return err
}

// Dial opens the SSH session and a channel to the remote libvirt socket. The
// returned conn closes the SSH client with it, so a reconnect leaks nothing.
func (d *sshDialer) Dial() (net.Conn, error) {
	client, err := ssh.Dial("tcp", d.addr, &ssh.ClientConfig{
		User:            d.user,
		Auth:            d.auth,
		HostKeyCallback: d.check,
		Timeout:         d.timeout,
	})
	if err != nil {
		var unknown *UnknownHostKeyError
		var mismatch *HostKeyMismatchError
		switch {
		case errors.As(err, &unknown):
			return nil, unknown
		case errors.As(err, &mismatch):
			return nil, mismatch
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, &AuthError{User: d.user, Offered: d.offered, Err: err}
		}
		return nil, err
	}
	conn, err := client.Dial("unix", d.socket)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("the SSH server accepted us but could not open libvirt's socket %s on the host (is libvirtd running there, may user %q use it, and does sshd allow stream-local forwarding?): %w", d.socket, d.user, err)
	}
	return &sshConn{Conn: conn, client: client}, nil
}

type sshConn struct {
	net.Conn
	client *ssh.Client
	once   sync.Once
}

// Close closes the SSH channel, then the SSH client, and waits until the
// client's connection has shut down, so no SSH goroutine or socket outlives
// the libvirt connection.
func (c *sshConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.client.Close()
		_ = c.client.Wait()
	})
	return err
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "root"
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
