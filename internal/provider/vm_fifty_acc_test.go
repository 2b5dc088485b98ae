package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// Many VMs becoming ready at once, over each transport, against the test
// host's libvirtd at its default limits (max_workers 20,
// max_anonymous_clients 20, max_client_requests 5) and, over ssh, an OpenSSH
// server at its defaults (MaxStartups 10:30:100, MaxSessions 10). The guests
// are the tiny test guest (internal/acctest/tinyguest): each reads its own
// seed and reports for it over the report channel within seconds of start.
// Terraform runs as the CLI with -parallelism equal to the number of VMs
// (terraform-plugin-testing always applies with -parallelism=10, and
// TF_CLI_ARGS_apply cannot override an explicit flag), so every create, and
// every readiness wait, runs at once.
//
// make check runs 12 VMs over ssh: more than sshd's MaxStartups of 10
// unauthenticated connections, which a dialer making one SSH connection per
// libvirt connection would run into; and 8 over each other transport, more
// than libvirtd's 5 requests per client. make scale runs every transport
// with 50 (KOHAKU_TEST_CONCURRENT_VMS), past libvirtd's 20 workers and 20
// anonymous clients too.
//
// Every wait must succeed, each guest's report must carry its own seed's
// instance id and hostname, and libvirtd must have served about as many
// clients at once as there are VMs (each wait reads the channel over a
// libvirt connection of its own). Over ssh all of them ride on ONE SSH
// connection: the sshd sees one TCP connection from the provider for the
// whole apply.

// concurrentVMs is how many VMs the transport's test makes at once.
func concurrentVMs(t *testing.T, transport string) int {
	t.Helper()
	v := os.Getenv("KOHAKU_TEST_CONCURRENT_VMS")
	if v == "" && transport == "ssh" {
		return 12
	}
	if v == "" {
		return 8
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("KOHAKU_TEST_CONCURRENT_VMS=%q: want a whole number of VMs, at least 2", v)
	}
	return n
}

func TestAccVM_concurrentReadyUnix(t *testing.T) { concurrentReady(t, "unix") }
func TestAccVM_concurrentReadyTCP(t *testing.T)  { concurrentReady(t, "tcp") }
func TestAccVM_concurrentReadyTLS(t *testing.T)  { concurrentReady(t, "tls") }
func TestAccVM_concurrentReadySSH(t *testing.T)  { concurrentReady(t, "ssh") }

