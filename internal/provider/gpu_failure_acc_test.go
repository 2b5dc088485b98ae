package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// The failure paths of the GPU, in the nested host through the
// terraform CLI: a binding whose functions a running domain holds, a VM
// whose create fails after its binding, a rollback that cannot give a
// function back. Each test ends as it begins, with the functions on vfio-pci
// exactly those the state records, read through libvirt's node-device API.

// gpuFailVFIO lists the PCI functions of the nested host on vfio-pci, read
// through libvirt's node-device API, sorted.
func gpuFailVFIO(t *testing.T, c *virt.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	docs, err := c.PCINodeDevices(ctx)
	if err != nil {
		t.Fatalf("listing the nested host's PCI node devices: %v", err)
	}
	inv, err := vfio.ParseInventory(docs)
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, d := range inv.Devices() {
		if d.Driver == vfio.DriverVFIO {
			on = append(on, d.Address.String())
		}
	}
	slices.Sort(on)
	return on
}

// gpuFailRecorded lists the functions the state's bindings record as on
// vfio-pci, sorted.
func gpuFailRecorded(t *testing.T, st []acctest.StateResource) []string {
	t.Helper()
	var rec []string
	for _, r := range st {
		if r.Type != "kohaku_gpu_binding" {
			continue
		}
		details, _ := r.Values["function_details"].([]any)
		for _, d := range details {
			m, _ := d.(map[string]any)
			if m["current_driver"] == vfio.DriverVFIO {
				rec = append(rec, fmt.Sprint(m["address"]))
			}
		}
	}
	slices.Sort(rec)
	return rec
}

// gpuFailAgree fails the test unless the functions on vfio-pci in the nested
// host are exactly those the state records there: none bound behind the
// state's back, none the state wrongly believes bound.
func gpuFailAgree(t *testing.T, c *virt.Client, st []acctest.StateResource, when string) {
	t.Helper()
	on, rec := gpuFailVFIO(t, c), gpuFailRecorded(t, st)
	if !slices.Equal(on, rec) {
		t.Fatalf("%s: the nested host has %q on vfio-pci, the state records %q", when, on, rec)
	}
}

// gpuFailSays checks terraform's human output for the parts, in order,
// with the diagnostic box's rules and the line wrapping taken out.
func gpuFailSays(t *testing.T, out string, parts ...string) {
	t.Helper()
	flat := strings.Join(strings.Fields(strings.ReplaceAll(out, "│", " ")), " ")
	for i, p := range parts {
		parts[i] = strings.Join(strings.Fields(p), " ")
	}
	rest := flat
	for _, p := range parts {
		i := strings.Index(rest, p)
		if i < 0 {
			t.Fatalf("terraform's output does not say %q (after the parts before it):\n%s", p, out)
		}
		rest = rest[i+len(p):]
	}
}

// gpuFailResource returns the state's resource of a type, or nil.
func gpuFailResource(st []acctest.StateResource, typ string) *acctest.StateResource {
	for i := range st {
		if st[i].Type == typ {
			return &st[i]
		}
	}
	return nil
}

