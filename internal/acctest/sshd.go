package acctest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHD is an OpenSSH server on a loopback port, started for one test and
// stopped by its PID when the test ends. It lets tests drive the ssh
// transport end to end against the local libvirtd.
type SSHD struct {
	Port int
	// ClientKey is a private key the server accepts for root.
	ClientKey string
	// KnownHostsLine is the server's host key as a known_hosts line.
	KnownHostsLine string
	// Dir holds the server's files; tests may write known_hosts files here.
	Dir string
	// PID is the listening sshd's process; each SSH connection it serves is
	// a child process of it (see Sessions).
	PID int
}

// Sessions counts the connections the server is serving now: OpenSSH
// forks a child per connection.
func (s *SSHD) Sessions(t testing.TB) int {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Fatal(err)
	}
	return len(ChildPIDs(s.PID))
}

// ChildPIDs lists the processes whose parent is pid, read from /proc.
func ChildPIDs(pid int) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'
		st := string(b)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, e.Name())
		}
	}
	return kids
}

// StartSSHD starts /usr/sbin/sshd in the foreground with a config of its own
// (host key, authorized key, no PAM) and waits until it accepts connections.
func StartSSHD(t *testing.T) *SSHD {
	t.Helper()
	bin := "/usr/sbin/sshd"
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: the acceptance host script installs openssh-server (bash internal/acctest/testhost/testhost.sh up)", bin)
	}
	dir := t.TempDir()
	s := &SSHD{Dir: dir, Port: freePort(t)}
	hostKey := writeKey(t, filepath.Join(dir, "host_ed25519"))
	clientKey := writeKey(t, filepath.Join(dir, "client_ed25519"))
	s.ClientKey = filepath.Join(dir, "client_ed25519")
	s.KnownHostsLine = knownhosts.Line([]string{knownhosts.Normalize(fmt.Sprintf("127.0.0.1:%d", s.Port))}, hostKey)
	auth := ssh.MarshalAuthorizedKey(clientKey)
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), auth, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Join([]string{
		"Port " + strconv.Itoa(s.Port),
		"ListenAddress 127.0.0.1",
		"HostKey " + filepath.Join(dir, "host_ed25519"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"StrictModes no",
		"UsePAM no",
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"AllowStreamLocalForwarding yes",
		"LogLevel ERROR",
		"",
	}, "\n")
	cfgFile := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // privilege separation dir
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-D", "-e", "-f", cfgFile)
	logFile, err := os.Create(filepath.Join(dir, "sshd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sshd: %v", err)
	}
	pid := cmd.Process.Pid
	s.PID = pid
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-done
		}
		logFile.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), time.Second)
		if err == nil {
			conn.Close()
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "sshd.log"))
			t.Fatalf("sshd did not listen on port %d: %v\n%s", s.Port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WriteKnownHosts writes a known_hosts file holding the server's key.
func (s *SSHD) WriteKnownHosts(t *testing.T) string {
	t.Helper()
	f := filepath.Join(s.Dir, "known_hosts")
	if err := os.WriteFile(f, []byte(s.KnownHostsLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// writeKey writes a new ed25519 private key in OpenSSH format and returns its public key.
func writeKey(t *testing.T, file string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// WriteOtherKey writes a key the server does not accept, for refused-auth tests.
func (s *SSHD) WriteOtherKey(t *testing.T) string {
	t.Helper()
	f := filepath.Join(s.Dir, "stranger_ed25519")
	writeKey(t, f)
	return f
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port //nolint:forcetypeassert // a tcp listener's address is a *net.TCPAddr
}

// ClosedPort returns a loopback port nothing listens on.
func ClosedPort(t *testing.T) int { return freePort(t) }
