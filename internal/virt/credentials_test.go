package virt

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// sshKeyText returns a new ed25519 key as OpenSSH PEM text, encrypted when
// passphrase is set, and its public key.
func sshKeyText(t *testing.T, passphrase string) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	if passphrase == "" {
		blk, err := ssh.MarshalPrivateKey(priv, "")
		if err != nil {
			t.Fatal(err)
		}
		b = pemEncode(blk)
	} else {
		blk, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
		if err != nil {
			t.Fatal(err)
		}
		b = pemEncode(blk)
	}
	k, _ := ssh.NewPublicKey(pub)
	return string(b), k
}

// The base64 body of a PEM key: what must never show up in an error.
func keyBody(text string) []string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestParsePrivateKeyValue(t *testing.T) {
	t.Parallel()
	plain, plainPub := sshKeyText(t, "")
	enc, encPub := sshKeyText(t, "s3cret")
	cases := map[string]struct {
		text, pass string
		pub        ssh.PublicKey
		want       string
	}{
		"plain":                     {text: plain, pub: plainPub},
		"plain, CRLF and padding":   {text: "\n  " + strings.ReplaceAll(plain, "\n", "\r\n") + "\n\n", pub: plainPub},
		"encrypted":                 {text: enc, pass: "s3cret", pub: encPub},
		"encrypted, no passphrase":  {text: enc, want: "ssh.private_key is encrypted: set private_key_passphrase"},
		"wrong passphrase":          {text: enc, pass: "wrong", want: "ssh.private_key cannot be decrypted: private_key_passphrase is not its passphrase"},
		"passphrase on a plain key": {text: plain, pass: "x", want: "ssh.private_key is not encrypted"},
		"not a key":                 {text: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ1c2Vk", want: "ssh.private_key is not a private key Kohaku can read (no PEM block found)"},
		"truncated":                 {text: plain[:len(plain)/2] + "\n-----END OPENSSH PRIVATE KEY-----\n", want: "ssh.private_key is not a private key Kohaku can read"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := hostconn.ParsePrivateKey("ssh.private_key", tc.text, tc.pass)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if string(s.PublicKey().Marshal()) != string(tc.pub.Marshal()) {
					t.Error("parsed a different key")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			for _, l := range keyBody(tc.text) {
				if len(l) > 8 && strings.Contains(err.Error(), l) {
					t.Errorf("error leaks key material %q", l)
				}
			}
			if tc.pass != "" && strings.Contains(err.Error(), tc.pass) {
				t.Errorf("error leaks the passphrase")
			}
		})
	}
}

// A private key value is offered instead of any key file, even a URI
// keyfile that does not exist, and ~/.ssh is not read.
func TestSSHPrivateKeyValueWinsOverFiles(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("SSH_AUTH_SOCK", "")
	text, pub := sshKeyText(t, "")
	ep, err := hostconn.ParseURI("qemu+ssh://ops@gpu1/system?keyfile=/does/not/exist")
	if err != nil {
		t.Fatal(err)
	}
	d, err := newSSHDialer(ep, SSHSettings{PrivateKey: text}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.offered) != 1 || d.offered[0] != "ssh.private_key ("+ssh.FingerprintSHA256(pub)+")" {
		t.Errorf("offered %v", d.offered)
	}
	if _, err := newSSHDialer(ep, SSHSettings{PrivateKey: "garbage"}, 0); err == nil || !strings.Contains(err.Error(), "ssh.private_key") {
		t.Errorf("bad key value: error = %v", err)
	}
}

func TestPinnedHostKey(t *testing.T) {
	t.Parallel()
	key, other := newHostKey(t), newHostKey(t)
	auth := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	known := "# pinned\n[gpu1.example.com]:22 " + auth + "\n"
	for name, text := range map[string]string{"public key": auth + " root@gpu1", "known_hosts lines": known, "several keys": string(ssh.MarshalAuthorizedKey(other)) + auth} {
		keys, err := hostconn.ParseHostKeys("ssh.host_key", text)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := pinnedHostKey("ssh.host_key", keys)("127.0.0.1:2222", remote, key); err != nil {
			t.Errorf("%s: the pinned key is refused: %v", name, err)
		}
	}
	keys, _ := hostconn.ParseHostKeys("ssh.host_key", auth)
	err := pinnedHostKey("ssh.host_key", keys)("127.0.0.1:2222", remote, other)
	var mismatch *HostKeyMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("error = %v, want a HostKeyMismatchError", err)
	}
	for _, want := range []string{"127.0.0.1:2222", ssh.FingerprintSHA256(other), "does NOT match ssh.host_key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if hint(Endpoint{Transport: TransportSSH}, err) != "" {
		t.Error("a mismatch already says what to do")
	}
	for _, bad := range []string{"", "# only a comment", "not a key at all"} {
		if _, err := hostconn.ParseHostKeys("ssh.host_key", bad); err == nil || !strings.Contains(err.Error(), "ssh.host_key") {
			t.Errorf("ParseHostKeys(%q) error = %v", bad, err)
		}
	}
}

