package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// resetProbe counts the nested host kernel's pci_reset_function calls, which
// a write to a function's sysfs reset file makes (vfio's own resets, when a
// guest opens or closes the device, go through other entry points), with a
// kprobe traced into a tracing instance of the test's own: a judge of the
// reset that does not take the action's word for it.
func resetProbe(t *testing.T, h *nestedhost.Host) func() int {
	t.Helper()
	name := fmt.Sprintf("kohaku_acc_pcireset_%d", time.Now().UnixNano()%1e9)
	tr := "/sys/kernel/tracing"
	inst := tr + "/instances/" + name
	nestedhost.SSH(t, h, fmt.Sprintf("echo 'p:%[1]s pci_reset_function' >> %[2]s/kprobe_events && mkdir %[3]s && echo 1 > %[3]s/events/kprobes/%[1]s/enable", name, tr, inst))
	t.Cleanup(func() {
		nestedhost.SSH(t, h, fmt.Sprintf("echo 0 > %[3]s/events/kprobes/%[1]s/enable; rmdir %[3]s; echo '-:%[1]s' >> %[2]s/kprobe_events", name, tr, inst))
	})
	return func() int {
		return strings.Count(nestedhost.SSH(t, h, "cat "+inst+"/trace"), name+":")
	}
}

// keepChunks keeps the blank-line separated blocks of generated
// configuration that mention the quoted value: the stand-in's resource and
// import blocks, not those of anything else bound on the shared nested host.
func keepChunks(gen, value string) string {
	var kept []string
	for _, chunk := range strings.Split(gen, "\n\n") {
		if strings.Contains(chunk, `"`+value+`"`) {
			kept = append(kept, strings.TrimSpace(chunk))
		}
	}
	return strings.Join(kept, "\n\n") + "\n"
}

