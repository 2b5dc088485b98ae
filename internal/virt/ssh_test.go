package virt

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
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
	ep, err := hostconn.ParseURI("qemu+ssh://ops@gpu1/system?keyfile=/does/not/exist&known_hosts_verify=ignore")
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

// fakeSSHServer is an in-process SSH server whose direct-streamlocal
// channels echo what they receive. It counts the TCP connections it
// accepted; with silentFirst, the first connection never answers a channel
// open (a connection that died without a word); with refuse, every open is
// refused (the socket is not there).
type fakeSSHServer struct {
	ln          net.Listener
	accepted    atomic.Int64
	silentFirst bool
	refuse      bool
	mu          sync.Mutex
	conns       []net.Conn
	ended       sync.WaitGroup
}

func startFakeSSHServer(t *testing.T, silentFirst, refuse bool) *fakeSSHServer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return startFakeSSHServerWithKeys(t, silentFirst, refuse, signer)
}

// startFakeSSHServerWithKeys is startFakeSSHServer with the given host keys.
func startFakeSSHServerWithKeys(t *testing.T, silentFirst, refuse bool, hostKeys ...ssh.Signer) *fakeSSHServer {
	t.Helper()
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	for _, k := range hostKeys {
		cfg.AddHostKey(k)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeSSHServer{ln: ln, silentFirst: silentFirst, refuse: refuse}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, nc)
			s.mu.Unlock()
			s.ended.Add(1)
			go s.serve(nc, cfg, n == 1 && s.silentFirst)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.killAll()
		s.ended.Wait()
	})
	return s
}

func (s *fakeSSHServer) serve(nc net.Conn, cfg *ssh.ServerConfig, silent bool) {
	defer s.ended.Done()
	defer nc.Close()
	conn, chans, reqs, err := ssh.NewServerConn(nc, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nch := range chans {
		switch {
		case silent:
			continue // never answered
		case s.refuse || nch.ChannelType() != "direct-streamlocal@openssh.com":
			_ = nch.Reject(ssh.ConnectionFailed, "no such socket")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			continue
		}
		go ssh.DiscardRequests(creqs)
		go func() {
			_, _ = io.Copy(ch, ch)
			ch.Close()
		}()
	}
	_ = conn.Wait() // the client hung up; how is not what these tests check
}

// killAll drops every connection without an SSH goodbye.
func (s *fakeSSHServer) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

func (s *fakeSSHServer) dialer(timeout time.Duration) *sshDialer {
	return &sshDialer{
		addr: s.ln.Addr().String(), socket: "/run/libvirt/libvirt-sock", user: "test",
		timeout: timeout, check: ssh.InsecureIgnoreHostKey(),
	}
}

// echo checks that conn carries its own bytes.
func echo(t *testing.T, conn net.Conn, msg string) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(msg)); err != nil {
		t.Errorf("write %q: %v", msg, err)
		return
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
		t.Errorf("echo of %q: got %q, %v", msg, got, err)
	}
}

// settleGoroutines waits until the goroutine count is back at most at want.
func settleGoroutines(t *testing.T, want int) {
	t.Helper()
	n := 0
	for i := 0; i < 100; i++ {
		if n = runtime.NumGoroutine(); n <= want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Errorf("goroutines: %d, want at most %d\n%s", n, want, buf[:runtime.Stack(buf, true)])
}

// Fifty libvirt connections dialed at once ride on one SSH connection, each
// as a channel of its own; closing the last one closes the SSH connection
// with no goroutine left, and the next dial makes a new one.
func TestSSHDialerSharesOneConnection(t *testing.T) {
	srv := startFakeSSHServer(t, false, false)
	g0 := runtime.NumGoroutine()
	d := srv.dialer(5 * time.Second)
	conns := make([]net.Conn, 50)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := d.Dial()
			if err != nil {
				t.Errorf("dial %d: %v", i, err)
				return
			}
			conns[i] = c
			echo(t, c, fmt.Sprintf("conn %d", i))
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if tcp, hs := d.tcpDials.Load(), d.handshakes.Load(); tcp != 1 || hs != 1 {
		t.Fatalf("50 dials made %d TCP connections and %d handshakes, want 1 and 1", tcp, hs)
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Fatalf("the server accepted %d connections, want 1", n)
	}
	if tcp, hs := SSHConnections(d.addr); tcp != 1 || hs != 1 {
		t.Errorf("SSHConnections(%s) = %d, %d, want 1, 1", d.addr, tcp, hs)
	}
	// Closing all but one keeps the connection for the last one.
	for _, c := range conns[1:] {
		c.Close()
	}
	echo(t, conns[0], "still here")
	d.mu.Lock()
	if d.shared == nil || d.shared.refs != 1 {
		t.Errorf("after 49 closes: shared = %+v, want one reference left", d.shared)
	}
	d.mu.Unlock()
	conns[0].Close()
	conns[0].Close() // a second close gives nothing back twice
	d.mu.Lock()
	if d.shared != nil {
		t.Errorf("after the last close the SSH connection is still shared")
	}
	d.mu.Unlock()
	settleGoroutines(t, g0)

	c, err := d.Dial()
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c, "again")
	c.Close()
	if hs := d.handshakes.Load(); hs != 2 {
		t.Errorf("a dial after the last close made handshake number %d, want 2", hs)
	}
	settleGoroutines(t, g0)
}

