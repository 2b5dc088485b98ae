package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// A clean GPU for every tenant, on the nested host reached over SSH (the
// reset goes through L1's kernel, which qemu+tcp cannot reach), with l1
// the only host placement may choose. No VM boots (running = false): what
// is proven is what the destroy does to the GPU, and who may have it next.
//   - A placed VM is destroyed: Kohaku asks L1's kernel to reset the
//     stand-in (a kprobe counts pci_reset_function), which cannot (its one
//     method, a bus reset of the VGA function, is unusable while the audio
//     function shares the bus), so the stand-in is quarantined: a warning
//     names it and how to return it, the marker names the VM, the stand-in
//     is back on its host drivers with no claim left.
//   - kohaku_capacity shows it quarantined, with why; a second placed VM
//     is not given it (nothing made, nothing held), and a claim taken
//     through the protocol directly is refused too.
//   - The kohaku_gpu_reset action returns only what it reset: on the
//     stand-in (not on vfio-pci) it fails and the marker stays; on QEMU's
//     edu device (bound by hand, marked by the test, a reset the kernel
//     can do) it resets, and the operator's health check (configured on
//     l1, run in L1 with edu's address) gates the return: failing, the
//     marker stays and the error shows the check's output; passing, the
//     marker is cleared and the action says so.
//   - Deleting the stand-in's marker by hand, as the warning says, makes it
//     placeable again: the second VM lands on it, and its destroy
//     quarantines it again.
//
// The stand-in cannot be reset by any kernel method, so this test cannot
// show a placed GPU reset and placed again without an operator; the edu
// step shows the reset path and clearing on a device the kernel resets.
func TestAccGPU_tenantHygieneQuarantineAndReturn(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_gpu_reset action")
	h := nestedhost.RequireSSH(t)
	requireNoLocalStandIn(t)
	for _, a := range []string{h.GPU, h.GPUAudio, h.EDU} {
		if nestedhost.Driver(t, h, a) == vfio.DriverVFIO {
			t.Fatalf("the nested host is not in its initial state: %s is on vfio-pci", a)
		}
	}
	gpu, err := vfio.ParseAddress(h.GPU)
	if err != nil {
		t.Fatal(err)
	}
	edu, err := vfio.ParseAddress(h.EDU)
	if err != nil {
		t.Fatal(err)
	}
	first, second := "kohaku-acc-hygiene-a", "kohaku-acc-hygiene-b"
	placementCleanup(t, h, first, second)
	ctx := context.Background()
	cl := &claim.Claimer{Host: vmClient(t, h.URI)}
	t.Cleanup(func() {
		for _, a := range []vfio.Address{gpu, edu} {
			_, _ = nestedhost.VirshErr(h, "vol-delete", "--pool", claim.Pool, claim.QuarantineName(a))
		}
		if out, err := nestedhost.VirshErr(h, "nodedev-dumpxml", nestedhost.NodeDeviceName(h.EDU)); err == nil && strings.Contains(out, "<name>vfio-pci</name>") {
			_, _ = nestedhost.VirshErr(h, "nodedev-reattach", nestedhost.NodeDeviceName(h.EDU))
		}
	})
	if ms, err := cl.Quarantines(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("the nested host is not in its initial state: quarantined %+v (%v)", ms, err)
	}
	resets := resetProbe(t, h)

	header := faultCLIHead + fmt.Sprintf("provider \"kohaku\" {\n  uri   = %q\n  hosts = { l1 = { uri = %q } }\n}\n", accURI(), h.SSHURI)
	capacity := fmt.Sprintf(`
data "kohaku_capacity" "l1" {
  hosts = ["l1"]
}

output "standin" {
  value = [for g in data.kohaku_capacity.l1.capacity["l1"].gpus : g if g.address == %q]
}

output "quarantined" {
  value = sum([for m in data.kohaku_capacity.l1.capacity["l1"].gpu_models : m.quarantined])
}
`, h.GPU)
	actions := fmt.Sprintf(`
action "kohaku_gpu_reset" "standin" {
  config {
    host    = "l1"
    address = %q
  }
}

action "kohaku_gpu_reset" "edu" {
  config {
    host    = "l1"
    address = %q
  }
}
`, h.GPU, h.EDU)
	w := acctest.NewWorkspace(t, header+placedVMConfig("vm", first, 1, `["l1"]`))
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }

	// 1. a placed VM on the stand-in, destroyed
	w.Must("apply", "-auto-approve", "-input=false")
	if err := expectDrivers(h, onVFIO(h))(nil); err != nil {
		t.Fatalf("the placed VM's GPU: %v", err)
	}
	before := resets()
	out := w.Must("destroy", "-auto-approve", "-input=false")
	for _, want := range []string{
		"Destroying VM " + first + ": GPU " + h.GPU + " quarantined",
		"not reset after VM " + first,
		"could not reset " + h.GPU + " by bus reset",
		"kohaku_gpu_reset action",
		"virsh vol-delete --pool " + claim.Pool + " " + claim.QuarantineName(gpu),
	} {
		if !strings.Contains(flat(out), want) {
			t.Errorf("the destroy's output lacks %q:\n%s", want, out)
		}
	}
	if n := resets() - before; n < 1 {
		t.Errorf("the destroy asked the nested host's kernel for %d PCI function resets, want at least 1", n)
	}
	if err := nestedDomainGone(h, first)(nil); err != nil {
		t.Error(err)
	}
	if err := standInGiven(t, h)(nil); err != nil {
		t.Errorf("the quarantined stand-in was not given back as usual: %v", err)
	}
	ms, err := cl.Quarantines(ctx)
	if err != nil || len(ms) != 1 || ms[0].Device != h.GPU || ms[0].From.VM != first || !strings.Contains(ms[0].Reason, "not reset after VM "+first) {
		t.Fatalf("quarantined %+v (%v), want the stand-in, given back by %s", ms, err, first)
	}

	// 2. shown quarantined; not placed; not claimable
	w.Write(header + capacity)
	w.Must("apply", "-auto-approve", "-input=false")
	var standin []struct {
		State  string `json:"state"`
		Holder string `json:"holder"`
	}
	if err := json.Unmarshal([]byte(w.Must("output", "-json", "standin")), &standin); err != nil {
		t.Fatal(err)
	}
	if len(standin) != 1 || standin[0].State != "quarantined" || !strings.Contains(standin[0].Holder, "not reset after VM "+first) {
		t.Errorf("kohaku_capacity shows the stand-in as %+v, want quarantined with why", standin)
	}
	if n := strings.TrimSpace(w.Must("output", "-json", "quarantined")); n != "1" {
		t.Errorf("kohaku_capacity counts %s quarantined GPUs, want 1", n)
	}
	w.Write(header + placedVMConfig("vm", second, 1, `["l1"]`))
	out, err = w.Run("apply", "-auto-approve", "-input=false")
	if err == nil || !strings.Contains(flat(out), "Creating VM "+second) || !strings.Contains(flat(out), "quarantined") ||
		!strings.Contains(flat(out), "Nothing was created, and nothing is held") {
		t.Errorf("a VM asking for the quarantined stand-in was not refused naming the quarantine (err %v):\n%s", err, out)
	}
	if err := nestedDomainGone(h, second)(nil); err != nil {
		t.Error(err)
	}
	if recs, err := l1Claims(t, h); err != nil || len(recs) != 0 {
		t.Errorf("claims after the refused VM: %+v (%v)", recs, err)
	}
	other := claim.Holder{VM: "kohaku-acc-hygiene-direct", UUID: "5d2e8f1a-7c3b-4a6d-9e0f-1b2c3d4e5f60"}
	var qe *claim.QuarantinedError
	if _, err := cl.Take(ctx, claim.Device{Address: gpu, Functions: []vfio.Address{gpu}}, other); !errors.As(err, &qe) {
		t.Errorf("a claim on the quarantined stand-in: %v, want a *claim.QuarantinedError", err)
		_ = cl.Release(ctx, gpu, other)
	}

	// 3. the reset action returns what it resets, and only that
	w.Write(header + actions)
	out, err = w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_gpu_reset.standin")
	if err == nil || strings.Contains(out, "Cleared the quarantine") {
		t.Errorf("the action on the stand-in (on its host drivers) did not fail, or cleared its quarantine (err %v):\n%s", err, out)
	}
	if ms, err := cl.Quarantines(ctx); err != nil || len(ms) != 1 {
		t.Errorf("after a failed reset: quarantined %+v (%v), want the stand-in still", ms, err)
	}
	nestedhost.Virsh(t, h, "nodedev-detach", nestedhost.NodeDeviceName(h.EDU), "--driver", "vfio")
	if err := cl.Quarantine(ctx, edu, "marked by the acceptance test", claim.Holder{}); err != nil {
		t.Fatal(err)
	}
	// the operator's health check gates the return: failing, the reset
	// succeeds and the marker stays; passing, it is cleared
	check := `sh -c 'echo "checking $1"; test -e "/run/kohaku-gpu-ok-$1"' check`
	w.Write(faultCLIHead + fmt.Sprintf("provider \"kohaku\" {\n  uri   = %q\n  hosts = { l1 = {\n    uri = %q\n    gpu_health_check = { command = %q, timeout = \"30s\" }\n  } }\n}\n", accURI(), h.SSHURI, check) + actions)
	t.Cleanup(func() { nestedhost.SSH(t, h, "rm -f /run/kohaku-gpu-ok-"+h.EDU) })
	out, err = w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_gpu_reset.edu")
	if err == nil || !strings.Contains(flat(out), "health check failed for "+h.EDU+" after its reset") || !strings.Contains(flat(out), "checking "+h.EDU) ||
		strings.Contains(out, "Cleared the quarantine") {
		t.Errorf("a failing health check did not keep edu back, naming the check's output (err %v):\n%s", err, out)
	}
	if ms, err := cl.Quarantines(ctx); err != nil || len(ms) != 2 {
		t.Errorf("after a failed health check: quarantined %+v (%v), want the stand-in and edu", ms, err)
	}
	nestedhost.SSH(t, h, "touch /run/kohaku-gpu-ok-"+h.EDU)
	before = resets()
	out, err = w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_gpu_reset.edu")
	if err != nil || !strings.Contains(flat(out), "Reset "+h.EDU) || !strings.Contains(flat(out), "health check passed for "+h.EDU) ||
		!strings.Contains(flat(out), "Cleared the quarantine of "+h.EDU) {
		t.Errorf("the action on edu did not reset it, pass its health check and clear its quarantine (err %v):\n%s", err, out)
	}
	if n := resets() - before; n != 1 {
		t.Errorf("the action made %d PCI function resets, want 1", n)
	}
	ms, err = cl.Quarantines(ctx)
	if err != nil || len(ms) != 1 || ms[0].Device != h.GPU {
		t.Errorf("after the reset of edu: quarantined %+v (%v), want the stand-in alone", ms, err)
	}
	nestedhost.Virsh(t, h, "nodedev-reattach", nestedhost.NodeDeviceName(h.EDU))

	// 4. returned by hand, as the warning says: placed again
	nestedhost.Virsh(t, h, "vol-delete", "--pool", claim.Pool, claim.QuarantineName(gpu))
	w.Write(header + placedVMConfig("vm", second, 1, `["l1"]`))
	w.Must("apply", "-auto-approve", "-input=false")
	var placed []string
	for _, r := range w.State() {
		if r.Address == "kohaku_vm.vm" {
			gs, _ := r.Values["placed_gpus"].([]any)
			for _, g := range gs {
				placed = append(placed, fmt.Sprint(g))
			}
		}
	}
	if len(placed) != 1 || placed[0] != h.GPU {
		t.Errorf("the returned stand-in was not placed: placed_gpus %q", placed)
	}
	out = w.Must("destroy", "-auto-approve", "-input=false")
	if !strings.Contains(flat(out), "GPU "+h.GPU+" quarantined") {
		t.Errorf("the second destroy did not quarantine the stand-in again:\n%s", out)
	}
	if err := standInGiven(t, h)(nil); err != nil {
		t.Error(err)
	}
}
