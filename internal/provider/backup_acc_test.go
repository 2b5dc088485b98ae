package provider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// backupConfig is a pool for backups and two VMs that boot no OS, shut
// off: src with a data disk Kohaku made, and dst; plus extra.
func backupConfig(env acctest.VMEnv, prefix, dstBody, extra string) string {
	return backupConfigAt(env.URI, env, prefix, dstBody, extra)
}

// backupConfigAt is backupConfig with the provider reaching the host at uri.
func backupConfigAt(uri string, env acctest.VMEnv, prefix, dstBody, extra string) string {
	vm := func(name, body string) string { return noOSVM(env, prefix, name, "  running    = false\n"+body) }
	return "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" + providerBlock(uri) +
		fmt.Sprintf(`
resource "kohaku_pool" "backups" {
  name = "%[1]sbackups"
  path = "%[2]s/%[1]sbackups"
}
`, prefix, accPoolRoot) +
		vm("src", fmt.Sprintf("  data_disks = [{ name = \"data\", size_gib = 1, pool = %q }]\n", env.Pool)) +
		vm("dst", dstBody) + extra
}

// backupResources are a snapshot of src, a backup of its data disk in the
// backups pool, and fresh, a VM made with a data disk restored from it
// (dst's body gives dst another).
var backupResources = snapshotOfSrc + backupOf("data", "data", "")

// snapshotOfSrc is kohaku_snapshot.src, of the VM src.
const snapshotOfSrc = `
resource "kohaku_snapshot" "src" {
  vm   = kohaku_vm.src.id
  name = "nightly"
}
`

// backupOf is kohaku_backup.<name> of src's snapshot's disk, as volume
// <name>.qcow2 in the backups pool, with extra in its block.
func backupOf(name, disk, extra string) string {
	return fmt.Sprintf(`
resource "kohaku_backup" %[1]q {
  snapshot = kohaku_snapshot.src.id
  disk     = %[2]q
  pool     = kohaku_pool.backups.name
  name     = "%[1]s.qcow2"
%[3]s}
`, name, disk, extra)
}

// freshVM is a VM made with a data disk restored from the backup.
func freshVM(env acctest.VMEnv, prefix string) string {
	return fmt.Sprintf(`
resource "kohaku_vm" "fresh" {
  name       = "%[1]sfresh"
  type       = "qemu"
  memory_mib = 128
  running    = false
  data_disks = [{ name = "restored", source = kohaku_backup.data.id, pool = %[2]q }]
}
`, prefix, env.Pool)
}