func concurrentReady(t *testing.T, transport string) {
	env := acctest.NewVMEnv(t)
	nVMs := concurrentVMs(t, transport)
	parallelism := fmt.Sprintf("-parallelism=%d", nVMs)
	kernel := acctest.Env(t, "KOHAKU_TEST_TINY_KERNEL")
	initrd := acctest.Env(t, "KOHAKU_TEST_TINY_INITRD")
	if _, err := exec.LookPath(acctest.CLI()); err != nil {
		t.Fatalf("the CLI %q is missing: this test drives it directly to apply with -parallelism equal to the number of VMs", acctest.CLI())
	}
	prefix := vmTestPrefix(t, env, "fifty"+transport)

	var provider string
	var sshd *acctest.SSHD
	switch transport {
	case "unix":
		provider = fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", env.URI)
	case "tcp":
		provider = fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", acctest.Env(t, "KOHAKU_TEST_TCP_URI"))
	case "tls":
		provider = fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n  tls = { pki_path = %q }\n}\n",
			acctest.Env(t, "KOHAKU_TEST_TLS_URI"), acctest.Env(t, "KOHAKU_TEST_TLS_PKI"))
	case "ssh":
		sshd = acctest.StartSSHD(t)
		provider = fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n  ssh = {\n    key_file         = %q\n    known_hosts_file = %q\n    use_agent        = false\n  }\n}\n",
			fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port), sshd.ClientKey, sshd.WriteKnownHosts(t))
	}
	config := faultCLIHead + provider + fmt.Sprintf(`
resource "kohaku_seed" "tiny" {
  count    = %[1]d
  name     = "%[2]s${count.index}-seed.iso"
  pool     = %[3]q
  hostname = "tiny${count.index}"
}

resource "kohaku_vm" "tiny" {
  count      = %[1]d
  name       = "%[2]s${count.index}"
  type       = "qemu"
  memory_mib = 96
  kernel     = %[4]q
  initrd     = %[5]q
  cmdline    = "console=ttyS0 quiet mitigations=off no_timer_check panic=1"
  seed_id    = kohaku_seed.tiny[count.index].id
  wait_for   = "channel"
  timeouts {
    create = "15m"
  }
}

output "reports" {
  value = [for i, vm in kohaku_vm.tiny : {
    via      = vm.guest.ready_via
    seconds  = vm.guest.seconds_to_ready
    instance = vm.guest.instance_id
    hostname = vm.guest.hostname
    want     = kohaku_seed.tiny[i].instance_id
  }]
}
`, nVMs, prefix, env.Pool, kernel, initrd)

	w := acctest.NewWorkspace(t, config)
	t.Cleanup(func() {
		if out, err := w.Run("destroy", "-auto-approve", "-input=false", parallelism); err != nil {
			t.Logf("destroy after the test: %v\n%s", err, out)
		}
	})

	s := startFiftySampler(t, sshd)
	start := time.Now()
	out, err := w.Run("apply", "-auto-approve", "-input=false", parallelism)
	took := time.Since(start)
	s.stop()
	if err != nil {
		t.Fatalf("apply with %s over %s failed after %s: %v\n%s", parallelism, transport, took.Round(time.Second), err, tail(out, 6000))
	}

	// Each VM is ready through the channel with its own seed's report.
	var reports []struct {
		Via      string  `json:"via"`
		Instance string  `json:"instance"`
		Hostname string  `json:"hostname"`
		Want     string  `json:"want"`
		Seconds  float64 `json:"seconds"`
	}
	if err := jsonOutput(w, "reports", &reports); err != nil {
		t.Fatal(err)
	}
	if len(reports) != nVMs {
		t.Fatalf("%d reports, want %d", len(reports), nVMs)
	}
	slowest := 0.0
	for i, r := range reports {
		if r.Via != "channel" || r.Instance == "" || r.Instance != r.Want || r.Hostname != fmt.Sprintf("tiny%d", i) {
			t.Errorf("VM %d: ready via %q, instance %q (its seed's: %q), hostname %q (want tiny%d)", i, r.Via, r.Instance, r.Want, r.Hostname, i)
		}
		slowest = max(slowest, r.Seconds)
	}

	// The waits ran at once: libvirtd served about fifty clients together.
	if s.maxClients < nVMs*4/5 {
		t.Errorf("libvirtd served at most %d clients at once during the apply; %d concurrent waits need about as many", s.maxClients, nVMs)
	}
	t.Logf("%s: %d VMs ready in one apply of %s (slowest wait %.1fs); libvirtd served up to %d clients at once (nclients_max 5000, max_workers 20 as shipped)",
		transport, nVMs, took.Round(time.Second), slowest, s.maxClients)

	if sshd != nil {
		// Terraform starts the provider once for the plan and once for
		// the apply; each provider process makes one SSH connection to
		// the host, which carries every libvirt connection it opens (the
		// fifty waits among them). The sshd's own view: each connection
		// it accepts is a child process of it.
		var per []string
		for pid, ports := range s.providerPorts {
			per = append(per, fmt.Sprintf("provider %s: %d", pid, len(ports)))
			if len(ports) != 1 {
				t.Errorf("provider process %s made %d TCP connections to the sshd, want 1", pid, len(ports))
			}
		}
		// A short-lived provider (the plan's) may be gone before a sample
		// sees it with its socket, and its connection may be gone from the
		// socket table too (a 100 ms sampler can miss a connection the plan
		// opens and closes between two samples), while its sshd child was
		// seen; or the child may be missed. Each side's count is at most
		// one per provider process.
		if n := len(s.sshClientPorts); n < 1 || n > len(s.providers) || len(s.sshChildren) < 1 || len(s.sshChildren) > len(s.providers) {
			t.Errorf("%d TCP connections to the sshd and %d sshd connection processes, want one per provider process at most (%d provider processes)", n, len(s.sshChildren), len(s.providers))
		}
		// One provider process never holds two SSH connections at once.
		// Two processes may each hold theirs for a moment: Terraform 1.14
		// starts the apply's provider before the plan's has closed its
		// connection and exited.
		if s.maxSSHConnsPerProvider != 1 {
			t.Errorf("one provider process held up to %d SSH connections at once, want 1", s.maxSSHConnsPerProvider)
		}
		if s.maxSSHConns > len(s.providers) {
			t.Errorf("up to %d SSH connections were established at once by %d provider processes, want at most one each", s.maxSSHConns, len(s.providers))
		}
		t.Logf("ssh: %d TCP connections / SSH handshakes for the whole apply by %d provider processes (seen with their connection: %s), at most %d established at once, %d sshd connection processes, for %d concurrent waits (sshd MaxStartups 10:30:100 as shipped)",
			len(s.sshClientPorts), len(s.providers), strings.Join(per, ", "), s.maxSSHConns, len(s.sshChildren), nVMs)
	}
}