// gpuFailDomain defines a domain on the nested host through libvirt, not
// through the provider: a small QEMU guest with no disk, passing through
// the given functions as unmanaged VFIO hostdevs (as kohaku_vm does).
func gpuFailDomain(t *testing.T, h *nestedhost.Host, name string, hostdevs ...string) {
	t.Helper()
	var devs strings.Builder
	for _, a := range hostdevs {
		var d, b, s, f uint
		if _, err := fmt.Sscanf(a, "%x:%x:%x.%x", &d, &b, &s, &f); err != nil {
			t.Fatalf("PCI address %q: %v", a, err)
		}
		fmt.Fprintf(&devs, `    <hostdev mode='subsystem' type='pci' managed='no'>
      <driver name='vfio'/>
      <source><address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/></source>
    </hostdev>
`, d, b, s, f)
	}
	doc := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
%s    <memballoon model='none'/>
  </devices>
</domain>
`, name, devs.String())
	file := filepath.Join(t.TempDir(), name+".xml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	nestedhost.Virsh(t, h, "define", file)
}

// gpuFailRemoveDomain stops and undefines a domain if the nested host has it.
func gpuFailRemoveDomain(h *nestedhost.Host, name string) {
	if _, err := nestedhost.VirshErr(h, "domstate", name); err == nil {
		_, _ = nestedhost.VirshErr(h, "destroy", name)
		_, _ = nestedhost.VirshErr(h, "undefine", "--nvram", name)
	}
}

// gpuFailStart begins a failure test: nothing on vfio-pci in the nested
// host, and a cleanup that, after a failure, removes the named domains and
// gives the stand-in GPU's functions back with virsh.
func gpuFailStart(t *testing.T, h *nestedhost.Host, c *virt.Client, domains ...string) {
	t.Helper()
	if on := gpuFailVFIO(t, c); len(on) > 0 {
		t.Fatalf("the nested host is not in its initial state: %q on vfio-pci", on)
	}
	t.Cleanup(func() {
		for _, d := range domains {
			gpuFailRemoveDomain(h, d)
		}
		for _, a := range []string{h.GPU, h.GPUAudio} {
			if out, err := nestedhost.VirshErr(h, "nodedev-dumpxml", nestedhost.NodeDeviceName(a)); err == nil && strings.Contains(out, "<name>vfio-pci</name>") {
				t.Logf("cleanup: giving %s back", a)
				_, _ = nestedhost.VirshErr(h, "nodedev-reattach", nestedhost.NodeDeviceName(a))
			}
		}
	})
}

// A binding whose functions a running domain holds: a VM created after it
// fails (its name taken, then the functions busy) and leaves the binding,
// and only it, recording what is on vfio-pci; destroying the binding fails
// naming the functions and the domain, keeps it in state, and succeeds once
// the domain is gone.
func TestAccGPUFailure_heldFunction(t *testing.T) {
	h := nestedhost.Require(t)
	acctest.NeedTerraform(t)
	c := vmClient(t, h.URI)
	vmName, holder := "kohaku-acc-gpufail-vm", "kohaku-acc-gpufail-holder"
	gpuFailStart(t, h, c, vmName, holder)

	// kohaku_vm depends on the binding: Terraform binds first, then creates
	// the VM, which boots L1's own kernel (type qemu: L1 has no KVM).
	config := faultCLIHead + providerBlock(h.URI) + fmt.Sprintf(`
resource "kohaku_gpu_binding" "gpu" {
  address = %q
}
`, h.GPU) + nestedGPUVM(vmName)
	pair := []string{h.GPU, h.GPUAudio}
	slices.Sort(pair)
	bindingHolds := func(st []acctest.StateResource, when string) {
		t.Helper()
		b := gpuFailResource(st, "kohaku_gpu_binding")
		if b == nil {
			t.Fatalf("%s: the state has no binding", when)
		}
		if got := gpuFailRecorded(t, []acctest.StateResource{*b}); !slices.Equal(got, pair) {
			t.Fatalf("%s: the binding records %q on vfio-pci, want %q", when, got, pair)
		}
		if vm := gpuFailResource(st, "kohaku_vm"); vm != nil {
			t.Fatalf("%s: the state records the failed VM %v", when, vm.Values["name"])
		}
		if _, err := nestedhost.VirshErr(h, "domstate", vmName); err == nil && when != "name taken" {
			t.Fatalf("%s: the failed create left domain %s on the nested host", when, vmName)
		}
		gpuFailAgree(t, c, st, when)
	}

	// 1. The VM's name is taken by a domain the test defined: the binding
	// is made, then the VM's create fails before it makes anything.
	gpuFailDomain(t, h, vmName)
	w := acctest.NewWorkspace(t, config)
	start := time.Now()
	out, err := w.Run("apply", "-auto-approve", "-input=false")
	if err == nil {
		t.Fatalf("apply with the VM's name taken succeeded:\n%s", out)
	}
	gpuFailSays(t, out, "kohaku_gpu_binding.gpu: Creation complete",
		`Creating VM `+vmName+` failed at step "check the name"`, "a domain named "+vmName+" already exists", "Nothing was created.")
	bindingHolds(w.State(), "name taken")
	if err := expectDrivers(h, onVFIO(h))(nil); err != nil {
		t.Fatal(err)
	}
	nestedhost.Virsh(t, h, "undefine", vmName)
	t.Logf("1. create failing after the binding (name taken): %s", time.Since(start).Round(time.Second))

	// 2. A domain defined and started through libvirt (paused: it only has
	// to hold the functions) passes the pair through. The VM's create
	// defines the domain, fails to start it because the functions are
	// busy, and rolls it back.
	start = time.Now()
	gpuFailDomain(t, h, holder, h.GPU, h.GPUAudio)
	nestedhost.Virsh(t, h, "start", "--paused", holder)
	out, err = w.Run("apply", "-auto-approve", "-input=false")
	if err == nil {
		t.Fatalf("apply with the functions held by %s succeeded:\n%s", holder, out)
	}
	gpuFailSays(t, out, `Creating VM `+vmName+` failed at step "start the domain"`, "in use", holder, "Rolled back: undefined domain "+vmName)
	bindingHolds(w.State(), "functions busy")
	t.Logf("2. create failing at start, functions held by another domain: %s", time.Since(start).Round(time.Second))

	// 3. Destroying the binding while the domain holds the functions fails,
	// naming each function and the domain, and gives nothing back.
	start = time.Now()
	out, err = w.Run("destroy", "-auto-approve", "-input=false")
	if err == nil {
		t.Fatalf("destroy with the functions held by %s succeeded:\n%s", holder, out)
	}
	gpuFailSays(t, out, "Giving "+h.GPU+" back to the host failed", "Nothing was given back",
		h.GPU+" by "+holder, h.GPUAudio+" by "+holder, "The binding stays in state")
	bindingHolds(w.State(), "destroy refused")
	if err := expectDrivers(h, onVFIO(h))(nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("3. destroy refused while the functions are held: %s", time.Since(start).Round(time.Second))

	// 4. The domain gone, destroy gives the pair back to its drivers.
	start = time.Now()
	nestedhost.Virsh(t, h, "destroy", holder)
	nestedhost.Virsh(t, h, "undefine", holder)
	w.Must("destroy", "-auto-approve", "-input=false")
	st := w.State()
	if len(st) != 0 {
		t.Fatalf("after destroy the state still records %d resources", len(st))
	}
	if err := expectDrivers(h, onHost(h))(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, st, "destroyed")
	t.Logf("4. destroy once the domain is gone: %s", time.Since(start).Round(time.Second))
}

// Libvirt procedures the give-back test rejects.
const (
	lvProcNodeDeviceReAttach    = 119 // REMOTE_PROC_NODE_DEVICE_RE_ATTACH
	lvProcNodeDeviceDetachFlags = 301 // REMOTE_PROC_NODE_DEVICE_DETACH_FLAGS
)

// gpuFailProxy sits in front of the nested host's libvirtd and rejects
// node-device calls by mode: a binding whose second function cannot be bound
// and whose rollback cannot give the first back (failBind), or a give-back
// whose second function cannot be given back (failSecondReattach).
type gpuFailProxy struct {
	*faultProxy
	mode      atomic.Int32
	detaches  atomic.Int64
	reattachs atomic.Int64
}

const (
	gpuFailOff = iota
	gpuFailBind
	gpuFailSecondReattach
)

const gpuFailInjected = "operation failed: injected by the GPU failure test"

// set switches the mode; arming a fault starts counting calls and
// rejections anew.
func (p *gpuFailProxy) set(mode int32) {
	if mode != gpuFailOff {
		p.detaches.Store(0)
		p.reattachs.Store(0)
		p.rejected.Store(0)
	}
	p.mode.Store(mode)
}

func newGPUFailProxy(t *testing.T, upstream string) *gpuFailProxy {
	t.Helper()
	p := &gpuFailProxy{}
	p.faultProxy = newFaultProxyRejecting(t, upstream, func(h virt.Header) (any, bool) {
		return gpuFailInjected, p.rejectGPU(h)
	})
	return p
}

func (p *gpuFailProxy) rejectGPU(h virt.Header) bool {
	mode := p.mode.Load()
	if mode == gpuFailOff || h.Program != virt.WireProgRemote || h.Type != virt.WireTypeCall {
		return false
	}
	switch h.Procedure {
	case lvProcNodeDeviceDetachFlags:
		return p.detaches.Add(1) == 2 && mode == gpuFailBind
	case lvProcNodeDeviceReAttach:
		n := p.reattachs.Add(1)
		return mode == gpuFailBind || n == 2
	}
	return false
}

// Give-backs libvirt refuses (injected by a proxy: no real failure reaches
// these steps). A binding whose second function cannot be bound and whose
// rollback cannot give the first back: the apply fails naming the function
// left on vfio-pci, the state keeps the binding, tainted, recording exactly
// that function, and the next apply replaces it. A destroy that gives back
// one function of two: the binding stays in state, recording which function
// is where. The next destroy gives everything back.
func TestAccGPUFailure_giveBackRefused(t *testing.T) {
	h := nestedhost.Require(t)
	acctest.NeedTerraform(t)
	c := vmClient(t, h.URI)
	gpuFailStart(t, h, c)
	proxy := newGPUFailProxy(t, faultTCPHostPort(t, h.URI))
	config := faultCLIHead + providerBlock(proxy.URI()) + fmt.Sprintf(`
resource "kohaku_gpu_binding" "gpu" {
  address = %q
}
`, h.GPU)
	w := acctest.NewWorkspace(t, config)

	// The plan binds the group in address order: the VGA, then its audio.
	start := time.Now()
	proxy.set(gpuFailBind)
	out, err := w.Run("apply", "-auto-approve", "-input=false")
	proxy.set(gpuFailOff)
	if err == nil {
		t.Fatalf("apply with the audio's detach rejected succeeded:\n%s", out)
	}
	if n := proxy.rejected.Load(); n != 2 {
		t.Fatalf("the proxy rejected %d calls, want the audio's detach and the VGA's give-back", n)
	}
	gpuFailSays(t, out, "Binding "+h.GPU+" to vfio-pci failed", h.GPUAudio, gpuFailInjected,
		"Rolling back FAILED", h.GPU+":", gpuFailInjected, "virsh nodedev-reattach "+nestedhost.NodeDeviceName(h.GPU),
		"kept in state, tainted", "("+h.GPU+")")
	st := w.State()
	b := gpuFailResource(st, "kohaku_gpu_binding")
	if b == nil || !b.Tainted {
		t.Fatalf("after the failed rollback the state has binding %+v, want it tainted", b)
	}
	if got := gpuFailRecorded(t, st); !slices.Equal(got, []string{h.GPU}) {
		t.Fatalf("the tainted binding records %q on vfio-pci, want %s alone", got, h.GPU)
	}
	if err := expectDrivers(h, map[string]string{h.GPU: "vfio-pci", h.GPUAudio: "snd_hda_intel"})(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, st, "rollback failed")
	t.Logf("1. bind failing with a rollback that cannot give back: %s", time.Since(start).Round(time.Second))

	// The fault gone, the next apply replaces the tainted binding: the VGA
	// is given back, then the pair bound, with the VGA's driver recorded
	// right.
	start = time.Now()
	out = w.Must("apply", "-auto-approve", "-input=false")
	gpuFailSays(t, out, "kohaku_gpu_binding.gpu: Destroying", "kohaku_gpu_binding.gpu: Creation complete")
	st = w.State()
	if b := gpuFailResource(st, "kohaku_gpu_binding"); b == nil || b.Tainted {
		t.Fatalf("after the replacing apply the binding is %+v", b)
	}
	if err := expectDrivers(h, onVFIO(h))(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, st, "replaced")
	if d := gpuFailResource(st, "kohaku_gpu_binding").Values["function_details"].([]any); fmt.Sprint(d[0].(map[string]any)["original_driver"]) != "nvidia" {
		t.Errorf("the replaced binding records the VGA's original driver as %v", d[0].(map[string]any)["original_driver"])
	}
	t.Logf("2. the next apply replaces the tainted binding: %s", time.Since(start).Round(time.Second))

	// Destroy gives the audio back (last first), and the VGA's give-back
	// is rejected: the binding stays in state, which records the audio
	// back on its driver and the VGA still on vfio-pci.
	start = time.Now()
	proxy.set(gpuFailSecondReattach)
	out, err = w.Run("destroy", "-auto-approve", "-input=false")
	proxy.set(gpuFailOff)
	if err == nil {
		t.Fatalf("destroy with the VGA's give-back rejected succeeded:\n%s", out)
	}
	if n := proxy.rejected.Load(); n != 1 {
		t.Fatalf("the proxy rejected %d calls, want the VGA's give-back", n)
	}
	gpuFailSays(t, out, "Giving "+h.GPU+" back to the host failed", "These functions are still on vfio-pci", h.GPU+":", gpuFailInjected, "The binding stays in state")
	st = w.State()
	if b := gpuFailResource(st, "kohaku_gpu_binding"); b == nil {
		t.Fatal("after the failed give-back the state has no binding")
	}
	if err := expectDrivers(h, map[string]string{h.GPU: "vfio-pci", h.GPUAudio: "snd_hda_intel"})(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, st, "give-back failed halfway")
	t.Logf("3. destroy failing halfway: %s", time.Since(start).Round(time.Second))

	start = time.Now()
	w.Must("destroy", "-auto-approve", "-input=false")
	if err := expectDrivers(h, onHost(h))(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, w.State(), "destroyed")
	t.Logf("4. destroy: %s", time.Since(start).Round(time.Second))
}

// A binding whose functions processes in the nested host hold: one with
// the GPU stand-in's BAR (its sysfs resource0) open, one with /dev/nvidia0
// open (the stand-in driver's device node; with no /proc/driver/nvidia to
// say which GPU a node is, any /dev/nvidiaN counts). Over SSH the apply is refused
// before anything is unbound, naming both by PID and command, after the
// plan warned that the stand-in has no function-level reset (its
// reset_method is "bus"). Once they are gone the same apply binds the pair.
func TestAccGPUFailure_heldByProcess(t *testing.T) {
	h := nestedhost.RequireSSH(t)
	acctest.NeedTerraform(t)
	c := vmClient(t, h.URI)
	gpuFailStart(t, h, c)

	start := time.Now()
	// One SSH session starts both holders and prints their PIDs (each
	// session costs seconds against L1).
	pids := strings.Fields(nestedhost.SSH(t, h, fmt.Sprintf(`test -c /dev/nvidia0
nohup sh -c 'exec 3</sys/bus/pci/devices/%s/resource0; exec sleep 600' </dev/null >/dev/null 2>&1 & echo $!
nohup sh -c 'exec 3</dev/nvidia0; exec sleep 600' </dev/null >/dev/null 2>&1 & echo $!
sleep 1`, h.GPU)))
	if len(pids) != 2 {
		t.Fatalf("starting the holders printed %q", pids)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			nestedhost.SSH(t, h, "kill "+pids[0]+" "+pids[1])
		}
	}
	t.Cleanup(stop)

	config := faultCLIHead + providerBlock(h.SSHURI) + fmt.Sprintf(`
resource "kohaku_gpu_binding" "gpu" {
  address = %q
  timeouts {
    create = "2m"
  }
}
`, h.GPU)
	w := acctest.NewWorkspace(t, config)
	out, err := w.Run("apply", "-auto-approve", "-input=false")
	if err == nil {
		t.Fatalf("apply with the GPU held by processes %v succeeded:\n%s", pids, out)
	}
	gpuFailSays(t, out, "Warning: GPU "+h.GPU+" has no function-level reset", "only by: bus",
		"Binding "+h.GPU+" to vfio-pci refused: the device is in use on the host",
		h.GPU+" by process "+pids[0]+" (sleep), which has /sys/devices/", h.GPU+"/resource0 open",
		h.GPU+" by process "+pids[1]+" (sleep), which has /dev/nvidia0 open",
		"Stop those processes", "Nothing was changed.")
	if st := w.State(); len(st) != 0 {
		t.Fatalf("the refused binding is in state: %d resources", len(st))
	}
	if err := expectDrivers(h, onHost(h))(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, w.State(), "refused")
	t.Logf("1. bind refused, naming the holders: %s", time.Since(start).Round(time.Second))

	// The holders gone, the bind goes ahead and destroy gives the pair back.
	start = time.Now()
	stop()
	w.Must("apply", "-auto-approve", "-input=false")
	if err := expectDrivers(h, onVFIO(h))(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, w.State(), "bound")

	// A VM passing the pair through, planned only: over SSH its 64-bit
	// window is sized at plan time from the pair's sysfs resource files. The
	// stand-in's BARs are 32-bit, so the window is the firmware's default:
	// known null, not "known after apply" (as it would be had the read failed).
	w.Write(config + nestedGPUVM("kohaku-acc-gpuhold-vm"))
	w.Must("plan", "-out=tfplan", "-input=false")
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				After        map[string]any `json:"after"`
				AfterUnknown map[string]any `json:"after_unknown"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(w.Must("show", "-json", "tfplan")), &plan); err != nil {
		t.Fatal(err)
	}
	planned := false
	for _, rc := range plan.ResourceChanges {
		if rc.Address != "kohaku_vm.vm" {
			continue
		}
		planned = true
		if v, unknown := rc.Change.After["pci_mmio64_gib"], rc.Change.AfterUnknown["pci_mmio64_gib"]; v != nil || unknown == true {
			t.Fatalf("pci_mmio64_gib planned as %v (unknown: %v), want null known at plan", v, unknown)
		}
	}
	if !planned {
		t.Fatal("the plan has no kohaku_vm.vm")
	}
	w.Write(config)

	w.Must("destroy", "-auto-approve", "-input=false")
	if err := expectDrivers(h, onHost(h))(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, w.State(), "destroyed")
	t.Logf("2. bound once the holders are gone, a VM's window sized at plan, then given back: %s", time.Since(start).Round(time.Second))
}