// The kohaku_gpu_binding list resource and the kohaku_gpu_reset action
// under Terraform 1.14, on the nested host, with the stand-in GPU pair and
// QEMU's edu device (alone in its group, no host driver) bound to vfio-pci
// by hand (virsh), on a host of the provider's hosts map:
//   - the list shows the stand-in once, by its VGA function, and edu;
//   - the generated configuration adopts the stand-in with no change, and
//     the plan after is empty;
//   - the action resets edu through the host's kernel (a kprobe counts the
//     resets); it fails for the stand-in, whose one reset method (a bus
//     reset of the VGA function) the kernel cannot use while the audio
//     function shares the bus, saying so; it fails over tcp before doing
//     anything; and it is refused, naming the domain, while a running
//     domain holds the stand-in's functions;
//   - destroying the adopted binding gives the pair back.
func TestAccGPUBindingList_adoptAndReset(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_gpu_binding list resource and the kohaku_gpu_reset action")
	h := nestedhost.RequireSSH(t)
	holder := "kohaku-acc-gpulist-holder"
	// Only the devices this test binds need be off vfio-pci: the nested
	// host is shared, and other tests may bind other devices meanwhile.
	mine := []string{h.GPU, h.GPUAudio, h.EDU}
	for _, a := range mine {
		if nestedhost.Driver(t, h, a) == "vfio-pci" {
			t.Fatalf("the nested host is not in its initial state: %s is on vfio-pci", a)
		}
	}
	t.Cleanup(func() {
		gpuFailRemoveDomain(h, holder)
		for _, a := range mine {
			if out, err := nestedhost.VirshErr(h, "nodedev-dumpxml", nestedhost.NodeDeviceName(a)); err == nil && strings.Contains(out, "<name>vfio-pci</name>") {
				t.Logf("cleanup: giving %s back", a)
				_, _ = nestedhost.VirshErr(h, "nodedev-reattach", nestedhost.NodeDeviceName(a))
			}
		}
	})
	resets := resetProbe(t, h)

	for _, a := range []string{h.GPU, h.GPUAudio, h.EDU} {
		nestedhost.Virsh(t, h, "nodedev-detach", nestedhost.NodeDeviceName(a), "--driver", "vfio")
	}
	header := faultCLIHead + fmt.Sprintf(`
provider "kohaku" {
  uri   = %q
  hosts = { l1 = { uri = %q } }
}
`, h.URI, h.SSHURI)
	w := acctest.NewWorkspace(t, header)
	lists := "list \"kohaku_gpu_binding\" \"bound\" {\n  provider = kohaku\n  config {\n    host = \"l1\"\n  }\n}\n"
	found := queryFound(t, w, lists, []string{"address", "host"})["list.kohaku_gpu_binding.bound"]
	var gpu, edu []string
	for _, name := range found {
		switch {
		case strings.Contains(name, h.GPU) || strings.Contains(name, h.GPUAudio):
			gpu = append(gpu, name)
		case strings.Contains(name, h.EDU):
			edu = append(edu, name)
		}
	}
	if len(gpu) != 1 || !strings.HasPrefix(gpu[0], h.GPU+" ") || !strings.Contains(gpu[0], h.GPU+", "+h.GPUAudio) || len(edu) != 1 {
		t.Fatalf("the stand-in is not listed once, by its VGA function with both functions named, and edu once: %q", found)
	}

	queryFound(t, w, lists, nil, "-generate-config-out=generated.tf")
	gen, err := os.ReadFile(filepath.Join(w.Dir(), "generated.tf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generated configuration:\n%s", gen)
	if err := os.WriteFile(filepath.Join(w.Dir(), "generated.tf"), []byte(keepChunks(string(gen), h.GPU)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := w.Must("plan", "-input=false", "-out=adopt.plan")
	if !strings.Contains(out, "1 to import, 0 to add, 0 to change, 0 to destroy") {
		t.Fatalf("the plan of the generated configuration is not one import and nothing else:\n%s", out)
	}
	w.Must("apply", "-input=false", "adopt.plan")
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after adopting is not empty (%v):\n%s", err, out)
	}

	w.Write(header + fmt.Sprintf(`
action "kohaku_gpu_reset" "edu" {
  config {
    host    = "l1"
    address = %[2]q
  }
}

action "kohaku_gpu_reset" "gpu" {
  config {
    host    = "l1"
    address = %[1]q
  }
}

action "kohaku_gpu_reset" "tcp" {
  config {
    address = %[2]q
  }
}
`, h.GPU, h.EDU))
	invoke := func(name string) (string, string, error) {
		out, err := w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_gpu_reset."+name)
		return out, strings.Join(strings.Fields(out), " "), err
	}
	method := strings.Fields(nestedhost.SSH(t, h, "cat /sys/bus/pci/devices/"+h.EDU+"/reset_method"))[0]
	before := resets()
	out, flat, err := invoke("edu")
	if err != nil {
		t.Fatalf("reset of edu: %v\n%s", err, out)
	}
	for _, want := range []string{"Resetting " + h.EDU, "by " + method + " reset", "Reset " + h.EDU} {
		if !strings.Contains(flat, want) {
			t.Errorf("the action's output lacks %q:\n%s", want, out)
		}
	}
	if n := resets() - before; n != 1 {
		t.Errorf("the nested host's kernel made %d PCI function resets, want 1", n)
	}

	out, flat, err = invoke("gpu")
	if err == nil || !strings.Contains(flat, "could not reset "+h.GPU+" by bus reset (nothing was reset)") || !strings.Contains(flat, "multi-function device") {
		t.Errorf("the stand-in's reset did not fail saying its bus reset is unusable (err %v):\n%s", err, out)
	}
	if err := expectDrivers(h, onVFIO(h))(nil); err != nil {
		t.Error(err)
	}

	before = resets()
	out, flat, err = invoke("tcp")
	if err == nil || !strings.Contains(flat, "qemu+ssh:// connection") {
		t.Errorf("a reset over tcp did not fail naming the connection it needs (err %v):\n%s", err, out)
	}
	gpuFailDomain(t, h, holder, h.GPU, h.GPUAudio)
	nestedhost.Virsh(t, h, "start", "--paused", holder)
	out, flat, err = invoke("gpu")
	if err == nil || !strings.Contains(flat, "Resetting GPU "+h.GPU+" failed") || !strings.Contains(flat, h.GPU+" by "+holder) ||
		!strings.Contains(flat, "Stop the domain first") {
		t.Errorf("a reset while %s holds the functions was not refused naming it (err %v):\n%s", holder, err, out)
	}
	if n := resets() - before; n != 0 {
		t.Errorf("the refused resets made %d PCI function resets, want none", n)
	}
	gpuFailRemoveDomain(h, holder)

	w.Must("destroy", "-auto-approve", "-input=false")
	if err := expectDrivers(h, onHost(h))(nil); err != nil {
		t.Error(err)
	}
	nestedhost.Virsh(t, h, "nodedev-reattach", nestedhost.NodeDeviceName(h.EDU))
}
