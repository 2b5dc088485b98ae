package provider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// snapshotConfig is three VMs that boot no OS, on the local test host: src
// (shut off, a boot overlay and a data disk Kohaku made), other (shut off),
// foreign (shut off, with a data disk given by an existing volume) and
// busy (running a kernel alone on an overlay); plus extra.
func snapshotConfig(t *testing.T, env acctest.VMEnv, prefix, extra string) string {
	t.Helper()
	vm := func(name, body string) string { return noOSVM(env, prefix, name, body) }
	return "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" + providerBlock(env.URI) +
		vm("src", fmt.Sprintf("  running    = false\n  data_disks = [{ name = \"data\", size_gib = 1, pool = %q }]\n", env.Pool)) +
		vm("other", "  running = false\n") +
		vm("foreign", fmt.Sprintf("  running    = false\n  data_disks = [{ name = \"users\", volume = \"%susers.qcow2\", pool = %q }]\n", prefix, env.Pool)) +
		vm("busy", fmt.Sprintf("  kernel           = %q\n  initrd           = %q\n  cmdline          = \"console=ttyS0 quiet panic=1\"\n  shutdown_timeout = \"1s\"\n  data_disks       = [{ name = \"data\", size_gib = 1, pool = %q }]\n",
			acctest.Env(t, "KOHAKU_TEST_TINY_KERNEL"), acctest.Env(t, "KOHAKU_TEST_TINY_INITRD"), env.Pool)) +
		extra
}

const snapshotResources = `
resource "kohaku_snapshot" "src" {
  vm   = kohaku_vm.src.id
  name = "before"
}

action "kohaku_vm_revert" "src" {
  config {
    vm       = kohaku_vm.src.id
    snapshot = kohaku_snapshot.src.id
    timeout  = "5m"
  }
}
`