// A data disk's snapshot backed up into a second pool and restored into
// other VMs, on the local test host, with VMs that boot no OS (about 16 s):
// qemu-io, independent of the provider, writes a marker into src's data
// disk; one apply takes the snapshot, backs the disk up into a pool a
// kohaku_pool makes, gives dst (which exists) a data disk restored from the
// backup, and makes fresh with another. The backup's sha256 is the
// snapshot's for that disk and its file's; its manifest is beside it; each
// restored disk is a volume of its own VM's, not the backup, holding the
// marker, and its guest-visible bytes hash as the snapshot's copy's do.
// Forgotten and imported by its id, the backup reads the same and plans
// nothing; terraform query (Terraform 1.14) lists it, and does not offer
// it or its manifest as an image. A volume with no manifest (what a copy
// cut off before it was verified leaves) is neither listed nor imported as
// a backup. Refused at plan: a disk the snapshot does not have (naming
// those it has). Destroying the VMs deletes their restored disks and
// leaves the backup whole; destroy leaves nothing.
//
// Not proven here: another host (TestAccBackup_toAnotherHost, in the
// nested host's lane), and a copy cut off at each point (internal/backup's
// unit tests).
func TestAccBackup_restoreIntoAnotherVM(t *testing.T) {
	env := acctest.NewVMEnv(t)
	for _, tool := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to judge the backup: %v", tool, err)
		}
	}
	prefix := vmTestPrefix(t, env, "bkp")
	t.Cleanup(func() {
		if err := sweepPools(env.URI, prefix); err != nil {
			t.Errorf("cleaning up the backup pool: %v", err)
		}
	})
	backups := prefix + "backups"
	restoredDisk := fmt.Sprintf("  data_disks = [{ name = \"restored\", source = kohaku_backup.data.id, pool = %q }]\n", env.Pool)
	resources := backupResources + freshVM(env, prefix)

	w := acctest.NewWorkspace(t, backupConfig(env, prefix, "", ""))
	w.Must("apply", "-auto-approve", "-input=false")
	const at = "64k 64k"
	if err := qemuIO(env.Pool+"/"+prefix+"src-data.qcow2", env, false, "write -P 0x5a "+at); err != nil {
		t.Fatal(err)
	}

	w.Write(backupConfig(env, prefix, restoredDisk, resources))
	out := w.Must("apply", "-auto-approve", "-input=false")
	t.Logf("the snapshot, backup and restore:\n%s", out)
	var snapDisk, bk map[string]any
	for _, r := range w.State() {
		switch r.Address {
		case "kohaku_snapshot.src":
			disks, _ := r.Values["disks"].([]any)
			for _, d := range disks {
				if m, _ := d.(map[string]any); m["disk"] == "data" {
					snapDisk = m
				}
			}
		case "kohaku_backup.data":
			bk = r.Values
		}
	}
	if snapDisk == nil || bk == nil {
		t.Fatalf("the state has no snapshot of the data disk (%v) or no backup (%v)", snapDisk, bk)
	}
	if bk["id"] != backups+"/data.qcow2" || bk["sha256"] != snapDisk["sha256"] || bk["vm_name"] != prefix+"src" ||
		bk["source_volume"] != fmt.Sprintf("%s/%s", snapDisk["pool"], snapDisk["snapshot_volume"]) {
		t.Errorf("kohaku_backup.data = %v; the snapshot's data disk = %v", bk, snapDisk)
	}
	bkPath, err := acctest.Virsh(env.URI, "vol-path", "--pool", backups, "data.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fileDigest(bkPath); err != nil || got != bk["sha256"] {
		t.Errorf("%s hashes to %s (%v), the backup recorded %v", bkPath, got, err, bk["sha256"])
	}
	if err := standaloneQcow2(bkPath); err != nil {
		t.Error(err)
	}
	if out, err := acctest.Virsh(env.URI, "vol-info", "--pool", backups, "data.qcow2.kohaku-backup"); err != nil {
		t.Errorf("the backup has no manifest beside it: %v: %s", err, out)
	}

	// The restored disk is dst's own volume, holding what the snapshot
	// holds: the marker, and the same guest-visible bytes.
	for _, vm := range []string{"dst", "fresh"} {
		if err := qemuIO(env.Pool+"/"+prefix+vm+"-restored.qcow2", env, true, "read -P 0x5a "+at); err != nil {
			t.Errorf("%s's restored disk lacks the marker: %v", vm, err)
		}
	}
	snapPath, err := acctest.Virsh(env.URI, "vol-path", "--pool", snapDisk["pool"].(string), snapDisk["snapshot_volume"].(string))
	if err != nil {
		t.Fatal(err)
	}
	want := rawDigest(t, snapPath)
	for _, vm := range []string{"dst", "fresh"} {
		restoredPath, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, prefix+vm+"-restored.qcow2")
		if err != nil {
			t.Fatal(err)
		}
		if got := rawDigest(t, restoredPath); got != want {
			t.Errorf("%s's restored disk's contents hash to %s, the snapshot's copy's to %s", vm, got, want)
		}
		if xml, err := acctest.Virsh(env.URI, "dumpxml", prefix+vm); err != nil || strings.Contains(xml, backups) ||
			!strings.Contains(xml, prefix+vm+"-restored.qcow2") {
			t.Errorf("%s's definition names the backup, or not its own copy (%v):\n%s", vm, err, xml)
		}
	}
	t.Logf("guest-visible digest of the snapshot's data disk and of both restored disks: %s", want)
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the restore is not empty (%v):\n%s", err, out)
	}

	// Forgotten and imported by its id, it reads (and verifies) the same,
	// and plans nothing.
	w.Must("state", "rm", "kohaku_backup.data")
	w.Must("import", "-input=false", "kohaku_backup.data", backups+"/data.qcow2")
	for _, r := range w.State() {
		if r.Address != "kohaku_backup.data" {
			continue
		}
		for _, k := range []string{"sha256", "snapshot", "disk", "size_bytes", "capacity_bytes", "vm_uuid", "source_volume", "created_at"} {
			if fmt.Sprint(r.Values[k]) != fmt.Sprint(bk[k]) {
				t.Errorf("the import read %s = %v, the create recorded %v", k, r.Values[k], bk[k])
			}
		}
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the import is not empty (%v):\n%s", err, out)
	}

	// A volume with no manifest beside it (what a copy cut off before it
	// was verified leaves) is not imported as a backup, nor listed.
	if out, err := acctest.Virsh(env.URI, "vol-create-as", backups, "half.qcow2", "64M", "--format", "qcow2"); err != nil {
		t.Fatalf("making a volume with no manifest: %v: %s", err, out)
	}
	// terraform query (Terraform 1.14) lists the backup by its identity,
	// not the volume without a manifest; and the image list offers neither
	// the backup nor its manifest as an image.
	if v, err := acctest.ReadCLIVersion(); err == nil && v.Name == "Terraform" && v.AtLeast(1, 14) {
		found := queryFound(t, w, fmt.Sprintf(`
list "kohaku_backup" "b" {
  provider = kohaku
  config {
    pool = %[1]q
  }
}

list "kohaku_image" "i" {
  provider = kohaku
  config {
    pool = %[1]q
  }
}
`, backups), []string{"pool", "name"})
		t.Logf("terraform query found %v", found)
		if got := found["list.kohaku_backup.b"]; len(got) != 1 || got[0] != backups+"/data.qcow2" {
			t.Errorf("terraform query found the backups %v, want %s/data.qcow2 alone", found, backups)
		}
		for _, img := range found["list.kohaku_image.i"] {
			if strings.HasPrefix(img, backups+"/data.qcow2") {
				t.Errorf("terraform query lists the backup's %s as an image", img)
			}
		}
		if err := os.Remove(filepath.Join(w.Dir(), "main.tfquery.hcl")); err != nil {
			t.Fatal(err)
		}
	}
	w.Write(backupConfig(env, prefix, restoredDisk, resources+backupOf("half", "data", "")))
	out, err = w.Run("import", "-input=false", "kohaku_backup.half", backups+"/half.qcow2")
	if err == nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "no manifest half.qcow2.kohaku-backup beside it") {
		t.Errorf("the import of a volume with no manifest did not fail saying so (err %v):\n%s", err, out)
	}
	if out, err := acctest.Virsh(env.URI, "vol-delete", "--pool", backups, "half.qcow2"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	// Refused at plan, on the disk's line: a disk the snapshot has not.
	w.Write(backupConfig(env, prefix, restoredDisk, resources+backupOf("typo", "dta", "")))
	out, err = w.Run("plan", "-input=false")
	if flat := strings.Join(strings.Fields(out), " "); err == nil || !strings.Contains(flat, "Snapshot has no such disk") ||
		!strings.Contains(flat, `its disks are "boot", "data"`) || !strings.Contains(flat, `disk = "dta"`) {
		t.Errorf("a backup of a disk the snapshot has not was not refused at plan on its line (err %v):\n%s", err, out)
	}

	// The VMs destroyed: their restored disks go, the backup stays, whole.
	w.Write(backupConfig(env, prefix, restoredDisk, resources))
	w.Must("destroy", "-auto-approve", "-input=false", "-target=kohaku_vm.dst", "-target=kohaku_vm.fresh")
	for _, vm := range []string{"dst", "fresh"} {
		if _, err := acctest.Virsh(env.URI, "vol-info", "--pool", env.Pool, prefix+vm+"-restored.qcow2"); err == nil {
			t.Errorf("destroying %s left its restored disk", vm)
		}
	}
	if got, err := fileDigest(bkPath); err != nil || got != bk["sha256"] {
		t.Errorf("after the VMs' destroy the backup hashes to %s (%v), want %v", got, err, bk["sha256"])
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false", "-target=kohaku_backup.data"); err != nil {
		t.Errorf("the backup plans a change after the VMs' destroy (%v):\n%s", err, out)
	}

	w.Must("destroy", "-auto-approve", "-input=false")
	if left, err := acctest.Leftovers(env.URI, prefix, env.Pool, "default"); err != nil || len(left) > 0 {
		t.Errorf("destroy left %v (%v)", left, err)
	}
	if out, err := acctest.Virsh(env.URI, "pool-info", backups); err == nil {
		t.Errorf("destroy left the pool %s:\n%s", backups, out)
	}
}