// A connection lost under open channels is replaced: the next dial makes a
// new one, and the old channels fail instead of hanging.
func TestSSHDialerReplacesLostConnection(t *testing.T) {
	srv := startFakeSSHServer(t, false, false)
	g0 := runtime.NumGoroutine()
	d := srv.dialer(5 * time.Second)
	old, err := d.Dial()
	if err != nil {
		t.Fatal(err)
	}
	echo(t, old, "before")
	srv.killAll()
	_ = old.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := old.Read(make([]byte, 1)); err == nil {
		t.Error("a channel of the lost connection still reads")
	}
	c, err := d.Dial()
	if err != nil {
		t.Fatalf("dial after the connection was lost: %v", err)
	}
	echo(t, c, "after")
	if hs := d.handshakes.Load(); hs != 2 {
		t.Errorf("handshakes = %d, want 2 (one new connection)", hs)
	}
	c.Close()
	old.Close()
	settleGoroutines(t, g0)
}

// A connection that no longer answers (the first one here never answers a
// channel open) is dropped once the dial timeout passes, and the dial is
// tried once more on a new connection.
func TestSSHDialerRedialsOnceOnSilentConnection(t *testing.T) {
	srv := startFakeSSHServer(t, true, false)
	g0 := runtime.NumGoroutine()
	d := srv.dialer(time.Second)
	start := time.Now()
	c, err := d.Dial()
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	echo(t, c, "second connection")
	c.Close()
	if hs := d.handshakes.Load(); hs != 2 {
		t.Errorf("handshakes = %d, want 2", hs)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("the dial took %s", took)
	}
	settleGoroutines(t, g0)
}

// A refused channel (libvirt's socket is not there) is not a dead
// connection: no redial, and the error says what to check.
func TestSSHDialerRefusedSocketDoesNotRedial(t *testing.T) {
	srv := startFakeSSHServer(t, false, true)
	g0 := runtime.NumGoroutine()
	d := srv.dialer(5 * time.Second)
	_, err := d.Dial()
	if err == nil || !strings.Contains(err.Error(), "could not open libvirt's socket") {
		t.Fatalf("err = %v, want the socket error", err)
	}
	if hs := d.handshakes.Load(); hs != 1 {
		t.Errorf("handshakes = %d, want 1 (no redial on a refusal)", hs)
	}
	d.mu.Lock()
	if d.shared != nil {
		t.Error("the SSH connection is kept with no channel on it")
	}
	d.mu.Unlock()
	settleGoroutines(t, g0)
}

