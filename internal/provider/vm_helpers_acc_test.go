package provider

import (
	"context"
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

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// vmEnv is what the VM acceptance tests read from the test host.
type vmEnv struct {
	URI       string
	Pool      string // where overlays go (kohaku-acc)
	ImagePool string // where the base image is (kohaku-images)
	Base      string // the base image volume (rootfs.qcow2)
	Kernel    string
	Initrd    string
}

func newVMEnv(t *testing.T) vmEnv {
	t.Helper()
	return vmEnv{
		URI:       acctest.URI(t),
		Pool:      acctest.Env(t, "KOHAKU_TEST_POOL"),
		ImagePool: acctest.Env(t, "KOHAKU_TEST_IMAGE_POOL"),
		Base:      acctest.Env(t, "KOHAKU_TEST_BASE_VOLUME"),
		Kernel:    acctest.Env(t, "KOHAKU_TEST_KERNEL"),
		Initrd:    acctest.Env(t, "KOHAKU_TEST_INITRD"),
	}
}

// vmTestPrefix returns a name prefix unique to one test, under the
// kohaku-acc- prefix the sweeper removes after a crashed run. It also
// registers a cleanup that removes whatever the test left with that prefix
// (a failed test must not litter the host for the next one), including the
// log files libvirt and the serial console wrote.
func vmTestPrefix(t *testing.T, env vmEnv, short string) string {
	t.Helper()
	prefix := fmt.Sprintf("kohaku-acc-%s-%s-", short, tfacctest.RandStringFromCharSet(5, "abcdefghijklmnopqrstuvwxyz0123456789"))
	t.Cleanup(func() {
		if err := sweepVMs(env.URI, prefix, env.Pool, "default"); err != nil {
			t.Errorf("cleaning up after the test: %v", err)
		}
		logs, _ := filepath.Glob(filepath.Join("/var/log/libvirt/qemu", prefix+"*.log"))
		for _, l := range logs {
			os.Remove(l)
		}
	})
	return prefix
}

// vmVirsh runs virsh against the test host: an independent judge of what the
// provider did.
func vmVirsh(uri string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", uri}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// vmLeftovers lists the domains and the volumes of pools whose names start
// with prefix, as virsh sees them.
func vmLeftovers(uri, prefix string, pools ...string) ([]string, error) {
	var left []string
	out, err := vmVirsh(uri, "list", "--all", "--name")
	if err != nil {
		return nil, err
	}
	for _, n := range strings.Fields(out) {
		if strings.HasPrefix(n, prefix) {
			left = append(left, "domain "+n)
		}
	}
	for _, p := range pools {
		out, err := vmVirsh(uri, "vol-list", "--pool", p)
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

// vmCheckNothingLeft fails when any domain or volume of the test remains.
func vmCheckNothingLeft(env vmEnv, prefix string) func(*terraform.State) error {
	return func(*terraform.State) error {
		left, err := vmLeftovers(env.URI, prefix, env.Pool, "default")
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
		}
		return nil
	}
}

// vmCheckDomState compares virsh domstate with want ("running", "shut off").
func vmCheckDomState(env vmEnv, name, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := vmVirsh(env.URI, "domstate", name)
		if err != nil {
			return err
		}
		if out != want {
			return fmt.Errorf("virsh domstate %s = %q, want %q", name, out, want)
		}
		return nil
	}
}

// vmCheckXML checks that virsh dumpxml (of the persistent definition)
// contains every fragment.
func vmCheckXML(env vmEnv, name string, fragments ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := vmVirsh(env.URI, "dumpxml", "--inactive", name)
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

// vmDefineByHand defines a bare domain with virsh, as someone else might.
func vmDefineByHand(t *testing.T, env vmEnv, name string) {
	t.Helper()
	dir := t.TempDir()
	xml := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os></domain>`, name)
	f := filepath.Join(dir, "dom.xml")
	if err := os.WriteFile(f, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := vmVirsh(env.URI, "define", f); err != nil {
		t.Fatalf("defining %s by hand: %v\n%s", name, err, out)
	}
}

// vmClient dials the test host directly, for checks that need the provider's
// own libvirt layer (RPC counts).
func vmClient(t *testing.T, uri string) *virt.Client {
	t.Helper()
	c, err := virt.New(virt.Settings{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