// rawDigest is the sha256 of a disk image's guest-visible bytes, as
// qemu-img converts them to raw.
func rawDigest(t *testing.T, image string) string {
	t.Helper()
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.Command("qemu-img", "convert", "-U", "-O", "raw", image, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert %s: %v: %s", image, err, out)
	}
	d, err := fileDigest(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A data disk's snapshot on the local test host backed up onto the nested
// host (a second libvirtd, reached over qemu+tcp) and restored there into
// a VM that boots no OS: the backup crosses hosts through this process,
// and virsh, independent of the provider, downloads both volumes from the
// nested host: the backup's bytes hash as the snapshot recorded, and the
// restored disk holds the marker with the snapshot's guest-visible bytes.
// A VM on the local host restored from the nested host's backup is refused
// at plan, on the disk's source. Destroy leaves nothing on either host.
func TestAccBackup_toAnotherHost(t *testing.T) {
	env := acctest.NewVMEnv(t)
	h := nestedhost.Require(t)
	prefix := vmTestPrefix(t, env, "bkx")
	backups := prefix + "backups"
	t.Cleanup(func() {
		_, _ = nestedhost.VirshErr(h, "destroy", prefix+"far")
		_, _ = nestedhost.VirshErr(h, "undefine", prefix+"far")
		_, _ = nestedhost.VirshErr(h, "pool-destroy", backups)
		_, _ = nestedhost.VirshErr(h, "pool-delete", backups)
		_, _ = nestedhost.VirshErr(h, "pool-undefine", backups)
	})
	config := func(extra string) string {
		return "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" +
			fmt.Sprintf(`
provider "kohaku" {
  uri = %[1]q
  hosts = {
    nested = { uri = %[2]q }
  }
}

resource "kohaku_pool" "backups" {
  host = "nested"
  name = %[3]q
  path = "/var/lib/libvirt/images/%[3]s"
}
`, env.URI, h.URI, backups) +
			noOSVM(env, prefix, "src", fmt.Sprintf("  running    = false\n  data_disks = [{ name = \"data\", size_gib = 1, pool = %q }]\n", env.Pool)) +
			extra
	}
	resources := snapshotOfSrc + backupOf("data", "data", "  host     = \"nested\"\n") + fmt.Sprintf(`
resource "kohaku_vm" "far" {
  host       = "nested"
  name       = "%[1]sfar"
  type       = "qemu"
  memory_mib = 128
  running    = false
  data_disks = [{ name = "restored", source = kohaku_backup.data.id, pool = kohaku_pool.backups.name }]
}
`, prefix)
	w := acctest.NewWorkspace(t, config(""))
	w.Must("apply", "-auto-approve", "-input=false")
	// libvirt makes a qcow2 volume with qemu-img, which a host must have
	// to keep a backup (or restore one); the nested host's L1 has none.
	probe := "qcow2-probe.qcow2"
	if out, err := nestedhost.VirshErr(h, "vol-create-as", backups, probe, "1M", "--format", "qcow2"); err != nil {
		w.Must("destroy", "-auto-approve", "-input=false")
		t.Skipf("the nested host cannot make a qcow2 volume (%v: %s): it needs qemu-img (qemu-utils) to keep a backup", err, out)
	}
	if out, err := nestedhost.VirshErr(h, "vol-delete", "--pool", backups, probe); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	const at = "64k 64k"
	if err := qemuIO(env.Pool+"/"+prefix+"src-data.qcow2", env, false, "write -P 0x5a "+at); err != nil {
		t.Fatal(err)
	}
	w.Write(config(resources))
	t.Logf("the snapshot, the backup onto the nested host and the restore there:\n%s", w.Must("apply", "-auto-approve", "-input=false"))
	var snapDisk, bk map[string]any
	for _, r := range w.State() {
		switch r.Address {
		case "kohaku_snapshot.src":
			disks, _ := r.Values["disks"].([]any)
			if len(disks) == 2 {
				snapDisk, _ = disks[1].(map[string]any)
			}
		case "kohaku_backup.data":
			bk = r.Values
		}
	}
	if snapDisk == nil || bk == nil || bk["id"] != "nested/"+backups+"/data.qcow2" || bk["sha256"] != snapDisk["sha256"] {
		t.Fatalf("kohaku_backup.data = %v; the snapshot's data disk = %v", bk, snapDisk)
	}

	// Both volumes, downloaded from the nested host by virsh.
	download := func(vol string) string {
		t.Helper()
		file := filepath.Join(t.TempDir(), vol)
		if out, err := nestedhost.VirshErr(h, "vol-download", "--pool", backups, vol, file); err != nil {
			t.Fatalf("downloading %s from the nested host: %v: %s", vol, err, out)
		}
		return file
	}
	if got, err := fileDigest(download("data.qcow2")); err != nil || got != bk["sha256"] {
		t.Errorf("the backup on the nested host hashes to %s (%v), the snapshot recorded %v", got, err, bk["sha256"])
	}
	restored := download(prefix + "far-restored.qcow2")
	if err := qemuIOFile(restored, true, "read -P 0x5a "+at); err != nil {
		t.Errorf("the disk restored on the nested host lacks the marker: %v", err)
	}
	snapPath, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, snapDisk["snapshot_volume"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if want, got := rawDigest(t, snapPath), rawDigest(t, restored); want != got {
		t.Errorf("the restored disk's contents hash to %s, the snapshot's copy's to %s", got, want)
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Errorf("the plan after the backup is not empty (%v):\n%s", err, out)
	}

	// A VM on the local host cannot be restored from the nested host's backup.
	w.Write(config(resources + noOSVM(env, prefix, "near", "  running    = false\n  data_disks = [{ name = \"restored\", source = kohaku_backup.data.id }]\n")))
	out, err := w.Run("plan", "-input=false")
	if flat := strings.Join(strings.Fields(out), " "); err == nil || !strings.Contains(flat, "Backup on another host") {
		t.Errorf("a local VM restored from the nested host's backup was not refused at plan (err %v):\n%s", err, out)
	}

	w.Write(config(resources))
	w.Must("destroy", "-auto-approve", "-input=false")
	if out, err := nestedhost.VirshErr(h, "pool-info", backups); err == nil {
		t.Errorf("destroy left the pool %s on the nested host:\n%s", backups, out)
	}
}
