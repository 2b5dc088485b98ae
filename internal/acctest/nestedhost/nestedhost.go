// Package nestedhost gives acceptance tests the throwaway nested libvirt host
// (an L1 VM with an emulated IOMMU) that nestedhost.sh boots, and refuses to
// hand out anything else: tests that bind PCI devices must never reach the
// machine they run on, whose disk and network are PCI devices too.
package nestedhost

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Host is one nested host as nestedhost.sh env describes it.
type Host struct {
	// URI is qemu+tcp://127.0.0.1:<port>/system, forwarded to L1's libvirtd.
	URI      string
	Hostname string
	UUID     string
	// PCI addresses of the stand-ins as L1 sees them (intel-iommu host only).
	GPU      string // QEMU's VGA, function 0, driver nvidia (the NVIDIA stand-in)
	GPUAudio string // ich9-intel-hda, function 1 of the same slot, snd_hda_intel
	NIC      string // e1000e, alone in its group
	EDU      string // QEMU's edu device, no host driver
	// SSHURI reaches the same libvirtd as URI through L1's sshd
	// (qemu+ssh://root@127.0.0.1:<port>/system with keyfile and
	// known_hosts): the transport over which Kohaku reads host files.
	SSHURI string
	// NVIDIAVersion is what the NVIDIA stand-in module declares in L1's
	// /sys/module/nvidia/version.
	NVIDIAVersion string
	// MdevParent is the node device of mtty, the kernel's sample
	// mediated-device parent, in L1 (mtty_mtty); set by RequireMdev.
	MdevParent string
	// BigBAR is the large-BAR stand-in (ivshmem-plain, a 256 GiB 64-bit
	// prefetchable BAR 2) as L1 sees it; set by RequireBigBAR.
	BigBAR string
	// SRIOVPF is the SR-IOV stand-in's physical function (QEMU's NVMe,
	// 1b36:0010, on L1's nvme driver, up to 4 VFs) as L1 sees it; its
	// VFs carry NVIDIA's vGPU files (nvidia/creatable_vgpu_types,
	// nvidia/current_vgpu_type) from the NVIDIA stand-in. Set by
	// RequireSRIOV.
	SRIOVPF string
}

// Require returns the nested host with an intel-iommu: it skips without
// TF_ACC, fails under TF_ACC when nestedhost.sh env was not loaded, and fails
// when the URI does not lead to the nested host (see Verify).
func Require(t testing.TB) *Host {
	t.Helper()
	h := &Host{
		URI:      env(t, "KOHAKU_TEST_NESTED_URI"),
		Hostname: env(t, "KOHAKU_TEST_NESTED_HOSTNAME"),
		UUID:     env(t, "KOHAKU_TEST_NESTED_UUID"),
		GPU:      env(t, "KOHAKU_TEST_NESTED_GPU"),
		GPUAudio: env(t, "KOHAKU_TEST_NESTED_GPU_AUDIO"),
		NIC:      env(t, "KOHAKU_TEST_NESTED_NIC"),
		EDU:      env(t, "KOHAKU_TEST_NESTED_EDU"),
	}
	Verify(t, h)
	hold(t, h)
	return h
}

// held maps each test that holds the nested host to its lock file.
var held sync.Map

