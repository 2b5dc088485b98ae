package vmlife

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// An update edits the domain's definition: a display, a disk and a
// description added outside Terraform survive it, and what the plan
// changed is changed.
func TestUpdateKeepsWhatKohakuDoesNotOwn(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	outOfBand := []string{
		`<graphics type="vnc" port="-1" autoport="yes" listen="127.0.0.1"></graphics>`,
		`<disk type="file" device="disk"><driver name="qemu" type="raw"></driver><source file="/var/lib/libvirt/images/scratch.img"></source><target dev="vdb" bus="virtio"></target></disk>`,
	}
	d := h.domains["vm"]
	d.xml = strings.Replace(d.xml, "</devices>", strings.Join(outOfBand, "")+"</devices>", 1)
	d.xml = strings.Replace(d.xml, "<metadata>", "<description>made by hand, then adopted</description><metadata>", 1)
	before, err := domain.Parse(d.xml)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Unrecognized) < 2 {
		t.Fatalf("the out-of-band devices do not read as unrecognized: %q", before.Unrecognized)
	}

	ch.Want.Spec.MemoryMiB, ch.Want.Spec.VCPU = 512, 2
	view, err := Update(context.Background(), h, ch)
	if err != nil {
		t.Fatal(err)
	}
	if ops := powerOps(h); len(ops) == 0 || ops[0] != "DefineDomain" {
		t.Fatalf("operations %q, want a redefine", ops)
	}
	got := h.domains["vm"].xml
	for _, want := range []string{`type="vnc"`, `listen="127.0.0.1"`, `/var/lib/libvirt/images/scratch.img`, `dev="vdb"`, `<description>made by hand, then adopted</description>`} {
		if !strings.Contains(got, want) {
			t.Errorf("the update lost %s:\n%s", want, got)
		}
	}
	if s := view.Observed.Spec; s.MemoryMiB != 512 || s.VCPU != 2 {
		t.Errorf("domain reads back with %d MiB and %d vCPUs, want 512 and 2", s.MemoryMiB, s.VCPU)
	}
	if got, want := view.Observed.Unrecognized, before.Unrecognized; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unrecognized elements after the update %q, want %q", got, want)
	}
}

// A boot disk given by file path (as virsh define and virt-install leave
// it) reads back as the volume of the pool that holds the file; one that
// no pool holds is named as such, and a lost connection is an error.
func TestReadMapsADiskPathToItsVolume(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	h.addVolume("images", "web-1.qcow2", "qcow2", 1<<30)
	for _, c := range []struct {
		path    string
		volume  *domain.VolumeRef
		outside string
	}{
		{path: "/pools/images/web-1.qcow2", volume: &domain.VolumeRef{Pool: "images", Volume: "web-1.qcow2"}},
		{path: "/srv/vm/web-1.qcow2", outside: "/srv/vm/web-1.qcow2"},
	} {
		spec := testSpec("byhand")
		spec.Disk = &domain.Disk{Source: domain.Source{Path: c.path}}
		xml, err := domain.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := h.DefineDomain(context.Background(), "byhand", xml)
		view, err := Read(context.Background(), h, ref, nil, true)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if (view.DiskVolume == nil) != (c.volume == nil) || (c.volume != nil && *view.DiskVolume != *c.volume) {
			t.Errorf("%s: disk volume %+v, want %+v", c.path, view.DiskVolume, c.volume)
		}
		if view.DiskOutsidePools != c.outside {
			t.Errorf("%s: outside pools %q, want %q", c.path, view.DiskOutsidePools, c.outside)
		}
		if view.Observed.Spec.Disk.Path != c.path {
			t.Errorf("%s: the observed disk became %+v; it must stay as the domain names it", c.path, view.Observed.Spec.Disk)
		}
	}
	h.fail["VolumeByPath"] = lost("look up volume")
	ref, _ := h.LookupDomain(context.Background(), "byhand")
	if _, err := Read(context.Background(), h, ref, nil, true); err == nil {
		t.Error("a failed volume lookup was not reported")
	}
}

// The seed's copy a move brought stays the VM's through an update that
// redefines the domain, so the VM's destroy still deletes it.
func TestUpdateKeepsTheMovedSeedCopyOwned(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	p.Autostart = false
	seed := domain.VolumeRef{Pool: "default", Volume: "vm-seed.iso"}
	h.addVolume(seed.Pool, seed.Volume, "raw", 1<<20)
	p.Spec.Seed = &domain.Seed{Source: domain.Source{Pool: seed.Pool, Volume: seed.Volume}}
	view, err := Create(context.Background(), h, p)
	if err != nil {
		t.Fatal(err)
	}
	xml, err := domain.SetOwnedVolumes(h.domains["vm"].xml, append(slices.Clone(view.Owned), seed))
	if err != nil {
		t.Fatal(err)
	}
	h.domains["vm"].xml = xml
	ch := Change{Ref: view.Status.DomainRef, Want: Want{Spec: p.Spec}, Prior: p.Spec, Overlay: view.Overlay, Running: true}
	ch.Want.Spec.MemoryMiB *= 2
	after, err := Update(context.Background(), h, ch)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(h.ops, "DefineDomain") {
		t.Fatalf("the update did not redefine the domain: %q", h.ops)
	}
	if !ContainsVolume(after.Owned, seed) || after.Overlay == nil || *after.Overlay != *view.Overlay {
		t.Errorf("after the update the VM owns %v with overlay %v: want the seed's copy still owned", after.Owned, after.Overlay)
	}
}

// One-to-one pins made at create stay through an update that redefines
// the domain (KeepPins); without KeepPins the update drops Kohaku's pins.
func TestUpdateKeepsPins(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{true, false} {
		h := newFakeHost()
		p := createPlan(h, "vm")
		p.Autostart = false
		p.Spec.VCPU = 2
		p.Spec.CPUPins, p.Spec.EmulatorCPUs = []int{2, 3}, "1"
		view, err := Create(context.Background(), h, p)
		if err != nil {
			t.Fatal(err)
		}
		want := p.Spec
		want.CPUPins, want.EmulatorCPUs = nil, "" // the provider's spec has no pins: they are the domain's
		want.MemoryMiB *= 2
		ch := Change{Ref: view.Status.DomainRef, Want: Want{Spec: want, KeepPins: keep}, Prior: p.Spec, Overlay: view.Overlay, Running: true}
		after, err := Update(context.Background(), h, ch)
		if err != nil {
			t.Fatal(err)
		}
		got := after.Observed.Spec
		if keep && (!slices.Equal(got.CPUPins, []int{2, 3}) || got.EmulatorCPUs != "1") {
			t.Errorf("KeepPins: after the update the pins are %v, emulator %q; want [2 3], 1", got.CPUPins, got.EmulatorCPUs)
		}
		if !keep && len(got.CPUPins) != 0 {
			t.Errorf("without KeepPins the pins stayed: %v", got.CPUPins)
		}
		if got.MemoryMiB != want.MemoryMiB {
			t.Errorf("memory %d, want %d: the update did not redefine", got.MemoryMiB, want.MemoryMiB)
		}
	}
}
