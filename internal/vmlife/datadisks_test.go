package vmlife

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

func scratchDisk(serial string, keep bool) (domain.DataDisk, NewDisk) {
	v := domain.VolumeRef{Pool: "default", Volume: "vm-" + serial + ".qcow2"}
	return domain.DataDisk{Source: domain.Source{Pool: v.Pool, Volume: v.Volume}, Serial: serial},
		NewDisk{Serial: serial, Volume: v, Format: domain.DiskQCOW2, SizeBytes: 1 << 30, Keep: keep}
}

// attached are the serials of the data disks in the domain's definition.
func attached(t *testing.T, h *fakeHost) []string {
	t.Helper()
	o, err := domain.Parse(h.domains["vm"].xml)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range o.Spec.DataDisks {
		out = append(out, d.Serial)
	}
	return out
}

func hasVolume(h *fakeHost, name string) bool { _, ok := h.volumes["default/"+name]; return ok }

// Data disks on a running VM are hot-plugged and unplugged with no restart;
// a removed disk's volume goes unless kept; an existing volume is never
// deleted; destroy deletes only the volumes Kohaku made and did not keep.
func TestUpdateHotplugsDataDisks(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	h.addVolume("default", "dataset.raw", "raw", 4<<30)
	scratch, newScratch := scratchDisk("scratch", false)
	kept, newKept := scratchDisk("kept", true)
	dataset := domain.DataDisk{Source: domain.Source{Pool: "default", Volume: "dataset.raw"}, Format: domain.DiskRaw, Serial: "dataset"}

	ch.Want.Spec.DataDisks = []domain.DataDisk{scratch, kept, dataset}
	ch.NewDisks = []NewDisk{newScratch, newKept}
	if _, err := Update(context.Background(), h, ch); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(attached(t, h), ","); got != "scratch,kept,dataset" {
		t.Errorf("attached %q", got)
	}
	for _, op := range []string{"StopDomain", "StartDomain"} {
		if slices.Contains(h.ops, op) {
			t.Errorf("adding data disks did %s: %v", op, h.ops)
		}
	}
	if n := strings.Count(strings.Join(h.ops, " "), "AttachDisk"); n != 3 {
		t.Errorf("%d hot-plugs, want 3: %v", n, h.ops)
	}
	if !hasVolume(h, "vm-scratch.qcow2") || !hasVolume(h, "vm-kept.qcow2") {
		t.Errorf("volumes not made: %s", h.state())
	}

	// All three go: scratch's volume with it, the kept one and the
	// existing one stay.
	h.ops = nil
	ch.Prior = ch.Want.Spec
	ch.Want.Spec.DataDisks, ch.NewDisks = nil, nil
	if _, err := Update(context.Background(), h, ch); err != nil {
		t.Fatal(err)
	}
	if got := attached(t, h); len(got) != 0 {
		t.Errorf("still attached: %v", got)
	}
	if n := strings.Count(strings.Join(h.ops, " "), "DetachDisk"); n != 3 || slices.Contains(h.ops, "StopDomain") {
		t.Errorf("ops %v: want three unplugs and no stop", h.ops)
	}
	if hasVolume(h, "vm-scratch.qcow2") || !hasVolume(h, "vm-kept.qcow2") || !hasVolume(h, "dataset.raw") {
		t.Errorf("after removing the disks: %s", h.state())
	}
}

// On a stopped VM data disks are added by redefining it; it stays stopped.
func TestUpdateAddsDataDiskToStoppedVM(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	h.domains["vm"].active = false
	ch.Running = false
	scratch, newScratch := scratchDisk("scratch", false)
	ch.Want.Spec.DataDisks, ch.NewDisks = []domain.DataDisk{scratch}, []NewDisk{newScratch}
	if _, err := Update(context.Background(), h, ch); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.ops, "AttachDisk") || !slices.Contains(h.ops, "DefineDomain") || h.domains["vm"].active {
		t.Errorf("ops %v active=%t: want a redefine of the stopped VM", h.ops, h.domains["vm"].active)
	}
	if got := attached(t, h); !slices.Equal(got, []string{"scratch"}) {
		t.Errorf("attached %v", got)
	}
}

