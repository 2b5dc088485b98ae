package netpool

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCreatePoolBuildsStartsAndAutostarts(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p, err := CreatePool(context.Background(), h, PoolSpec{Name: "vms", Path: "/srv/vms", Autostart: true})
	if err != nil {
		t.Fatal(err)
	}
	want := Pool{Name: "vms", Type: "dir", Path: "/srv/vms", Active: true, Autostart: true}
	if p != want {
		t.Fatalf("created %+v, want %+v", p, want)
	}
	if !h.dirs["/srv/vms"] {
		t.Fatal("the pool's directory was not built")
	}
}

func TestCreatePoolRefusesAnExistingPool(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ctx := context.Background()
	if _, err := CreatePool(ctx, h, PoolSpec{Name: "vms", Path: "/srv/vms"}); err != nil {
		t.Fatal(err)
	}
	h.calls = nil
	_, err := CreatePool(ctx, h, PoolSpec{Name: "vms", Path: "/srv/other"})
	var exists *ExistsError
	if !errors.As(err, &exists) || exists.Name != "vms" {
		t.Fatalf("got %v, want an ExistsError for vms", err)
	}
	if len(h.calls) != 0 {
		t.Fatalf("the refused create changed the host: %v", h.calls)
	}
}

func TestCreatePoolFailureLeavesNoDefinition(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"BuildPool", "StartPool", "SetPoolAutostart"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost()
			h.failOn = step
			_, err := CreatePool(context.Background(), h, PoolSpec{Name: "vms", Path: "/srv/vms", Autostart: true})
			if !errors.Is(err, errFake) {
				t.Fatalf("got %v, want the injected failure", err)
			}
			if len(h.pools) != 0 {
				t.Fatalf("a failed create left pool definitions: %v", h.pools)
			}
		})
	}
}

// A directory that is there already is used as it is, even where libvirt
// refuses to build over it.
func TestCreatePoolOverAnExistingDirectory(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	h.dirs["/srv/vms"] = true
	h.failOn = "BuildPool"
	p, err := CreatePool(context.Background(), h, PoolSpec{Name: "vms", Path: "/srv/vms", Autostart: true})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Active || !p.Autostart {
		t.Fatalf("created %+v, want it started and autostarted", p)
	}
}

func TestReadPoolGoneIsNil(t *testing.T) {
	t.Parallel()
	p, err := ReadPool(context.Background(), newFakeHost(), "vms")
	if err != nil || p != nil {
		t.Fatalf("got %v, %v; want nil, nil", p, err)
	}
}

func TestUpdatePoolStartsAndSetsAutostart(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ctx := context.Background()
	if _, err := CreatePool(ctx, h, PoolSpec{Name: "vms", Path: "/srv/vms", Autostart: true}); err != nil {
		t.Fatal(err)
	}
	h.pools["vms"].active = false // stopped behind Terraform's back
	p, err := UpdatePool(ctx, h, PoolSpec{Name: "vms", Path: "/srv/vms", Autostart: false})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Active || p.Autostart {
		t.Fatalf("after update %+v, want active and not autostarted", p)
	}
}

func poolWithVolumes(t *testing.T, vols ...string) *fakeHost {
	t.Helper()
	h := newFakeHost()
	if _, err := CreatePool(context.Background(), h, PoolSpec{Name: "vms", Path: "/srv/vms", Autostart: true}); err != nil {
		t.Fatal(err)
	}
	h.volumes["vms"] = vols
	h.calls = nil
	return h
}

func TestDeletePoolRefusesAPoolWithVolumes(t *testing.T) {
	t.Parallel()
	h := poolWithVolumes(t, "someone-elses.qcow2")
	_, err := DeletePool(context.Background(), h, "vms", false)
	var notEmpty *NotEmptyError
	if !errors.As(err, &notEmpty) || !slices.Equal(notEmpty.Volumes, []string{"someone-elses.qcow2"}) {
		t.Fatalf("got %v, want a NotEmptyError naming the volume", err)
	}
	if !strings.Contains(err.Error(), "force_destroy") {
		t.Fatalf("the refusal does not say how to go on: %v", err)
	}
	if h.pools["vms"] == nil || !h.pools["vms"].active || len(h.volumes["vms"]) != 1 {
		t.Fatal("the refused destroy changed the pool")
	}
	for _, c := range h.calls {
		if !strings.HasPrefix(c, "RefreshPool") {
			t.Fatalf("the refused destroy did %s", c)
		}
	}
}

func TestDeletePoolForceDeletesVolumesThenPool(t *testing.T) {
	t.Parallel()
	h := poolWithVolumes(t, "a.qcow2", "b.iso")
	r, err := DeletePool(context.Background(), h, "vms", true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.DeletedVolumes, []string{"a.qcow2", "b.iso"}) || r.KeptDirectory != "" {
		t.Fatalf("removal %+v, want both volumes deleted and the directory gone", r)
	}
	if len(h.pools) != 0 || h.dirs["/srv/vms"] {
		t.Fatalf("pool or directory left: %v %v", h.pools, h.dirs)
	}
}

func TestDeleteEmptyPoolRemovesDirectoryAndDefinition(t *testing.T) {
	t.Parallel()
	h := poolWithVolumes(t)
	h.pools["vms"].active = false // a stopped pool is started to see what it holds
	if _, err := DeletePool(context.Background(), h, "vms", false); err != nil {
		t.Fatal(err)
	}
	if len(h.pools) != 0 || h.dirs["/srv/vms"] {
		t.Fatalf("pool or directory left: %v %v", h.pools, h.dirs)
	}
	if _, err := DeletePool(context.Background(), h, "vms", false); err != nil {
		t.Fatalf("deleting a pool already gone: %v", err)
	}
}

func TestDeletePoolKeepsADirectoryItCannotRemove(t *testing.T) {
	t.Parallel()
	h := poolWithVolumes(t)
	h.failOn = "DeletePoolTarget"
	r, err := DeletePool(context.Background(), h, "vms", false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.KeptDirectory, "/srv/vms") || len(h.pools) != 0 {
		t.Fatalf("removal %+v, pools %v: want the pool undefined and the kept directory named", r, h.pools)
	}
}

// An LVM pool imported by name is not destroyed: virStoragePoolDelete
// would delete its volume group, even with force.
func TestDeletePoolRefusesAPoolOfAnotherType(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	h.pools["vg0"] = &fakeObj{xml: `<pool type='logical'><name>vg0</name><target><path>/dev/vg0</path></target></pool>`, active: true}
	_, err := DeletePool(context.Background(), h, "vg0", true)
	if err == nil || !strings.Contains(err.Error(), "type logical") {
		t.Fatalf("got %v, want a refusal naming the type", err)
	}
	if len(h.calls) != 0 || h.pools["vg0"] == nil {
		t.Fatalf("the refused destroy changed the host: %v", h.calls)
	}
}
