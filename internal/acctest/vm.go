package acctest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tfacctest "github.com/hashicorp/terraform-plugin-testing/helper/acctest"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// VMEnv is what the VM acceptance tests read from the test host.
type VMEnv struct {
	URI       string
	Pool      string // where overlays go (kohaku-acc)
	ImagePool string // where the base image is (kohaku-images)
	Base      string // the base image volume (rootfs.qcow2)
	Kernel    string
	Initrd    string
}

// NewVMEnv reads the VM test environment the test host exports; like Env it
// skips without TF_ACC and fails when a setting is missing.
func NewVMEnv(t testing.TB) VMEnv {
	t.Helper()
	return VMEnv{
		URI:       URI(t),
		Pool:      Env(t, "KOHAKU_TEST_POOL"),
		ImagePool: Env(t, "KOHAKU_TEST_IMAGE_POOL"),
		Base:      Env(t, "KOHAKU_TEST_BASE_VOLUME"),
		Kernel:    Env(t, "KOHAKU_TEST_KERNEL"),
		Initrd:    Env(t, "KOHAKU_TEST_INITRD"),
	}
}

// Prefix returns a name prefix unique to one test, under the kohaku-acc-
// prefix the sweeper removes after a crashed run. It also registers a
// cleanup that calls sweep with the prefix to remove whatever the test left
// (a failed test must not litter the host for the next one) and removes the
// log files libvirt and the serial console wrote for it.
func Prefix(t testing.TB, short string, sweep func(prefix string) error) string {
	t.Helper()
	prefix := fmt.Sprintf("kohaku-acc-%s-%s-", short, tfacctest.RandStringFromCharSet(5, "abcdefghijklmnopqrstuvwxyz0123456789"))
	t.Cleanup(func() {
		if err := sweep(prefix); err != nil {
			t.Errorf("cleaning up after the test: %v", err)
		}
		logs, _ := filepath.Glob(filepath.Join("/var/log/libvirt/qemu", prefix+"*.log"))
		for _, l := range logs {
			os.Remove(l)
		}
	})
	return prefix
}

// Virsh runs virsh against the test host: an independent judge of what the
// provider did.
func Virsh(uri string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", uri}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Leftovers lists the domains and the volumes of pools whose names start
// with prefix, as virsh sees them.
func Leftovers(uri, prefix string, pools ...string) ([]string, error) {
	var left []string
	out, err := Virsh(uri, "list", "--all", "--name")
	if err != nil {
		return nil, err
	}
	for _, n := range strings.Fields(out) {
		if strings.HasPrefix(n, prefix) {
			left = append(left, "domain "+n)
		}
	}
	for _, p := range pools {
		out, err := Virsh(uri, "vol-list", "--pool", p)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
				left = append(left, "volume "+p+"/"+f[0])
			}
		}
	}
	return left, nil
}

// CheckNothingLeft fails when any domain or volume of the test remains.
func CheckNothingLeft(env VMEnv, prefix string) func(*terraform.State) error {
	return func(*terraform.State) error {
		left, err := Leftovers(env.URI, prefix, env.Pool, "default")
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
		}
		return nil
	}
}

// CheckDomState compares virsh domstate with want ("running", "shut off").
func CheckDomState(env VMEnv, name, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := Virsh(env.URI, "domstate", name)
		if err != nil {
			return err
		}
		if out != want {
			return fmt.Errorf("virsh domstate %s = %q, want %q", name, out, want)
		}
		return nil
	}
}

// CheckXML checks that virsh dumpxml (of the persistent definition)
// contains every fragment.
func CheckXML(env VMEnv, name string, fragments ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := Virsh(env.URI, "dumpxml", "--inactive", name)
		if err != nil {
			return err
		}
		for _, f := range fragments {
			if !strings.Contains(out, f) {
				return fmt.Errorf("the XML of %s lacks %q:\n%s", name, f, out)
			}
		}
		return nil
	}
}

// DefineByHand defines a bare domain with virsh, as someone else might.
func DefineByHand(t testing.TB, env VMEnv, name string) {
	t.Helper()
	dir := t.TempDir()
	xml := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os></domain>`, name)
	f := filepath.Join(dir, "dom.xml")
	if err := os.WriteFile(f, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := Virsh(env.URI, "define", f); err != nil {
		t.Fatalf("defining %s by hand: %v\n%s", name, err, out)
	}
}

// GuestExec runs argv in a running guest through its QEMU guest agent
// (virsh qemu-agent-command guest-exec, then guest-exec-status until it
// exits, at most a minute) and returns what it wrote to stdout. A non-zero
// exit is an error carrying stdout and stderr.
func GuestExec(uri, domain string, argv ...string) (string, error) {
	req, err := json.Marshal(map[string]any{"execute": "guest-exec", "arguments": map[string]any{
		"path": argv[0], "arg": argv[1:], "capture-output": true,
	}})
	if err != nil {
		return "", err
	}
	out, err := Virsh(uri, "qemu-agent-command", domain, string(req))
	if err != nil {
		return "", err
	}
	var started struct {
		Return struct {
			PID int `json:"pid"`
		} `json:"return"`
	}
	if err := json.Unmarshal([]byte(out), &started); err != nil {
		return "", fmt.Errorf("guest-exec answered %q: %w", out, err)
	}
	status := fmt.Sprintf(`{"execute":"guest-exec-status","arguments":{"pid":%d}}`, started.Return.PID)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		out, err := Virsh(uri, "qemu-agent-command", domain, status)
		if err != nil {
			return "", err
		}
		var st struct {
			Return struct {
				Exited   bool   `json:"exited"`
				ExitCode int    `json:"exitcode"`
				Out      []byte `json:"out-data"`
				Err      []byte `json:"err-data"`
			} `json:"return"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return "", fmt.Errorf("guest-exec-status answered %q: %w", out, err)
		}
		if !st.Return.Exited {
			continue
		}
		if st.Return.ExitCode != 0 {
			return string(st.Return.Out), fmt.Errorf("%s in %s exited %d: %s%s", strings.Join(argv, " "), domain, st.Return.ExitCode, st.Return.Out, st.Return.Err)
		}
		return string(st.Return.Out), nil
	}
	return "", fmt.Errorf("%s in %s did not exit within a minute", strings.Join(argv, " "), domain)
}