// A stopped VM's boot overlay and data disk, snapshotted, changed and
// reverted with the kohaku_vm_revert action under Terraform 1.14, on VMs
// that boot no OS: qemu-io, independent of the provider, writes a marker
// into both disks before the snapshot and another after it, and reads the
// first back after the revert. The copies are standalone qcow2 volumes
// whose files hash to the recorded sha256; terraform query lists the
// snapshot by its VM and does not offer its copies as kohaku_image
// volumes; imported by its id, it reads the same and plans nothing; an
// update of the VM (memory) leaves it as it is. After the revert the VM is
// not started (it was off), libvirt starts it on the reverted disks, and
// the plan is empty. Refused at plan time, changing nothing: a revert of
// another VM to the snapshot, and a snapshot of a VM with a data disk
// Kohaku did not make (naming it). A running VM whose guest agent does
// not answer is snapshotted, boot and data disk, through libvirt's backup
// job and keeps running; the snapshot is crash-consistent, with a
// warning. Its revert, needing a shutdown the guest ignores, changes
// nothing. Destroy leaves no volume.
//
// Not proven here: the freeze through a real guest agent (quiesced; the
// VMs boot no OS), and the interruption of a revert or a backup at each
// step (internal/snapshot's unit tests).
func TestAccSnapshot_revertAndLive(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_vm_revert action")
	env := acctest.NewVMEnv(t)
	for _, tool := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to judge the snapshot: %v", tool, err)
		}
	}
	prefix := vmTestPrefix(t, env, "snap")
	if out, err := acctest.Virsh(env.URI, "vol-create-as", env.Pool, prefix+"users.qcow2", "64M", "--format", "qcow2"); err != nil {
		t.Fatalf("making the user's volume: %v: %s", err, out)
	}
	w := acctest.NewWorkspace(t, snapshotConfig(t, env, prefix, ""))
	w.Must("apply", "-auto-approve", "-input=false")

	root, data := env.Pool+"/"+prefix+"src-root.qcow2", env.Pool+"/"+prefix+"src-data.qcow2"
	const at = "64k 64k"
	write := func(pattern string) {
		t.Helper()
		for _, v := range []string{root, data} {
			if err := qemuIO(v, env, false, "write -P "+pattern+" "+at); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(pattern string) {
		t.Helper()
		for _, v := range []string{root, data} {
			if err := qemuIO(v, env, true, "read -P "+pattern+" "+at); err != nil {
				t.Errorf("%s does not hold %s: %v", v, pattern, err)
			}
		}
	}
	write("0x11")

	w.Write(snapshotConfig(t, env, prefix, snapshotResources))
	w.Must("apply", "-auto-approve", "-input=false")
	var snap map[string]any
	for _, r := range w.State() {
		if r.Address == "kohaku_snapshot.src" {
			snap = r.Values
		}
	}
	if snap == nil || snap["consistency"] != "powered_off" || snap["vm_uuid"] == "" {
		t.Fatalf("kohaku_snapshot.src = %v", snap)
	}
	disks, _ := snap["disks"].([]any)
	if len(disks) != 2 {
		t.Fatalf("the snapshot records %d disks, want 2: %v", len(disks), snap["disks"])
	}
	for i, want := range []string{"boot", "data"} {
		d, _ := disks[i].(map[string]any)
		if d["disk"] != want {
			t.Errorf("disk %d is %v, want %s", i, d["disk"], want)
		}
		vol, _ := d["snapshot_volume"].(string)
		if !strings.HasSuffix(vol, ".snap-before") {
			t.Errorf("disk %d's copy is %s", i, vol)
		}
		p, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, vol)
		if err != nil {
			t.Fatal(err)
		}
		if err := standaloneQcow2(p); err != nil {
			t.Error(err)
		}
		if got, err := fileDigest(p); err != nil || got != d["sha256"] {
			t.Errorf("%s hashes to %s (%v), the snapshot recorded %v", p, got, err, d["sha256"])
		}
		if err := qemuIOFile(p, true, "read -P 0x11 "+at); err != nil {
			t.Errorf("the copy %s lacks the marker: %v", p, err)
		}
	}

	// The copies are no images: terraform query does not offer them as
	// kohaku_image volumes to adopt (a standalone qcow2 no domain uses
	// otherwise would be).
	// The snapshot list finds the snapshot (and no other: the other VMs
	// have none, or disks Kohaku did not make), by its identity.
	found := queryFound(t, w, fmt.Sprintf(`
list "kohaku_image" "images" {
  provider = kohaku
  config {
    pool        = %[1]q
    name_prefix = %[2]q
  }
}

list "kohaku_snapshot" "src" {
  provider = kohaku
  config {
    vm = "%[2]ssrc"
  }
}

list "kohaku_snapshot" "foreign" {
  provider = kohaku
  config {
    vm = "%[2]sforeign"
  }
}
`, env.Pool, prefix), []string{"vm_uuid", "name"})
	if len(found["list.kohaku_image.images"]) != 0 {
		t.Errorf("terraform query lists snapshot copies as images: %v", found)
	}
	if got := found["list.kohaku_snapshot.src"]; len(got) != 1 || got[0] != prefix+"src/before" || len(found["list.kohaku_snapshot.foreign"]) != 0 {
		t.Errorf("terraform query found the snapshots %v, want %ssrc/before alone", found, prefix)
	}
	if err := os.Remove(filepath.Join(w.Dir(), "main.tfquery.hcl")); err != nil {
		t.Fatal(err)
	}

	// Forgotten and imported by its id, it reads the same disks and
	// digests back, and plans nothing.
	id, _ := snap["id"].(string)
	w.Must("state", "rm", "kohaku_snapshot.src")
	w.Must("import", "-input=false", "kohaku_snapshot.src", id)
	for _, r := range w.State() {
		if r.Address == "kohaku_snapshot.src" && fmt.Sprint(r.Values["disks"]) != fmt.Sprint(snap["disks"]) {
			t.Errorf("the import read disks %v, the create recorded %v", r.Values["disks"], snap["disks"])
		}
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the import is not empty (%v):\n%s", err, out)
	}

	// An update Kohaku makes to the VM (memory, a redefine) leaves the
	// snapshot as it is.
	bigger := func(config string) string {
		return strings.Replace(config, "name       = \""+prefix+"src\"\n  type       = \"qemu\"\n  memory_mib = 128",
			"name       = \""+prefix+"src\"\n  type       = \"qemu\"\n  memory_mib = 160", 1)
	}
	w.Write(bigger(snapshotConfig(t, env, prefix, snapshotResources)))
	out := w.Must("apply", "-auto-approve", "-input=false")
	if !strings.Contains(out, "0 added, 1 changed, 0 destroyed") {
		t.Errorf("the VM's memory change was not one in-place update:\n%s", out)
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the VM's update is not empty (%v):\n%s", err, out)
	}

	write("0x22")
	check("0x22")
	out = w.Must("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_vm_revert.src")
	t.Logf("the revert:\n%s", out)
	if !strings.Contains(out, "2 disks returned to snapshot") {
		t.Errorf("the revert did not say it returned 2 disks:\n%s", out)
	}
	check("0x11")
	if got, err := acctest.Virsh(env.URI, "domstate", prefix+"src"); err != nil || got != "shut off" {
		t.Errorf("after the revert %ssrc is %q (%v), want shut off: it was off", prefix, got, err)
	}
	vols, err := acctest.Virsh(env.URI, "vol-list", env.Pool)
	if err != nil || strings.Contains(vols, ".kohaku-revert") {
		t.Errorf("staged copies left behind (%v):\n%s", err, vols)
	}
	// libvirt starts the VM on its reverted disks (it boots no OS; it is
	// stopped again, as its running = false says).
	if out, err := acctest.Virsh(env.URI, "start", prefix+"src"); err != nil {
		t.Errorf("the VM does not start on its reverted disks: %v: %s", err, out)
	} else if out, err := acctest.Virsh(env.URI, "destroy", prefix+"src"); err != nil {
		t.Fatalf("stopping it again: %v: %s", err, out)
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the revert is not empty (%v):\n%s", err, out)
	}

	// Refused at plan time, changing nothing.
	for _, c := range []struct{ name, extra, want string }{
		{"another VM's snapshot", `
action "kohaku_vm_revert" "other" {
  config {
    vm       = kohaku_vm.other.id
    snapshot = kohaku_snapshot.src.id
  }
}
`, "Snapshot of another VM"},
		{"a disk Kohaku did not make", `
resource "kohaku_snapshot" "foreign" {
  vm   = kohaku_vm.foreign.id
  name = "x"
}
`, prefix + "users.qcow2, which Kohaku did not make"},
	} {
		w.Write(bigger(snapshotConfig(t, env, prefix, snapshotResources+c.extra)))
		args := []string{"plan", "-input=false"}
		if strings.Contains(c.extra, "action") {
			args = []string{"apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_vm_revert.other"}
		}
		out, err := w.Run(args...)
		t.Logf("%s:\n%s", c.name, out)
		if err == nil || !strings.Contains(strings.Join(strings.Fields(out), " "), c.want) {
			t.Errorf("%s: want a refusal saying %q (err %v):\n%s", c.name, c.want, err, out)
		}
	}
	check("0x11")
	if got, _ := acctest.Virsh(env.URI, "domstate", prefix+"other"); got != "shut off" {
		t.Errorf("the refused revert changed %sother: %s", prefix, got)
	}

	// A running VM whose guest agent does not answer (it has the channel;
	// the kernel it boots runs no agent): copied through libvirt's backup
	// job while it runs on, crash-consistent, with a warning.
	w.Write(bigger(snapshotConfig(t, env, prefix, snapshotResources+`
resource "kohaku_snapshot" "busy" {
  vm   = kohaku_vm.busy.id
  name = "live"
}
`)))
	out = w.Must("apply", "-auto-approve", "-input=false")
	t.Logf("the running VM's snapshot:\n%s", out)
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "the snapshot is crash-consistent, as after a power cut") {
		t.Errorf("the snapshot of a running VM whose agent does not answer did not warn:\n%s", out)
	}
	if got, err := acctest.Virsh(env.URI, "domstate", prefix+"busy"); err != nil || got != "running" {
		t.Errorf("%sbusy is %q (%v) after its snapshot, want running", prefix, got, err)
	}
	for _, r := range w.State() {
		if r.Address != "kohaku_snapshot.busy" {
			continue
		}
		if r.Values["consistency"] != "crash_consistent" {
			t.Errorf("kohaku_snapshot.busy's consistency is %v", r.Values["consistency"])
		}
		disks, _ := r.Values["disks"].([]any)
		if len(disks) != 2 {
			t.Fatalf("kohaku_snapshot.busy records %v, want its boot and data disks", r.Values["disks"])
		}
		if d, _ := disks[1].(map[string]any); d["disk"] != "data" {
			t.Errorf("kohaku_snapshot.busy's second disk is %v", d)
		} else if p, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, d["snapshot_volume"].(string)); err != nil {
			t.Error(err)
		} else if got, err := fileDigest(p); err != nil || got != d["sha256"] {
			t.Errorf("%s hashes to %s (%v), the snapshot recorded %v", p, got, err, d["sha256"])
		}
		d, _ := disks[0].(map[string]any)
		p, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, d["snapshot_volume"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if err := standaloneQcow2(p); err != nil {
			t.Error(err)
		}
		if got, err := fileDigest(p); err != nil || got != d["sha256"] {
			t.Errorf("%s hashes to %s (%v), the snapshot recorded %v", p, got, err, d["sha256"])
		}
		// The copy holds the base image: the running guest boots a kernel
		// and never writes its disk.
		base, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.ImagePool, env.Base)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("qemu-img", "compare", "-U", base, p).CombinedOutput(); err != nil {
			t.Errorf("qemu-img compare base %s: %v: %s", p, err, out)
		}
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the running VM's snapshot is not empty (%v):\n%s", err, out)
	}

	// Its revert needs it shut down, which it does not do when asked (it
	// ignores ACPI): never forced, it keeps running and nothing changes.
	w.Write(bigger(snapshotConfig(t, env, prefix, snapshotResources+`
resource "kohaku_snapshot" "busy" {
  vm   = kohaku_vm.busy.id
  name = "live"
}

action "kohaku_vm_revert" "busy" {
  config {
    vm               = kohaku_vm.busy.id
    snapshot         = kohaku_snapshot.busy.id
    shutdown_timeout = "5s"
  }
}
`)))
	out, err = w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_vm_revert.busy")
	if err == nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "was not forced off: it is still running and nothing was changed") {
		t.Errorf("the revert of a VM that does not power off did not fail saying nothing changed (err %v):\n%s", err, out)
	}
	if got, err := acctest.Virsh(env.URI, "domstate", prefix+"busy"); err != nil || got != "running" {
		t.Errorf("%sbusy is %q (%v) after the refused revert, want running", prefix, got, err)
	}
	if vols, err := acctest.Virsh(env.URI, "vol-list", env.Pool); err != nil || strings.Contains(vols, ".kohaku-revert") {
		t.Errorf("the refused revert staged copies (%v):\n%s", err, vols)
	}

	w.Write(bigger(snapshotConfig(t, env, prefix, snapshotResources)))
	w.Must("destroy", "-auto-approve", "-input=false")
	vols, err = acctest.Virsh(env.URI, "vol-list", env.Pool)
	if err != nil || strings.Count(vols, prefix) != strings.Count(vols, prefix+"users.qcow2") { // the user's volume, which the cleanup deletes
		t.Errorf("destroy left volumes (%v):\n%s", err, vols)
	}
}