// hold gives the test the nested host's PCI devices to itself until it
// ends: make testacc runs the nested host's tests in a go test process of
// their own beside the rest, and a test of the rest may use the nested host
// too (a real guest with the GPU stand-in, a detach of the edu device).
// Tests that take turns here cannot see each other's bindings. A test
// holds it once, however many times it asks.
func hold(t testing.TB, h *Host) {
	t.Helper()
	if _, ok := held.Load(t); ok {
		return
	}
	u, err := url.Parse(h.URI)
	if err != nil {
		t.Fatalf("nested host URI %q: %v", h.URI, err)
	}
	path := filepath.Join(os.TempDir(), "kohaku-nested-"+u.Port()+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("the nested host's test lock: %v", err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("locking %s: %v", path, err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for the nested host (another test had it)", waited.Round(time.Second))
	}
	held.Store(t, f)
	t.Cleanup(func() {
		held.Delete(t)
		_ = f.Close() // releases the lock
	})
}

// RequireMdev is Require plus the mediated-device parent that L1's mtty
// module registers.
func RequireMdev(t testing.TB) *Host {
	t.Helper()
	h := Require(t)
	h.MdevParent = env(t, "KOHAKU_TEST_NESTED_MDEV_PARENT")
	return h
}

// RequireBigBAR is RequireSSH (the BARs are read from L1's sysfs) plus
// the large-BAR stand-in's address.
func RequireBigBAR(t testing.TB) *Host {
	t.Helper()
	h := RequireSSH(t)
	h.BigBAR = env(t, "KOHAKU_TEST_NESTED_BIGBAR")
	return h
}

// RequireSRIOV is RequireSSH (VFs are enabled and their vGPU types set
// through L1's sysfs) plus the SR-IOV stand-in's physical function.
func RequireSRIOV(t testing.TB) *Host {
	t.Helper()
	h := RequireSSH(t)
	h.SRIOVPF = env(t, "KOHAKU_TEST_NESTED_SRIOV_PF")
	return h
}

// RequireSSH is Require plus the nested host's SSH URI, verified to lead to
// the same L1 (see VerifySSH).
func RequireSSH(t testing.TB) *Host {
	t.Helper()
	h := Require(t)
	h.SSHURI = env(t, "KOHAKU_TEST_NESTED_SSH_URI")
	h.NVIDIAVersion = env(t, "KOHAKU_TEST_NESTED_NVIDIA_VERSION")
	VerifySSH(t, h)
	return h
}

// RequireNoIOMMU returns the second nested host, booted with virtio-iommu,
// which Debian 12's kernel cannot use: a host without a usable IOMMU.
func RequireNoIOMMU(t testing.TB) *Host {
	t.Helper()
	h := &Host{
		URI:      env(t, "KOHAKU_TEST_NESTED_NOIOMMU_URI"),
		Hostname: env(t, "KOHAKU_TEST_NESTED_NOIOMMU_HOSTNAME"),
		UUID:     env(t, "KOHAKU_TEST_NESTED_NOIOMMU_UUID"),
	}
	Verify(t, h)
	return h
}

var nestedURI = regexp.MustCompile(`^qemu\+tcp://127\.0\.0\.1:[0-9]+/system$`)

// Verify fails the test unless h.URI is a loopback-forwarded qemu+tcp port
// whose libvirtd reports the nested host's hostname and UUID, and neither is
// this machine's. It asks virsh, independently of Kohaku's own client.
func Verify(t testing.TB, h *Host) {
	t.Helper()
	if !nestedURI.MatchString(h.URI) {
		t.Fatalf("refusing %q: the nested host is reached as qemu+tcp://127.0.0.1:<port>/system (nestedhost.sh env); PCI binding tests never run against another host", h.URI)
	}
	u, _ := url.Parse(h.URI)
	if u.Port() == "16509" {
		t.Fatalf("refusing %q: port 16509 is this machine's own libvirtd (testhost.sh); the nested host has a port of its own", h.URI)
	}
	if !strings.HasPrefix(h.Hostname, "kohaku-nested-") {
		t.Fatalf("refusing hostname %q: nested hosts are named kohaku-nested-*", h.Hostname)
	}
	if local, _ := os.Hostname(); local == h.Hostname {
		t.Fatalf("refusing: this machine itself is named %q", local)
	}
	if local, err := os.ReadFile("/sys/class/dmi/id/product_uuid"); err == nil && strings.EqualFold(strings.TrimSpace(string(local)), h.UUID) {
		t.Fatalf("refusing: this machine's own UUID is %s", h.UUID)
	}
	name := virsh(t, h.URI, "hostname")
	if name != h.Hostname {
		t.Fatalf("refusing %s: it says its hostname is %q, not the nested host's %q", h.URI, name, h.Hostname)
	}
	caps := virsh(t, h.URI, "capabilities")
	m := regexp.MustCompile(`<uuid>([^<]+)</uuid>`).FindStringSubmatch(caps)
	if m == nil || !strings.EqualFold(m[1], h.UUID) {
		t.Fatalf("refusing %s: its host UUID is not the nested host's %s", h.URI, h.UUID)
	}
}

// Virsh runs virsh against the nested host (after Verify) and returns its
// trimmed output; a failure fails the test.
func Virsh(t testing.TB, h *Host, args ...string) string {
	t.Helper()
	return virsh(t, h.URI, args...)
}

// VirshErr runs virsh against the nested host and returns output and error.
func VirshErr(h *Host, args ...string) (string, error) {
	out, err := exec.Command("virsh", append([]string{"-q", "-c", h.URI}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func virsh(t testing.TB, uri string, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh -c %s %s: %v\n%s", uri, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// NodeDeviceName is libvirt's name for a PCI address: 0000:03:00.1 -> pci_0000_03_00_1.
func NodeDeviceName(address string) string {
	return "pci_" + strings.NewReplacer(":", "_", ".", "_").Replace(address)
}

// Driver reads a PCI function's current host driver from its node-device
// XML with virsh ("" when none is bound).
func Driver(t testing.TB, h *Host, address string) string {
	t.Helper()
	doc := Virsh(t, h, "nodedev-dumpxml", NodeDeviceName(address))
	m := regexp.MustCompile(`(?s)<driver>\s*<name>([^<]+)</name>`).FindStringSubmatch(doc)
	if m == nil {
		return ""
	}
	return m[1]
}

func env(t testing.TB, name string) string {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc) to run it against the nested libvirt host")
	}
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: boot the nested host and load its settings with\n"+
			"  bash internal/acctest/nestedhost/nestedhost.sh up --both && eval \"$(bash "+
			"internal/acctest/nestedhost/nestedhost.sh env)\"\n(or run make nested-up)", name)
	}
	return v
}

var nestedSSHURI = regexp.MustCompile(`^qemu\+ssh://root@127\.0\.0\.1:([0-9]+)/system\?keyfile=([^&]+)&known_hosts=([^&]+)$`)

// VerifySSH fails the test unless h.SSHURI is a loopback-forwarded SSH port
// whose machine, logged in to with the URI's key and checked against its
// known_hosts, says it is the nested host (hostname and UUID): the same L1
// that Verify found behind h.URI. It uses its own SSH client, not Kohaku's.
func VerifySSH(t testing.TB, h *Host) {
	t.Helper()
	out := sshOutput(t, h, "cat /proc/sys/kernel/hostname /sys/class/dmi/id/product_uuid")
	f := strings.Fields(out)
	if len(f) != 2 || f[0] != h.Hostname || !strings.EqualFold(f[1], h.UUID) {
		t.Fatalf("refusing %s: the machine behind it says %q, not the nested host's %s %s", h.SSHURI, out, h.Hostname, h.UUID)
	}
}

// SSH runs a shell command as root in the nested host (after RequireSSH has
// checked that its SSH URI leads there) with the test's own SSH client, and
// returns its standard output; a command that fails fails the test.
func SSH(t testing.TB, h *Host, command string) string {
	t.Helper()
	if h.SSHURI == "" {
		t.Fatal("nestedhost.SSH needs the host from nestedhost.RequireSSH")
	}
	return sshOutput(t, h, command)
}

func sshOutput(t testing.TB, h *Host, command string) string {
	t.Helper()
	m := nestedSSHURI.FindStringSubmatch(h.SSHURI)
	if m == nil {
		t.Fatalf("refusing %q: the nested host's SSH URI is qemu+ssh://root@127.0.0.1:<port>/system?keyfile=...&known_hosts=... (nestedhost.sh env)", h.SSHURI)
	}
	key, err := os.ReadFile(m[2])
	if err != nil {
		t.Fatalf("the nested host's SSH key: %v", err)
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		t.Fatalf("the nested host's SSH key %s: %v", m[2], err)
	}
	check, err := knownhosts.New(m[3])
	if err != nil {
		t.Fatalf("the nested host's known_hosts %s: %v", m[3], err)
	}
	c, err := ssh.Dial("tcp", "127.0.0.1:"+m[1], &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: check, Timeout: 30 * time.Second,
		// known_hosts holds L1's ed25519 key: ask for that type
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
	})
	if err != nil {
		t.Fatalf("ssh to the nested host at 127.0.0.1:%s: %v", m[1], err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("ssh session on the nested host: %v", err)
	}
	defer s.Close()
	var stderr strings.Builder
	s.Stderr = &stderr
	out, err := s.Output(command)
	if err != nil {
		t.Fatalf("running %q in the nested host over ssh: %v: %s", command, err, stderr.String())
	}
	return string(out)
}
