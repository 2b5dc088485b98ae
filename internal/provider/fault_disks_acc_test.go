package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// The calls the disk faults hold.
const (
	lvProcDomainBlockResize       = 251 // REMOTE_PROC_DOMAIN_BLOCK_RESIZE
	lvProcDomainAttachDeviceFlags = 160 // REMOTE_PROC_DOMAIN_ATTACH_DEVICE_FLAGS
)

// faultDiskConfig is the tiny guest, running, through uri (the proxy) with
// a short call_timeout, its boot disk of sizeGiB and the given data_disks.
func faultDiskConfig(t *testing.T, env acctest.VMEnv, uri, prefix string, sizeGiB int, disks string) string {
	t.Helper()
	return faultCLIHead + fmt.Sprintf("provider \"kohaku\" {\n  uri          = %q\n  call_timeout = \"15s\"\n}\n", uri) +
		tinyGuest(t, env.Pool, "tiny", "test", prefix+"seed.iso", prefix+"vm", "tiny", fmt.Sprintf(`  disk = {
    base_pool   = %q
    base_volume = %q
    pool        = %q
    size_gib    = %d
  }
  data_disks = [%s]
`, env.ImagePool, env.Base, env.Pool, sizeGiB, disks))
}

// faultVMAttrs reads the VM's disk size and data disk names from state.
func faultVMAttrs(t *testing.T, st []acctest.StateResource) (sizeGiB float64, disks []string) {
	t.Helper()
	for _, r := range st {
		if r.Type != "kohaku_vm" {
			continue
		}
		disk, _ := r.Values["disk"].(map[string]any)
		sizeGiB, _ = disk["size_gib"].(float64)
		list, _ := r.Values["data_disks"].([]any)
		for _, d := range list {
			m, _ := d.(map[string]any)
			n, _ := m["name"].(string)
			disks = append(disks, n)
		}
		return sizeGiB, disks
	}
	t.Fatalf("no kohaku_vm in state")
	return 0, nil
}

// Ctrl-C while a running VM's boot disk grows and while a data disk is
// plugged in, each call held by the proxy so the interrupt lands while it
// is in flight (it then fails at call_timeout): the host holds exactly what
// state records, state's disk size and data disks are what the domain has,
// and once the calls go through the next apply converges.
func TestAccFault_sigintDuringDiskChanges(t *testing.T) {
	env := acctest.NewVMEnv(t)
	acctest.NeedTerraform(t)
	prefix := vmTestPrefix(t, env, "fdisk")
	proxy := newFaultProxy(t, faultTCPHostPort(t, acctest.Env(t, "KOHAKU_TEST_TCP_URI")))
	vm := prefix + "vm"
	w := acctest.NewWorkspace(t, faultDiskConfig(t, env, proxy.URI(), prefix, 4, ""))
	w.Must("apply", "-auto-approve", "-input=false")

	// The resize.
	proxy.hold.Store(uint32(lvProcDomainBlockResize), true)
	w.Write(faultDiskConfig(t, env, proxy.URI(), prefix, 5, ""))
	out, sent := faultInterruptApply(t, w, func() bool { return proxy.held.Load() >= 1 })
	if !sent {
		t.Fatalf("the apply ended before the resize hung:\n%s", out)
	}
	faultWants(t, out, "Interrupt received", `failed at step "grow the boot disk"`)
	st := w.CheckHostMatchesState(env, prefix)
	if size, _ := faultVMAttrs(t, st); size != 4 {
		t.Errorf("state says disk.size_gib %v after the interrupted resize; the disk was not grown", size)
	}
	if err := checkBlockCapacity(env, vm, "vda", 4<<30)(nil); err != nil {
		t.Error(err)
	}
	t.Logf("after SIGINT in the resize: host matches state (4 GiB); terraform said:\n%s", faultTail(out, 12))
	proxy.hold.Delete(uint32(lvProcDomainBlockResize))
	w.Must("apply", "-auto-approve", "-input=false")
	if size, _ := faultVMAttrs(t, w.CheckHostMatchesState(env, prefix)); size != 5 {
		t.Errorf("state says disk.size_gib %v after the converging apply, want 5", size)
	}
	if err := checkBlockCapacity(env, vm, "vda", 5<<30)(nil); err != nil {
		t.Error(err)
	}

	// The attach.
	disk := fmt.Sprintf(`{ name = "d", size_gib = 1, pool = %q }`, env.Pool)
	held := proxy.held.Load()
	proxy.hold.Store(uint32(lvProcDomainAttachDeviceFlags), true)
	w.Write(faultDiskConfig(t, env, proxy.URI(), prefix, 5, disk))
	out, sent = faultInterruptApply(t, w, func() bool { return proxy.held.Load() > held })
	if !sent {
		t.Fatalf("the apply ended before the attach hung:\n%s", out)
	}
	faultWants(t, out, "Interrupt received", `failed at step "attach a data disk"`)
	st = w.CheckHostMatchesState(env, prefix)
	if _, disks := faultVMAttrs(t, st); len(disks) != 0 {
		t.Errorf("state records data disks %v that the domain does not have", disks)
	}
	if err := checkBlockList(env, vm, nil, []string{vm + "-d.qcow2"})(nil); err != nil {
		t.Error(err)
	}
	t.Logf("after SIGINT in the attach: host matches state (no data disk); terraform said:\n%s", faultTail(out, 12))
	proxy.hold.Delete(uint32(lvProcDomainAttachDeviceFlags))
	w.Converge(env, prefix, 4) // seed, domain, overlay, data disk
}

// faultWants checks that terraform's output (its lines unwrapped) says
// each of want.
func faultWants(t *testing.T, out string, want ...string) {
	t.Helper()
	flat := strings.Join(strings.Fields(out), " ")
	for _, s := range want {
		if !strings.Contains(flat, s) {
			t.Errorf("terraform's output lacks %q:\n%s", s, out)
		}
	}
}
