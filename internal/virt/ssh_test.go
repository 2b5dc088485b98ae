package virt

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func newHostKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var remote = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2222}

func TestUnknownHostKeyTellsWhichLineToAdd(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "known_hosts") // does not exist
	key := newHostKey(t)
	err := hostKeyChecker(file, false)("127.0.0.1:2222", remote, key)
	var unknown *UnknownHostKeyError
	if !errors.As(err, &unknown) {
		t.Fatalf("error = %v, want UnknownHostKeyError", err)
	}
	for _, want := range []string{"[127.0.0.1]:2222", ssh.FingerprintSHA256(key), file, "known_hosts_verify = \"auto\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not contain %q", err, want)
		}
	}
	// The suggested line, once added, makes the host known.
	if err := os.WriteFile(file, []byte(unknown.Line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := hostKeyChecker(file, false)("127.0.0.1:2222", remote, key); err != nil {
		t.Errorf("after adding the suggested line: %v", err)
	}
}

func TestAutoRecordsFirstKeyAndRefusesAChangedOne(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "sub", "known_hosts")
	key := newHostKey(t)
	check := hostKeyChecker(file, true)
	if err := check("127.0.0.1:2222", remote, key); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if err := hostKeyChecker(file, false)("127.0.0.1:2222", remote, key); err != nil {
		t.Errorf("recorded key not accepted in normal mode: %v", err)
	}
	err := check("127.0.0.1:2222", remote, newHostKey(t))
	var mismatch *HostKeyMismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "does NOT match") {
		t.Errorf("changed key: error = %v, want HostKeyMismatchError even in auto mode", err)
	}
}

func TestSSHSettingsWinOverURI(t *testing.T) {
	t.Parallel()
	ep, err := ParseURI("qemu+ssh://ops@gpu1/system?keyfile=/does/not/exist&known_hosts_verify=ignore")
	if err != nil {
		t.Fatal(err)
	}
	// The URI's keyfile does not exist: reading it must fail...
	if _, err := newSSHDialer(ep, SSHSettings{}, 0); err == nil || !strings.Contains(err.Error(), "/does/not/exist") {
		t.Errorf("URI keyfile: error = %v", err)
	}
	// ...and a key_file setting replaces it.
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "id")
	if err := os.WriteFile(keyFile, pemEncode(block), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := newSSHDialer(ep, SSHSettings{KeyFile: keyFile, DisableAgent: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.user != "ops" || len(d.offered) != 1 || d.offered[0] != "key "+keyFile {
		t.Errorf("dialer user=%q offered=%v", d.user, d.offered)
	}
}

func pemEncode(b *pem.Block) []byte { return pem.EncodeToMemory(b) }