// A handshake that fails is shared too: concurrent dials get its error,
// and the server sees one connection, not one per dial.
func TestSSHDialerSharesAFailedHandshake(t *testing.T) {
	srv := startFakeSSHServer(t, false, false)
	d := srv.dialer(5 * time.Second)
	d.check = func(string, net.Addr, ssh.PublicKey) error { return errors.New("not this host") }
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.Dial(); err != nil && strings.Contains(err.Error(), "not this host") {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 20 {
		t.Errorf("%d of 20 dials failed with the host key error", failed.Load())
	}
	if n := srv.accepted.Load(); n < 1 || n > 20 {
		t.Errorf("server accepted %d connections", n)
	}
	t.Logf("20 concurrent dials to a refused host: %d TCP connections", srv.accepted.Load())
}

// A host with ECDSA and ed25519 host keys, as every stock OpenSSH server
// has, whose known_hosts entry holds one of them (as `ssh-keyscan -t
// ed25519` writes it) or whose key is pinned: the client asks for the key
// type it knows, so a host whose key never changed is not refused as
// changed (the library's default order would ask for ECDSA first).
func TestSSHHostKeyOfTheKnownType(t *testing.T) {
	t.Parallel()
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var signers []ssh.Signer
	var pubs []ssh.PublicKey
	for _, k := range []any{ecPriv, edPriv} {
		signer, err := ssh.NewSignerFromKey(k)
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, signer)
		pubs = append(pubs, signer.PublicKey())
	}
	addr := startFakeSSHServerWithKeys(t, false, true, signers...).ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	ecKey, edKey := pubs[0], pubs[1]

	for _, c := range []struct {
		name     string
		known    []ssh.PublicKey // known_hosts lines for the host
		pinned   string          // ssh.host_key instead
		wantAlgs []string
	}{
		{name: "known_hosts holds its ed25519 key only", known: []ssh.PublicKey{edKey}, wantAlgs: []string{ssh.KeyAlgoED25519}},
		{name: "known_hosts holds its ECDSA key only", known: []ssh.PublicKey{ecKey}, wantAlgs: []string{ssh.KeyAlgoECDSA256}},
		{name: "known_hosts holds both", known: []ssh.PublicKey{ecKey, edKey}, wantAlgs: []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256}},
		{name: "ssh.host_key pins its ed25519 key", pinned: string(ssh.MarshalAuthorizedKey(edKey)), wantAlgs: []string{ssh.KeyAlgoED25519}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "known_hosts")
			var lines string
			for _, k := range c.known {
				lines += knownhosts.Line([]string{knownhosts.Normalize(addr)}, k) + "\n"
			}
			if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
				t.Fatal(err)
			}
			ep, err := hostconn.ParseURI("qemu+ssh://test@127.0.0.1:" + port + "/system?known_hosts=" + file)
			if err != nil {
				t.Fatal(err)
			}
			d, err := newSSHDialer(ep, SSHSettings{DisableAgent: true, HostKey: c.pinned}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.algorithms(); fmt.Sprint(got) != fmt.Sprint(c.wantAlgs) {
				t.Errorf("host key algorithms asked for = %v, want %v", got, c.wantAlgs)
			}
			cl, err := d.handshake()
			if err != nil {
				t.Fatalf("handshake with a host whose key is known: %v", err)
			}
			cl.Close()
		})
	}

	// Unknown host: no preference, and the error still says how to add it.
	if got := hostKeyAlgorithms(knownKeys(filepath.Join(t.TempDir(), "none"), addr)); got != nil {
		t.Errorf("algorithms for a host known_hosts does not hold = %v, want none", got)
	}
	// An RSA key allows all three RSA signature algorithms.
	rsaPub, err := ssh.ParsePublicKey(mustRSAWire(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := hostKeyAlgorithms([]ssh.PublicKey{rsaPub}); fmt.Sprint(got) != fmt.Sprint([]string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}) {
		t.Errorf("algorithms for an RSA key = %v", got)
	}
}

func mustRSAWire(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return p.Marshal()
}

// TestSSHExplicitVerifyWinsOverURINoVerify: the URI's no_verify=1 does not
// override an explicit known_hosts_verify, as the documented rule (values
// win over the URI) says.
func TestSSHExplicitVerifyWinsOverURINoVerify(t *testing.T) {
	t.Parallel()
	ep, err := hostconn.ParseURI("qemu+ssh://ops@gpu1/system?no_verify=1&known_hosts_verify=normal")
	if err != nil {
		t.Fatal(err)
	}
	pw := SSHSettings{Password: "x", KnownHostsFile: filepath.Join(t.TempDir(), "known_hosts")}
	for set, want := range map[string]string{"": HostKeyIgnore, HostKeyNormal: HostKeyNormal, HostKeyAuto: HostKeyAuto} {
		s := pw
		s.KnownHostsVerify = set
		d, err := newSSHDialer(ep, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.verify != want {
			t.Errorf("known_hosts_verify %q with no_verify=1 in the URI: mode %q, want %q", set, d.verify, want)
		}
	}
}
