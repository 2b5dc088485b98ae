package provider

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// A backup interrupted and failing on the real host, through a proxy in
// front of its libvirtd (about 15 s): Ctrl-C while the copy's upload is
// held leaves neither the copy nor a manifest in the pool; a manifest whose
// upload is refused after the copy landed and matched fails the create and
// deletes the copy; neither leaves state, and the next apply makes the
// backup whole.
func TestAccBackup_interruptedCopy(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "bki")
	t.Cleanup(func() {
		if err := sweepPools(env.URI, prefix); err != nil {
			t.Errorf("cleaning up the backup pool: %v", err)
		}
	})
	var uploads, rejectAt atomic.Int64 // reject that upload; 0: none
	proxy := newFaultProxyRejecting(t, faultTCPHostPort(t, acctest.Env(t, "KOHAKU_TEST_TCP_URI")), func(h virt.Header) (any, bool) {
		if h.Procedure != lvProcVolUpload || h.Program != virt.WireProgRemote || h.Type != virt.WireTypeCall {
			return nil, false
		}
		if n := uploads.Add(1); n == rejectAt.Load() {
			return "injected: the upload was refused", true
		}
		return nil, false
	})
	backups := prefix + "backups"
	w := acctest.NewWorkspace(t, backupConfigAt(proxy.URI(), env, prefix, "", snapshotOfSrc))
	w.Must("apply", "-auto-approve", "-input=false")
	config := backupConfigAt(proxy.URI(), env, prefix, "", snapshotOfSrc+backupOf("data", "data", ""))
	w.Write(config)
	nothingLeft := func(when string) {
		t.Helper()
		if vols, err := acctest.Virsh(env.URI, "vol-list", backups); err != nil || strings.Contains(vols, "data.qcow2") {
			t.Errorf("%s: the backup pool holds (%v):\n%s", when, err, vols)
		}
		if st, _ := w.Run("state", "list"); strings.Contains(st, "kohaku_backup.data") {
			t.Errorf("%s: the state has the backup:\n%s", when, st)
		}
	}

	// Ctrl-C while the copy lands.
	proxy.hold.Store(uint32(lvProcVolUpload), true)
	out, sent := faultInterruptApply(t, w, func() bool { return proxy.held.Load() >= 1 })
	if !sent {
		t.Fatalf("the apply ended before the copy's upload was held:\n%s", out)
	}
	t.Logf("Ctrl-C during the copy:\n%s", faultTail(out, 12))
	faultWants(t, out, "Interrupt received")
	proxy.hold.Delete(uint32(lvProcVolUpload))
	nothingLeft("after Ctrl-C during the copy")

	// The copy lands and matches; its manifest's upload is refused.
	rejectAt.Store(uploads.Load() + 2)
	out, err := w.Run("apply", "-auto-approve", "-input=false")
	t.Logf("the manifest refused:\n%s", faultTail(out, 12))
	if err == nil {
		t.Fatalf("the backup was made though its manifest was refused:\n%s", out)
	}
	faultWants(t, out, "writing the manifest", "injected: the upload was refused", "(the copy was deleted)")
	nothingLeft("after the manifest was refused")

	// Nothing in the way: the backup is made, whole.
	rejectAt.Store(0)
	w.Must("apply", "-auto-approve", "-input=false")
	if out, err := acctest.Virsh(env.URI, "vol-info", "--pool", backups, "data.qcow2.kohaku-backup"); err != nil {
		t.Errorf("the backup made after the failures has no manifest: %v: %s", err, out)
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the backup is not empty (%v):\n%s", err, out)
	}
	w.Must("destroy", "-auto-approve", "-input=false")
}
