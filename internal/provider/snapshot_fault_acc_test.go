package provider

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// lvProcVolCreateXMLFrom is REMOTE_PROC_STORAGE_VOL_CREATE_XML_FROM: every
// copy a snapshot or a revert makes of a stopped VM's disk.
const lvProcVolCreateXMLFrom = 125

// snapshotFaultConfig is a stopped VM with a data disk, reached through
// uri (the fault proxy), with a snapshot and its revert action when snap.
func snapshotFaultConfig(env acctest.VMEnv, uri, prefix string, snap bool) string {
	c := faultCLIHead + fmt.Sprintf(`
provider "kohaku" {
  uri          = %[1]q
  call_timeout = "15s"
}
`, uri) + noOSVM(env, prefix, "src", fmt.Sprintf("  running    = false\n  data_disks = [{ name = \"data\", size_gib = 1, pool = %q }]\n", env.Pool))
	if snap {
		c += snapshotResources
	}
	return c
}

// A revert interrupted and failing on the real host, under Terraform 1.14:
// Ctrl-C while the first staged copy is held by the proxy (before the
// commit) ends the revert with the VM's disks unchanged and no staged copy
// left, and an empty plan (Terraform itself reports the interrupted action
// as complete, exit status 0, without its error); a copy refused after the commit (the old disks
// deleted, the first made again refused) fails saying the VM cannot start
// until the revert runs again, and libvirt indeed refuses to start it; the
// next invocation finishes the revert ("finishing an interrupted revert"),
// both disks read the snapshot's marker, and the plan is empty.
func TestAccSnapshot_interruptedRevert(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_vm_revert action")
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "snapi")
	var copies atomic.Int64
	var rejectFrom atomic.Int64 // reject the copies from this one on; 0: none
	proxy := newFaultProxyRejecting(t, faultTCPHostPort(t, acctest.Env(t, "KOHAKU_TEST_TCP_URI")), func(h virt.Header) (any, bool) {
		if h.Procedure != lvProcVolCreateXMLFrom || h.Program != virt.WireProgRemote || h.Type != virt.WireTypeCall {
			return nil, false
		}
		n := copies.Add(1)
		if from := rejectFrom.Load(); from > 0 && n >= from {
			return "injected: the copy was refused", true
		}
		return nil, false
	})
	w := acctest.NewWorkspace(t, snapshotFaultConfig(env, proxy.URI(), prefix, false))
	w.Must("apply", "-auto-approve", "-input=false")
	root, data := env.Pool+"/"+prefix+"src-root.qcow2", env.Pool+"/"+prefix+"src-data.qcow2"
	const at = "64k 64k"
	disks := func(pattern string, write bool) {
		t.Helper()
		for _, v := range []string{root, data} {
			cmd := "read -P " + pattern + " " + at
			if write {
				cmd = "write -P " + pattern + " " + at
			}
			if err := qemuIO(v, env, !write, cmd); err != nil {
				t.Errorf("%s: %v", v, err)
			}
		}
	}
	disks("0x11", true)
	w.Write(snapshotFaultConfig(env, proxy.URI(), prefix, true))
	w.Must("apply", "-auto-approve", "-input=false")
	disks("0x22", true)
	noStaging := func(when string) {
		t.Helper()
		if vols, err := acctest.Virsh(env.URI, "vol-list", env.Pool); err != nil || strings.Contains(vols, ".kohaku-revert") {
			t.Errorf("%s: staged copies left (%v):\n%s", when, err, vols)
		}
	}
	emptyPlan := func(when string) {
		t.Helper()
		if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
			t.Errorf("%s: the plan is not empty (%v):\n%s", when, err, out)
		}
	}

	// Ctrl-C before the commit: the first staged copy is held.
	proxy.hold.Store(uint32(lvProcVolCreateXMLFrom), true)
	out, sent := faultInterruptApply(t, w, func() bool { return proxy.held.Load() >= 1 }, "-invoke=action.kohaku_vm_revert.src")
	if !sent {
		t.Fatalf("the revert ended before its first copy was held:\n%s", out)
	}
	t.Logf("Ctrl-C during the staging copy:\n%s", faultTail(out, 14))
	// Terraform 1.14.9 stops the action and says "Apply complete!" with
	// exit status 0, without the action's own error: the host is checked.
	faultWants(t, out, "Interrupt received")
	proxy.hold.Delete(uint32(lvProcVolCreateXMLFrom))
	disks("0x22", false)
	noStaging("after Ctrl-C before the commit")
	emptyPlan("after Ctrl-C before the commit")

	// A copy refused after the commit: the first disk made again.
	rejectFrom.Store(copies.Load() + 3) // two staged copies go through
	out, err := w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_vm_revert.src")
	t.Logf("a copy refused after the commit:\n%s", faultTail(out, 14))
	if err == nil {
		t.Fatalf("the revert did not fail:\n%s", out)
	}
	faultWants(t, out, "injected: the copy was refused", "cannot start until the revert is run again")
	if out, err := acctest.Virsh(env.URI, "start", prefix+"src"); err == nil {
		_, _ = acctest.Virsh(env.URI, "destroy", prefix+"src")
		t.Errorf("the VM started on a half-reverted set of disks: %s", out)
	}

	// Invoked again, the revert finishes.
	rejectFrom.Store(0)
	out = w.Must("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_vm_revert.src")
	faultWants(t, out, "finishing an interrupted revert")
	disks("0x11", false)
	noStaging("after the finished revert")
	emptyPlan("after the finished revert")
	w.Must("destroy", "-auto-approve", "-input=false")
}