// A pinned host key reads and writes no known_hosts file, whatever
// known_hosts_verify says.
func TestPinnedHostKeyTouchesNoFile(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	key := newHostKey(t)
	ep, _ := hostconn.ParseURI("qemu+ssh://root@127.0.0.1:2222/system?known_hosts_verify=auto")
	d, err := newSSHDialer(ep, SSHSettings{HostKey: string(ssh.MarshalAuthorizedKey(key)), DisableAgent: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.check("127.0.0.1:2222", remote, newHostKey(t)); err == nil {
		t.Error("an unknown key was accepted")
	}
	if err := d.check("127.0.0.1:2222", remote, key); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(home, ".ssh")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("~/.ssh was created: %v", err)
	}
}

// TLS material given as values: a dial succeeds with no file anywhere, and
// a refusal names the value it came from.
func TestTLSDialerValues(t *testing.T) {
	ca := newTestCA(t, "test CA")
	stranger := newTestCA(t, "stranger CA")
	addr := fakeTLSLibvirtd(t, ca, false)
	cert, key := ca.issue(t, "good client", x509.ExtKeyUsageClientAuth)
	sCert, sKey := stranger.issue(t, "stranger client", x509.ExtKeyUsageClientAuth)
	ep, s := tlsEndpoint(t, addr, "")
	s.TLS = TLSSettings{CACert: string(ca.pem), ClientCert: string(cert), ClientKey: string(key)}
	d := newTLSDialer(ep, s)
	d.caPaths, d.certPaths, d.keyPaths = []string{"/nonexistent/ca"}, []string{"/nonexistent/cert"}, []string{"/nonexistent/key"}
	c, err := d.Dial()
	if err != nil {
		t.Fatalf("dial with values: %v", err)
	}
	c.Close()

	s.TLS = TLSSettings{CACert: string(ca.pem), ClientCert: string(sCert), ClientKey: string(sKey)}
	_, err = newTLSDialer(ep, s).Dial()
	if err == nil || !strings.Contains(err.Error(), "libvirtd refused the client certificate tls.client_cert (subject CN=stranger client") {
		t.Errorf("stranger client: %v", err)
	}
	if strings.Contains(err.Error(), keyBody(string(sKey))[0]) {
		t.Error("error leaks the client key")
	}
	s.TLS = TLSSettings{CACert: string(stranger.pem), ClientCert: string(cert), ClientKey: string(key)}
	if _, err = newTLSDialer(ep, s).Dial(); err == nil || !strings.Contains(err.Error(), "is not signed by the CA in tls.ca_cert") {
		t.Errorf("untrusted server: %v", err)
	}
}

func TestParseTLSMaterial(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	cert, key := ca.issue(t, "c", x509.ExtKeyUsageClientAuth)
	_, otherKey := ca.issue(t, "d", x509.ExtKeyUsageClientAuth)
	if err := hostconn.ParseTLSMaterial("tls.", string(ca.pem), string(cert), string(key)); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ ca, cert, key, want string }{
		"ca not PEM":     {ca: "hello", want: "tls.ca_cert holds no PEM certificate"},
		"cert is a key":  {cert: string(key), want: "tls.client_cert holds no PEM certificate"},
		"key is a cert":  {key: string(cert), want: "tls.client_key holds no PEM private key"},
		"key of another": {cert: string(cert), key: string(otherKey), want: "tls.client_cert and tls.client_key cannot be used together"},
	}
	for name, tc := range cases {
		err := hostconn.ParseTLSMaterial("tls.", tc.ca, tc.cert, tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want %q", name, err, tc.want)
			continue
		}
		for _, l := range keyBody(tc.key) {
			if strings.Contains(err.Error(), l) {
				t.Errorf("%s: error leaks key material", name)
			}
		}
	}
}
