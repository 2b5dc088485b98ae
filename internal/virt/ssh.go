package virt

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

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

// sshDialer reaches libvirtd's unix socket on the remote host through an SSH
// "direct-streamlocal" channel: no ssh binary, nc or virt-ssh-helper needed.
//
// Every libvirt connection the dialer makes rides on ONE SSH connection per
// dialer (one per host): the first dial makes the TCP connection and the
// handshake, later dials only open a channel on it. So fifty readiness waits
// make one handshake, not fifty (OpenSSH's MaxStartups 10:30:100 drops
// unauthenticated connections past ten). The SSH connection is counted by
// its channels: it is closed, and waited for, when the last libvirt
// connection on it closes; one that died is dropped and the next dial makes
// a new one (a dial that finds it dead redials once).
type sshDialer struct {
	addr    string
	socket  string
	user    string
	timeout time.Duration
	auth    []ssh.AuthMethod
	offered []string
	check   ssh.HostKeyCallback
	// verify is the known_hosts_verify mode in force.
	verify string
	// algorithms lists the host key algorithms to ask the server for,
	// from the keys the client knows for it (nil: the library's default).
	algorithms func() []string

	mu     sync.Mutex
	shared *sharedSSH // the live SSH connection, nil when there is none
	round  *sshRound  // the handshake under way, nil when there is none

	// tcpDials counts TCP connections made to the SSH server; handshakes
	// counts the SSH handshakes that completed (authenticated).
	tcpDials, handshakes atomic.Int64
}

// sharedSSH is one SSH connection and the libvirt connections riding on it.
type sharedSSH struct {
	client *ssh.Client
	refs   int           // open channels (guarded by the dialer's mu)
	dead   bool          // closed or lost: no new channel goes on it (mu)
	done   chan struct{} // closed once the connection has ended
}

// sshRound is one handshake that concurrent dials wait for together.
type sshRound struct {
	done   chan struct{}
	shared *sharedSSH
	err    error
}

// sshCounts are process-wide counters per SSH server address, for tests
// that cannot reach the dialer (a provider under terraform-plugin-testing).
var sshCounts sync.Map // addr -> *[2]atomic.Int64 (TCP connections, handshakes)

func sshCounter(addr string) *[2]atomic.Int64 {
	v, _ := sshCounts.LoadOrStore(addr, new([2]atomic.Int64))
	return v.(*[2]atomic.Int64) //nolint:forcetypeassert // sshCounts holds nothing else
}