// A binding over a connection that cannot see the host's processes (plain
// tcp), of a GPU a process holds: the stand-in driver's unbind waits while
// /dev/nvidia0 is open, as NVIDIA's does, so the bind hangs, and ends at
// the binding's 15 s create timeout. The holder lets go 25 s after the
// unbind began (well past that deadline); the kernel finishes the unbind,
// libvirt puts the GPU on vfio-pci, and the provider, still following the
// function, gives it back to nvidia: the apply fails saying so, the state
// has no binding, and both functions are on their own drivers. (A holder
// that never lets go leaves the binding tainted, recording the GPU:
// TestBindUnbindOutlastingTheDeadline.)
func TestAccGPUFailure_unbindOutlastsTheDeadline(t *testing.T) {
	h := nestedhost.RequireSSH(t)
	acctest.NeedTerraform(t)
	c := vmClient(t, h.URI)
	gpuFailStart(t, h, c)

	const waiting = "Attempting to remove device with non-zero usage count"
	waits := func() int {
		n, err := strconv.Atoi(strings.TrimSpace(nestedhost.SSH(t, h, fmt.Sprintf("dmesg | grep -c %q || true", waiting))))
		if err != nil {
			t.Fatalf("counting the stand-in's waits in L1's dmesg: %v", err)
		}
		return n
	}
	waitsBefore := waits()
	// The holder, in L1: opens the device node, waits for the stand-in to
	// log one more wait than it had, then 25 s, and closes it (by itself
	// after five minutes at the latest).
	pid := strings.TrimSpace(nestedhost.SSH(t, h, fmt.Sprintf(`test -c /dev/nvidia0
n=$(dmesg | grep -c %[1]q || true)
nohup sh -c 'exec 3</dev/nvidia0; end=$(($(date +%%s) + 300))
until [ "$(dmesg | grep -c %[1]q)" -gt %[2]s ] || [ "$(date +%%s)" -gt $end ]; do sleep 1; done
sleep 25' </dev/null >/dev/null 2>&1 & echo $!
sleep 1`, waiting, `'"$n"'`)))
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("starting the holder printed %q", pid)
	}
	t.Cleanup(func() { nestedhost.SSH(t, h, "kill "+pid+" 2>/dev/null || true") })

	config := faultCLIHead + providerBlock(h.URI) + fmt.Sprintf(`
resource "kohaku_gpu_binding" "gpu" {
  address = %q
  timeouts {
    create = "15s"
  }
}
`, h.GPU)
	w := acctest.NewWorkspace(t, config)
	start := time.Now()
	out, err := w.Run("apply", "-auto-approve", "-input=false")
	took := time.Since(start)
	if err == nil {
		t.Fatalf("apply with the GPU held by process %s succeeded:\n%s", pid, out)
	}
	gpuFailSays(t, out, "Binding "+h.GPU+" to vfio-pci failed", "context deadline exceeded",
		h.GPU+"'s unbind from nvidia went on after the deadline; the function was given back to nvidia once it ended",
		"Nothing was changed.")
	if n := waits(); n != waitsBefore+1 {
		t.Fatalf("the stand-in logged %q %d times during the apply, want once: the unbind did not wait for the holder", waiting, n-waitsBefore)
	}
	if st := w.State(); len(st) != 0 {
		t.Fatalf("the failed binding is in state: %d resources", len(st))
	}
	if err := expectDrivers(h, onHost(h))(nil); err != nil {
		t.Fatal(err)
	}
	gpuFailAgree(t, c, w.State(), "after the hang")
	t.Logf("bind hung on the holder, failed at its deadline, the GPU given back once the holder let go: %s", took.Round(time.Second))
}