// Create makes the data disks' volumes, and destroy deletes those not kept.
func TestCreateAndDeleteDataDisks(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	h.addVolume("default", "dataset.raw", "raw", 4<<30)
	scratch, newScratch := scratchDisk("scratch", false)
	kept, newKept := scratchDisk("kept", true)
	dataset := domain.DataDisk{Source: domain.Source{Pool: "default", Volume: "dataset.raw"}, Format: domain.DiskRaw, Serial: "dataset"}
	p.Spec.DataDisks = []domain.DataDisk{scratch, kept, dataset}
	p.NewDisks = []NewDisk{newScratch, newKept}
	view, err := Create(context.Background(), h, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(attached(t, h), ","); got != "scratch,kept,dataset" {
		t.Errorf("attached %q", got)
	}
	if view.Overlay == nil || view.Overlay.Volume != "vm-root.qcow2" {
		t.Errorf("overlay %v, want the root disk's", view.Overlay)
	}
	if _, err := Delete(context.Background(), h, Doomed{Ref: view.Status.DomainRef, Overlay: view.Overlay}); err != nil {
		t.Fatal(err)
	}
	want := "volume default/dataset.raw\nvolume default/vm-kept.qcow2\n" + baseOnly
	if got := h.state(); got != want {
		t.Errorf("after destroy:\n%s\nwant:\n%s", got, want)
	}
}

// A create that fails after making data disk volumes deletes them again.
func TestCreateRollsBackDataDisks(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	scratch, newScratch := scratchDisk("scratch", true)
	p.Spec.DataDisks, p.NewDisks = []domain.DataDisk{scratch}, []NewDisk{newScratch}
	h.fail["DefineDomain"] = errors.New("define refused")
	if _, err := Create(context.Background(), h, p); err == nil {
		t.Fatal("create succeeded")
	}
	if got := h.state(); got != baseOnly {
		t.Errorf("after the failed create:\n%s\nwant:\n%s", got, baseOnly)
	}
}

// An update that fails after making a data disk's volume deletes it again
// when the domain's definition does not use it (no state records it), and
// keeps it when the definition does (the attach went through).
func TestUpdateFailureDeletesVolumesItMade(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	scratch, newScratch := scratchDisk("scratch", false)
	ch.Want.Spec.DataDisks, ch.NewDisks = []domain.DataDisk{scratch}, []NewDisk{newScratch}
	h.fail["AttachDisk"] = errors.New("libvirt did not answer")
	_, err := Update(context.Background(), h, ch)
	var ue *UpdateError
	if !errors.As(err, &ue) || ue.Step != StepAttach || ue.View == nil {
		t.Fatalf("Update = %v, want an UpdateError at %q with the domain read anew", err, StepAttach)
	}
	if hasVolume(h, "vm-scratch.qcow2") {
		t.Errorf("the failed attach left its new volume: %s", h.state())
	}
	if got := attached(t, h); len(got) != 0 {
		t.Errorf("attached %v", got)
	}

	// Attached, then a later step fails: the volume is the domain's now.
	delete(h.fail, "AttachDisk")
	ch.Want.Spec.VCPU++ // a redefine and a restart after the hot-plug
	h.fail["StartDomain"] = errors.New("start refused")
	if _, err := Update(context.Background(), h, ch); !errors.As(err, &ue) {
		t.Fatalf("Update = %v, want an UpdateError", err)
	}
	if !hasVolume(h, "vm-scratch.qcow2") || !slices.Equal(attached(t, h), []string{"scratch"}) {
		t.Errorf("after a failure past the attach: %s, attached %v", h.state(), attached(t, h))
	}
}

// A data disk restored from a backup is a copy of it that the VM owns:
// made by the host, deleted with the VM, and the backup is left as it was,
// on create and when the disk is added to a VM that exists.
func TestRestoredDataDiskIsTheVMsCopy(t *testing.T) {
	t.Parallel()
	backup := domain.VolumeRef{Pool: "backups", Volume: "db.backup.qcow2"}
	restored := func(h *fakeHost) (domain.DataDisk, NewDisk) {
		h.addVolume(backup.Pool, backup.Volume, "qcow2", 2<<30)
		d, n := scratchDisk("restored", false)
		n.SizeBytes, n.From = 0, &backup
		return d, n
	}

	h := newFakeHost()
	p := createPlan(h, "vm")
	d, n := restored(h)
	p.Spec.DataDisks, p.NewDisks = []domain.DataDisk{d}, []NewDisk{n}
	view, err := Create(context.Background(), h, p)
	if err != nil {
		t.Fatal(err)
	}
	if v := h.volumes["default/vm-restored.qcow2"]; v == nil || v.CapacityBytes != 2<<30 || !slices.Contains(h.ops, "FlattenVolume") {
		t.Fatalf("restored volume %+v, ops %v", v, h.ops)
	}
	if _, err := Delete(context.Background(), h, Doomed{Ref: view.Status.DomainRef, Overlay: view.Overlay}); err != nil {
		t.Fatal(err)
	}
	if hasVolume(h, "vm-restored.qcow2") || h.volumes["backups/db.backup.qcow2"] == nil {
		t.Errorf("after destroy: %s", h.state())
	}

	h = newFakeHost()
	ch := existing(t, h)
	d, n = restored(h)
	ch.Want.Spec.DataDisks, ch.NewDisks = []domain.DataDisk{d}, []NewDisk{n}
	if _, err := Update(context.Background(), h, ch); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(attached(t, h), ","); got != "restored" || !hasVolume(h, "vm-restored.qcow2") {
		t.Errorf("attached %q: %s", got, h.state())
	}
}
