package hostconn

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

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
	return nil, fmt.Errorf("%s is not a private key Kohaku can read (%s): give the whole key text, from "+
		"\"-----BEGIN OPENSSH PRIVATE KEY-----\" (or \"-----BEGIN ... PRIVATE KEY-----\") to the matching END "+
		"line", attr, keyParseReason(err))
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
			return nil, fmt.Errorf("%s line %d is neither a public key nor a known_hosts line; give e.g. "+
				"\"ssh-ed25519 AAAAC3Nz...\" (the host's /etc/ssh/ssh_host_ed25519_key.pub) or the output of "+
				"ssh-keyscan", attr, i+1)
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

// ParseTLSMaterial checks TLS values given as text before any dial; its
// errors name the attribute (prefix + "ca_cert" ...) and contain no key
// material. Empty values are not checked.
func ParseTLSMaterial(prefix, caCert, clientCert, clientKey string) error {
	if caCert != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(caCert)) {
		return fmt.Errorf("%sca_cert holds no PEM certificate: give the CA certificate's text, from -----BEGIN CERTIFICATE----- to -----END CERTIFICATE-----", prefix)
	}
	if clientCert != "" {
		blk, _ := pem.Decode([]byte(clientCert))
		if blk == nil || blk.Type != "CERTIFICATE" {
			return fmt.Errorf("%sclient_cert holds no PEM certificate: give the client certificate's text, from -----BEGIN CERTIFICATE----- to -----END CERTIFICATE-----", prefix)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("%sclient_cert cannot be parsed: %v", prefix, err)
		}
	}
	if clientKey != "" {
		blk, _ := pem.Decode([]byte(clientKey))
		if blk == nil || !strings.HasSuffix(blk.Type, "PRIVATE KEY") {
			return fmt.Errorf("%sclient_key holds no PEM private key: give the key's text, from -----BEGIN PRIVATE KEY----- (or RSA/EC PRIVATE KEY) to the matching END line", prefix)
		}
		if x509.IsEncryptedPEMBlock(blk) { //nolint:staticcheck // only to name the problem
			return fmt.Errorf("%sclient_key is encrypted: libvirt's client keys are not, give the decrypted key", prefix)
		}
	}
	if clientCert != "" && clientKey != "" {
		if _, err := tls.X509KeyPair([]byte(clientCert), []byte(clientKey)); err != nil {
			return fmt.Errorf("%sclient_cert and %sclient_key cannot be used together: %s", prefix, prefix, keyPairReason(err))
		}
	}
	return nil
}

// keyPairReason is crypto/tls's key pair error: its messages name what is
// wrong and never contain the key's bytes.
func keyPairReason(err error) string { return err.Error() }
