package holders

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// fakeProc lays out a /proc tree: per PID its comm and its fd links.
func fakeProc(t *testing.T, procs map[string]struct {
	comm string
	fds  []string
}) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(p.comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for i, target := range p.fds {
			if err := os.Symlink(target, filepath.Join(dir, "fd", strings.Repeat("1", i+1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Not processes: skipped.
	if err := os.MkdirAll(filepath.Join(root, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "uptime"), []byte("1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const (
	gpu0    = "0000:1b:00.0"
	gpu1    = "0000:9a:00.0"
	gpu0Sys = "/sys/devices/pci0000:16/0000:16:02.0/0000:1b:00.0"
)

func addr(t *testing.T, s string) vfio.Address {
	t.Helper()
	a, err := vfio.ParseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A two-GPU host: a training job on GPU 1 (/dev/nvidia1, with the
// driver's shared nodes), nvidia-persistenced holding both, a tool with
// GPU 0's BAR mapped, and unrelated processes.
func twoGPUHost(t *testing.T) string {
	type p = struct {
		comm string
		fds  []string
	}
	return fakeProc(t, map[string]p{
		"1":    {"systemd", []string{"/dev/null", "socket:[1234]"}},
		"812":  {"nvidia-persiste", []string{"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"}},
		"4242": {"python3", []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1", "/home/u/train.log"}},
		"5150": {"bar-peek", []string{gpu0Sys + "/resource1"}},
		"6000": {"bash", []string{"/dev/pts/0", "/sys/devices/system/cpu/online"}},
	})
}

func TestScanProcAndFind(t *testing.T) {
	opens, err := ScanProc(twoGPUHost(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Only the device files and persistenced are kept.
	for _, o := range opens {
		if o.Target == "/dev/null" || o.Target == "/home/u/train.log" || strings.HasPrefix(o.Target, "socket:") {
			t.Fatalf("kept %+v", o)
		}
	}
	// GPU 0, minor 0 (from NVIDIA's information file): persistenced (by
	// its /dev/nvidia0 and by name) and the BAR mapper; not the job on GPU 1.
	fns := []Function{{Address: addr(t, gpu0), Driver: "nvidia", NVIDIAMinor: 0}}
	got := Find(opens, fns)
	want := []Holder{
		{Function: addr(t, gpu0), PID: 812, Comm: "nvidia-persiste"},
		{Function: addr(t, gpu0), PID: 812, Comm: "nvidia-persiste", File: "/dev/nvidia0"},
		{Function: addr(t, gpu0), PID: 5150, Comm: "bar-peek", File: gpu0Sys + "/resource1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GPU 0:\n got %+v\nwant %+v", got, want)
	}
	msg := Describe(got)
	for _, s := range []string{"0000:1b:00.0 by process 5150 (bar-peek), which has " + gpu0Sys + "/resource1 open",
		"systemctl stop nvidia-persistenced", "apply again"} {
		if !strings.Contains(msg, s) {
			t.Errorf("Describe does not say %q:\n%s", s, msg)
		}
	}
	// GPU 1, minor unknown: every /dev/nvidiaN holder may be it.
	fns = []Function{{Address: addr(t, gpu1), Driver: "nvidia", NVIDIAMinor: -1}}
	pids := map[int]bool{}
	for _, h := range Find(opens, fns) {
		pids[h.PID] = true
	}
	if !reflect.DeepEqual(pids, map[int]bool{812: true, 4242: true}) {
		t.Fatalf("GPU 1 with no minor: holders %v", pids)
	}
	// The same GPU on vfio-pci or another driver: /dev/nvidia* and
	// persistenced do not hold it.
	if h := Find(opens, []Function{{Address: addr(t, gpu1), Driver: "snd_hda_intel", NVIDIAMinor: -1}}); len(h) != 0 {
		t.Fatalf("a function off nvidia is held by %+v", h)
	}
}

// A workstation-style host: Xorg on the BMC's ASPEED (card0) and on the
// GPU (card1, with nvidia-drm or nouveau), a compute job on the GPU's render
// node. The DRM nodes are matched to the GPU through sysfs, as the kernel
// lays it out: /sys/class/drm/cardN links into the device's drm/ directory,
// whose device link points back up to the PCI function.
func TestFindDRMHolders(t *testing.T) {
	sys := t.TempDir()
	for node, dev := range map[string]string{
		"card0":      "pci0000:00/0000:00:1c.0/0000:03:00.0",
		"card1":      "pci0000:16/0000:16:02.0/0000:1b:00.0",
		"renderD128": "pci0000:16/0000:16:02.0/0000:1b:00.0",
	} {
		drm := filepath.Join(sys, "devices", dev, "drm", node)
		if err := os.MkdirAll(drm, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../../"+filepath.Base(dev), filepath.Join(drm, "device")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(sys, "class", "drm"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../devices/"+dev+"/drm/"+node, filepath.Join(sys, "class", "drm", node)); err != nil {
			t.Fatal(err)
		}
	}
	type p = struct {
		comm string
		fds  []string
	}
	proc := fakeProc(t, map[string]p{
		"900":  {"Xorg", []string{"/dev/dri/card0", "/dev/dri/card1"}},
		"4242": {"python3", []string{"/dev/dri/renderD128"}},
		"4343": {"glxinfo", []string{"/dev/dri/renderD129"}}, // a node sysfs does not have
	})
	opens, err := ScanProc(proc, sys)
	if err != nil {
		t.Fatal(err)
	}
	got := Find(opens, []Function{{Address: addr(t, gpu0), Driver: "nouveau", NVIDIAMinor: -1}})
	want := []Holder{
		{Function: addr(t, gpu0), PID: 900, Comm: "Xorg", File: "/dev/dri/card1"},
		{Function: addr(t, gpu0), PID: 4242, Comm: "python3", File: "/dev/dri/renderD128"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GPU 0:\n got %+v\nwant %+v", got, want)
	}
	if h := Find(opens, []Function{{Address: addr(t, "0000:16:02.0"), Driver: "pcieport", NVIDIAMinor: -1}}); len(h) != 0 {
		t.Fatalf("the bridge above the GPU is held by %+v", h)
	}
	if msg := Describe(got); !strings.Contains(msg, "fuser -v /dev/nvidia* /dev/dri/*") {
		t.Errorf("Describe does not say how to find DRM holders:\n%s", msg)
	}
	// The remote script's lines carry the node's device the same way.
	remote := ParseScript([]byte("900\tXorg\t/dev/dri/card1\t/sys/devices/" + "pci0000:16/0000:16:02.0/0000:1b:00.0\n" +
		"901\tXorg\t/dev/nvidia0\t\n901\tXorg\t/sys/devices/x\t/sys/devices/y\n"))
	if len(remote) != 3 || remote[0].Device != gpu0Sys || remote[1].Device != "" || remote[2].Device != "" {
		t.Fatalf("ParseScript: %+v", remote)
	}
}

func TestParseNVIDIAMinor(t *testing.T) {
	info := "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 95\nGPU UUID: \t GPU-1c2d...\nDevice Minor: \t 3\nBus Location: \t 0000:1b:00.0\n"
	if n := ParseNVIDIAMinor([]byte(info)); n != 3 {
		t.Fatalf("minor %d", n)
	}
	if n := ParseNVIDIAMinor(nil); n != -1 {
		t.Fatalf("no file: %d", n)
	}
}

// The remote script and ScanProc, both run against this machine's own
// /proc (the script under /bin/sh with the real GNU find), each list this
// test process while it holds a sysfs file open.
func TestScriptMatchesScanProc(t *testing.T) {
	if _, err := exec.LookPath("find"); err != nil {
		t.Skip("no find")
	}
	f, err := os.Open("/sys/devices/system/cpu/online")
	if err != nil {
		t.Skip("no sysfs here")
	}
	defer f.Close()
	out, err := exec.Command("/bin/sh", "-c", Script).Output()
	if err != nil {
		t.Fatal(err)
	}
	opens := ParseScript(out)
	me := os.Getpid()
	found := false
	for _, o := range opens {
		if o.PID == me && o.Target == "/sys/devices/system/cpu/online" {
			found = true
		}
	}
	if !found {
		t.Fatalf("the script did not list this test's own open sysfs file (pid %d):\n%s", me, out)
	}
	local, err := ScanProc("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	foundLocal := false
	for _, o := range local {
		if o.PID == me && o.Target == "/sys/devices/system/cpu/online" && o.Comm != "" {
			foundLocal = true
		}
	}
	if !foundLocal {
		t.Fatal("ScanProc(/proc) did not list this test's own open sysfs file")
	}
}