// fiftySampler watches the host while the apply runs: libvirtd's client
// count (virt-admin) and, for ssh, the sshd's connection processes and the
// TCP connections to its port.
type fiftySampler struct {
	maxClients     int
	sshChildren    map[string]bool
	sshClientPorts map[string]bool
	// providerPorts maps each provider process to the local ports of its
	// TCP connections to the sshd; maxSSHConns is the most seen at once.
	providerPorts map[string]map[string]bool
	maxSSHConns   int
	// maxSSHConnsPerProvider is the most established connections one
	// provider process was seen holding at once.
	maxSSHConnsPerProvider int
	providers              map[string]bool // provider processes seen
	done                   chan struct{}
	wg                     sync.WaitGroup
}

func startFiftySampler(t *testing.T, sshd *acctest.SSHD) *fiftySampler {
	s := &fiftySampler{sshChildren: map[string]bool{}, sshClientPorts: map[string]bool{}, providerPorts: map[string]map[string]bool{}, providers: map[string]bool{}, done: make(chan struct{})}
	if _, err := exec.LookPath("virt-admin"); err != nil {
		t.Fatal("virt-admin is missing (libvirt-clients): the test counts libvirtd's clients with it")
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			if sshd != nil {
				for _, pid := range acctest.ChildPIDs(sshd.PID) {
					s.sshChildren[pid] = true
				}
				conns := tcpClientPorts(sshd.Port)
				for _, p := range conns {
					s.sshClientPorts[p.port] = true
				}
				established := 0
				for _, c := range conns {
					if c.state == "01" {
						established++
					}
				}
				s.maxSSHConns = max(s.maxSSHConns, established)
				for pid, inodes := range providerSockets() {
					s.providers[pid] = true
					mine := 0
					for _, c := range conns {
						if inodes[c.inode] {
							if s.providerPorts[pid] == nil {
								s.providerPorts[pid] = map[string]bool{}
							}
							s.providerPorts[pid][c.port] = true
							if c.state == "01" {
								mine++
							}
						}
					}
					s.maxSSHConnsPerProvider = max(s.maxSSHConnsPerProvider, mine)
				}
			}
			if n%3 == 0 {
				if c := libvirtdClientCount(); c > s.maxClients {
					s.maxClients = c
				}
			}
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *fiftySampler) stop() {
	close(s.done)
	s.wg.Wait()
}

// libvirtdClientCount is libvirtd's current client count, -1 when unknown.
func libvirtdClientCount() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virt-admin", "-c", "libvirtd:///system", "srv-clients-info", "libvirtd").Output()
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "nclients" {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

// tcpConn is the client end of a TCP connection: its local port and socket inode.
type tcpConn struct{ port, inode, state string }

// tcpClientPorts lists the client ends of IPv4 TCP connections whose remote
// port is port (connections to a loopback server), in any state but LISTEN.
func tcpClientPorts(port int) []tcpConn {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	var conns []tcpConn
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] == "0A" || !strings.HasSuffix(fields[2], want) {
			continue
		}
		conns = append(conns, tcpConn{port: fields[1], inode: fields[9], state: fields[3]})
	}
	return conns
}

// providerSockets maps each running provider process of the CLI tests (the
// binary acctest.CLIConfig built) to the inodes of its sockets.
func providerSockets() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	if acctest.ProviderDir() == "" {
		return out
	}
	bin := acctest.ProviderDir() + "/terraform-provider-kohaku"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err != nil || exe != bin {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + e.Name() + "/fd")
		inodes := map[string]bool{}
		for _, fd := range fds {
			l, err := os.Readlink("/proc/" + e.Name() + "/fd/" + fd.Name())
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
		out[e.Name()] = inodes
	}
	return out
}

// jsonOutput decodes a Terraform output of the workspace.
func jsonOutput(w *acctest.Workspace, name string, v any) error {
	out, err := w.Run("output", "-json", name)
	if err != nil {
		return fmt.Errorf("terraform output %s: %v\n%s", name, err, out)
	}
	return json.Unmarshal([]byte(out), v)
}