// SSHConnections reports how many TCP connections and completed SSH
// handshakes every ssh dialer of this process has made to addr
// ("host:port") so far.
func SSHConnections(addr string) (tcp, handshakes int64) {
	c := sshCounter(addr)
	return c[0].Load(), c[1].Load()
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
	// An explicit known_hosts_verify setting wins over everything in the
	// URI; within the URI, no_verify=1 wins over known_hosts_verify.
	verify := firstNonEmpty(s.KnownHostsVerify, ep.Params.Get("known_hosts_verify"), HostKeyNormal)
	if s.KnownHostsVerify == "" && ep.Params.Get("no_verify") == "1" {
		verify = HostKeyIgnore
	}
	d.verify = verify
	password := firstNonEmpty(s.Password, ep.Password())

	var signers []ssh.Signer
	var keyFiles []string
	if s.PrivateKey != "" {
		signer, err := hostconn.ParsePrivateKey("ssh.private_key", s.PrivateKey, s.PrivateKeyPassphrase)
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
		keys, err := hostconn.ParseHostKeys("ssh.host_key", s.HostKey)
		if err != nil {
			return nil, err
		}
		d.check = pinnedHostKey("ssh.host_key", keys)
		algs := hostKeyAlgorithms(keys)
		d.algorithms = func() []string { return algs }
		return d, nil
	}
	switch verify {
	case HostKeyIgnore:
		d.check = ssh.InsecureIgnoreHostKey() //nolint:gosec // explicit user opt-out
	case HostKeyNormal, HostKeyAuto:
		d.check = hostKeyChecker(knownHosts, verify == HostKeyAuto)
		// read at each handshake: auto mode may have recorded a key since
		d.algorithms = func() []string { return hostKeyAlgorithms(knownKeys(knownHosts, d.addr)) }
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

// probeHostKey is a key no known_hosts file holds (its private half is all
// zeros): knownKeys asks a known_hosts file about it to learn which keys the
// file has for a host.
var probeHostKey = func() ssh.PublicKey {
	k, err := ssh.NewPublicKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public())
	if err != nil {
		panic(err)
	}
	return k
}()

// knownKeys lists the keys a known_hosts file holds for addr (host:port),
// one per key type; none when the file or the host is not there.
func knownKeys(file, addr string) []ssh.PublicKey {
	check, err := knownhosts.New(file)
	if err != nil {
		return nil
	}
	host, _, _ := net.SplitHostPort(addr)
	var ke *knownhosts.KeyError
	if !errors.As(check(addr, &net.TCPAddr{IP: net.ParseIP(host)}, probeHostKey), &ke) {
		return nil
	}
	keys := make([]ssh.PublicKey, 0, len(ke.Want))
	for _, w := range ke.Want {
		keys = append(keys, w.Key)
	}
	return keys
}

// hostKeyAlgorithms lists the host key algorithms that can be checked
// against keys, strongest first, as OpenSSH's client prefers the types it
// knows for a host. Without it the server may offer a key of another type
// than the one known (an ECDSA key where known_hosts holds the host's
// ed25519 key, as `ssh-keyscan -t ed25519` writes it), and a host whose key
// never changed would be refused as changed. Nil for no keys.
func hostKeyAlgorithms(keys []ssh.PublicKey) []string {
	order := []string{
		ssh.KeyAlgoED25519, ssh.KeyAlgoSKED25519,
		ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoSKECDSA256,
		ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA,
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k.Type()] = true
	}
	var out []string
	for _, a := range order {
		keyType := a
		if a == ssh.KeyAlgoRSASHA512 || a == ssh.KeyAlgoRSASHA256 {
			keyType = ssh.KeyAlgoRSA // RSA keys sign with any of the three
		}
		if have[keyType] {
			out = append(out, a)
		}
	}
	return out
}

func appendLine(file, line string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("recording host key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("recording host key: %w", err)
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return fmt.Errorf("recording host key: %w", err)
	}
	// Close reports a failed write where the file system defers it (NFS).
	if err := f.Close(); err != nil {
		return fmt.Errorf("recording host key: %w", err)
	}
	return nil
}

// handshake makes a new TCP connection and SSH handshake, both bounded by
// the dial timeout.
func (d *sshDialer) handshake() (*ssh.Client, error) {
	d.tcpDials.Add(1)
	counts := sshCounter(d.addr)
	counts[0].Add(1)
	conn, err := net.DialTimeout("tcp", d.addr, d.timeout)
	if err != nil {
		return nil, err
	}
	if d.timeout > 0 {
		_ = conn.SetDeadline(time.Now().Add(d.timeout))
	}
	var algorithms []string
	if d.algorithms != nil {
		algorithms = d.algorithms()
	}
	cc, chans, reqs, err := ssh.NewClientConn(conn, d.addr, &ssh.ClientConfig{
		User:              d.user,
		Auth:              d.auth,
		HostKeyCallback:   d.check,
		HostKeyAlgorithms: algorithms,
		Timeout:           d.timeout,
	})
	if err != nil {
		conn.Close()
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
	_ = conn.SetDeadline(time.Time{})
	d.handshakes.Add(1)
	counts[1].Add(1)
	return ssh.NewClient(cc, chans, reqs), nil
}

// acquire returns the live SSH connection with one more reference, making
// it when there is none. Concurrent callers share one handshake and its
// result.
func (d *sshDialer) acquire() (*sharedSSH, error) {
	d.mu.Lock()
	if s := d.shared; s != nil && !s.dead {
		s.refs++
		d.mu.Unlock()
		return s, nil
	}
	if r := d.round; r != nil {
		d.mu.Unlock()
		<-r.done
		if r.err != nil {
			return nil, r.err
		}
		return d.acquire() // the new connection, or a later one if it died already
	}
	r := &sshRound{done: make(chan struct{})}
	d.round = r
	d.mu.Unlock()

	client, err := d.handshake()
	d.mu.Lock()
	d.round = nil
	if err != nil {
		r.err = err
		d.mu.Unlock()
		close(r.done)
		return nil, err
	}
	s := &sharedSSH{client: client, refs: 1, done: make(chan struct{})}
	d.shared, r.shared = s, s
	d.mu.Unlock()
	close(r.done)
	go d.watch(s)
	return s, nil
}

// watch marks s dead as soon as its connection ends, so the next dial
// makes a new one instead of failing on it.
func (d *sshDialer) watch(s *sharedSSH) {
	_ = s.client.Wait()
	d.mu.Lock()
	d.drop(s)
	d.mu.Unlock()
	close(s.done)
}

// drop takes s out of use (the caller holds mu).
func (d *sshDialer) drop(s *sharedSSH) {
	s.dead = true
	if d.shared == s {
		d.shared = nil
	}
}

// release gives back one reference; the last one closes the SSH connection
// and waits until it has shut down, so no SSH goroutine or socket outlives
// the last libvirt connection.
func (d *sshDialer) release(s *sharedSSH) {
	d.mu.Lock()
	s.refs--
	last := s.refs == 0
	if last {
		d.drop(s)
	}
	d.mu.Unlock()
	if last {
		s.client.Close()
		<-s.done
	}
}

// kill closes s for everyone: it failed to open a channel, so every channel
// on it is as good as lost.
func (d *sshDialer) kill(s *sharedSSH) {
	d.mu.Lock()
	d.drop(s)
	d.mu.Unlock()
	s.client.Close()
}

// openSocket opens a channel to libvirt's socket on s, bounded by the dial
// timeout: a connection that does not answer is treated as lost.
func (d *sshDialer) openSocket(s *sharedSSH) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	got := make(chan result, 1)
	go func() {
		conn, err := s.client.Dial("unix", d.socket)
		got <- result{conn, err}
	}()
	var expired <-chan time.Time
	if d.timeout > 0 {
		t := time.NewTimer(d.timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-got:
		return r.conn, r.err
	case <-expired:
		d.kill(s) // the open then fails and its goroutine returns
		if r := <-got; r.conn != nil {
			r.conn.Close()
		}
		return nil, fmt.Errorf("the SSH server did not answer a channel open within %s", d.timeout)
	}
}

// Dial opens a channel to the remote libvirt socket on the dialer's shared
// SSH connection, making that connection first when there is none. When
// the connection turns out to be dead, it is dropped and the dial is tried
// once more on a new one. The returned conn gives its reference back when
// it closes.
func (d *sshDialer) Dial() (net.Conn, error) {
	for attempt := 0; ; attempt++ {
		s, err := d.acquire()
		if err != nil {
			return nil, err
		}
		conn, err := d.openSocket(s)
		if err == nil {
			return &sshConn{Conn: conn, d: d, s: s}, nil
		}
		var refused *ssh.OpenChannelError
		if errors.As(err, &refused) || attempt > 0 {
			d.release(s)
			return nil, fmt.Errorf("the SSH server accepted us but could not open libvirt's socket %s on the "+
				"host (is libvirtd running there, may user %q use it, and does sshd allow stream-local "+
				"forwarding?): %w", d.socket, d.user, err)
		}
		// Not a refusal: the connection is gone. Drop it and redial once.
		d.kill(s)
		d.release(s)
	}
}

type sshConn struct {
	net.Conn
	d    *sshDialer
	s    *sharedSSH
	once sync.Once
}

// Close closes the SSH channel and gives its reference to the SSH
// connection back; the last channel's close closes the connection and waits
// until it has shut down.
func (c *sshConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.d.release(c.s) })
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

// SSHConnections reports, for a qemu+ssh client, how many TCP connections
// and completed SSH handshakes its dialer has made; zero for other transports.
func (c *Client) SSHConnections() (tcp, handshakes int64) {
	if d, ok := c.dialer.inner.(*sshDialer); ok {
		return d.tcpDials.Load(), d.handshakes.Load()
	}
	return 0, 0
}
