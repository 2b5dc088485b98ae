package vmlife

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// moveFake is a fakeHost whose volumes have bytes, which it streams,
// uploads and flattens, and whose define keeps the XML's UUID as libvirt
// does.
type moveFake struct {
	*fakeHost
	data map[string][]byte
	uuid string
}

var moveFakes atomic.Int64

func newMoveFake() *moveFake {
	return &moveFake{fakeHost: newFakeHost(), data: map[string][]byte{}, uuid: fmt.Sprintf("host-%d", moveFakes.Add(1))}
}

func (h *moveFake) HostInfo(context.Context) (*virt.HostInfo, error) {
	return &virt.HostInfo{UUID: h.uuid, Hostname: "h"}, nil
}

func (h *moveFake) DefineDomain(ctx context.Context, name, xml string) (virt.DomainRef, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		return virt.DomainRef{}, err
	}
	if _, err := h.fakeHost.DefineDomain(ctx, name, xml); err != nil {
		return virt.DomainRef{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.domains[name].ref.UUID = d.UUID
	return h.domains[name].ref, nil
}

func (h *moveFake) VolumeLength(_ context.Context, pool, name string) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("VolumeLength"); err != nil {
		return 0, err
	}
	return int64(len(h.data[pool+"/"+name])), nil
}

func (h *moveFake) StreamVolume(_ context.Context, pool, name string, length int64, w io.Writer) error {
	h.mu.Lock()
	if err := h.op("StreamVolume"); err != nil {
		h.mu.Unlock()
		return err
	}
	b := slices.Clone(h.data[pool+"/"+name])
	h.mu.Unlock()
	_, err := w.Write(b[:length])
	return err
}

func (h *moveFake) UploadImage(_ context.Context, up virt.ImageUpload) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	if err := h.op("UploadImage"); err != nil {
		h.mu.Unlock()
		return nil, err
	}
	key := up.Pool + "/" + up.Name
	if _, ok := h.volumes[key]; ok {
		h.mu.Unlock()
		return nil, &virt.VolumeExistsError{Pool: up.Pool, Name: up.Name}
	}
	h.mu.Unlock()
	b, err := io.ReadAll(up.Source)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addVolume(up.Pool, up.Name, up.Format, int64(up.Capacity))
	h.data[key] = b
	c := *h.volumes[key]
	return &c, nil
}

func (h *moveFake) FlattenVolume(_ context.Context, _, name, pool, into string) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("FlattenVolume"); err != nil {
		return nil, err
	}
	v, ok := h.volumes[pool+"/"+name]
	if !ok {
		return nil, virt.ErrNotFound
	}
	h.addVolume(pool, into, "qcow2", v.CapacityBytes)
	// The flattened image: the base's bytes under the overlay's.
	h.data[pool+"/"+into] = append([]byte("flat:"), h.data[pool+"/"+name]...)
	c := *h.volumes[pool+"/"+into]
	return &c, nil
}

func (h *moveFake) RemoveVolume(ctx context.Context, pool, name string) error {
	if err := h.fakeHost.RemoveVolume(ctx, pool, name); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.data, pool+"/"+name)
	return nil
}

func (h *moveFake) contents() string {
	h.mu.Lock()
	var parts []string
	for k, b := range h.data {
		parts = append(parts, fmt.Sprintf("%s=%q", k, b))
	}
	h.mu.Unlock()
	slices.Sort(parts)
	return h.state() + "\n" + strings.Join(parts, " ")
}

var _ MoveHost = (*moveFake)(nil)

const moveUUID = "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"

// movingVM puts on src a running VM with an overlay on a base image, a data
// disk and a seed, and returns what to move.
func movingVM(src *moveFake) Moving {
	xml := `<domain type="kvm"><name>web</name><uuid>` + moveUUID + `</uuid><memory unit="MiB">256</memory>` +
		`<os><type>hvm</type></os><devices>` +
		`<disk type="volume" device="disk"><source pool="default" volume="web.qcow2"/><target dev="vda" bus="virtio"/></disk>` +
		`<disk type="volume" device="disk"><source pool="default" volume="web-data"/><target dev="vdb" bus="virtio"/><serial>data</serial></disk>` +
		`<disk type="volume" device="cdrom"><source pool="default" volume="web-seed.iso"/><target dev="sda" bus="sata"/><readonly/></disk>` +
		`<interface type="network"><mac address="52:54:00:12:34:56"/><source network="default"/></interface>` +
		`</devices></domain>`
	src.domains["web"] = &fakeDomain{ref: virt.DomainRef{Name: "web", UUID: moveUUID}, xml: xml, active: true, autostart: true}
	src.addVolume("images", "debian.qcow2", "qcow2", 2<<30)
	src.data["images/debian.qcow2"] = []byte("base")
	src.addVolume("default", "web.qcow2", "qcow2", 4<<30)
	src.volumes["default/web.qcow2"].BackingPath = "/pools/images/debian.qcow2"
	src.data["default/web.qcow2"] = []byte("root-marker")
	src.addVolume("default", "web-data", "qcow2", 1<<30)
	src.data["default/web-data"] = []byte("data-marker")
	src.addVolume("default", "web-seed.iso", "raw", 4096)
	src.data["default/web-seed.iso"] = []byte("cidata")
	return Moving{
		Ref: virt.DomainRef{Name: "web", UUID: moveUUID},
		Volumes: []MovedVolume{
			{Ref: domain.VolumeRef{Pool: "default", Volume: "web.qcow2"}},
			{Ref: domain.VolumeRef{Pool: "default", Volume: "web-data"}},
			{Ref: domain.VolumeRef{Pool: "default", Volume: "web-seed.iso"}, Shared: true},
		},
		Running: true, Autostart: true, Grace: time.Minute,
	}
}

// movedState is what the two hosts hold once the move is done: the VM on
// the target, running, the root disk flattened, the data disk and seed as
// they were; on the source the base image and the seed (a kohaku_seed's).
const (
	movedTarget = "domain web active=true autostart=true\nvolume default/web-data\nvolume default/web-seed.iso\nvolume default/web.qcow2\n" +
		`default/web-data="data-marker" default/web-seed.iso="cidata" default/web.qcow2="flat:root-marker"`
	movedSource = "volume default/web-seed.iso\nvolume images/debian.qcow2\n" +
		`default/web-seed.iso="cidata" images/debian.qcow2="base"`
)

func TestMoveStepsInOrder(t *testing.T) {
	t.Parallel()
	src, dst := newMoveFake(), newMoveFake()
	m := movingVM(src)
	var steps []string
	m.Progress = func(s string) { steps = append(steps, s) }
	waited := false
	m.Wait = func(_ context.Context, h Host, ref virt.DomainRef) error {
		waited = h == Host(dst) && ref.UUID == moveUUID && dst.domains["web"].active
		return nil
	}
	view, err := Move(context.Background(), src, dst, m)
	if err != nil {
		t.Fatal(err)
	}
	if got := dst.contents(); got != movedTarget {
		t.Errorf("target holds\n%s\nwant\n%s", got, movedTarget)
	}
	if got := src.contents(); got != movedSource {
		t.Errorf("source holds\n%s\nwant\n%s", got, movedSource)
	}
	if !waited {
		t.Error("the readiness wait did not run on the target after the start")
	}
	want := []string{MoveStepFind, MoveStepShutdown, MoveStepCopy, MoveStepDefine, MoveStepCleanup, MoveStepStart}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
	if view.Status.UUID != moveUUID || !strings.Contains(dst.domains["web"].xml, "52:54:00:12:34:56") {
		t.Errorf("moved domain %+v lost its UUID or MAC", view.Status.DomainRef)
	}
	// The guest was shut down cleanly before anything was read, and the
	// source undefined only after the target was defined.
	if i, j := slices.Index(src.ops, "StopDomain"), slices.Index(src.ops, "FlattenVolume"); i < 0 || i > j || src.graces[0] != time.Minute {
		t.Errorf("source ops %q: want a clean stop (grace 1m) before the copy", src.ops)
	}
	if i, j := slices.Index(dst.ops, "DefineDomain"), slices.Index(dst.ops, "UploadImage"); i < j {
		t.Errorf("target ops %q: defined before the volumes were copied", dst.ops)
	}
}

// wholeVM checks that one host holds the VM whole: its domain and every
// volume it needs, with their contents.
func wholeVM(t *testing.T, src, dst *moveFake, onTarget bool) {
	t.Helper()
	srcHas, dstHas := src.domains["web"] != nil, dst.domains["web"] != nil
	if onTarget != dstHas || (!onTarget && !srcHas) {
		t.Fatalf("source has the domain: %t, target: %t; the error says on target: %t", srcHas, dstHas, onTarget)
	}
	h, root := src, "root-marker"
	if onTarget {
		h, root = dst, "flat:root-marker"
	}
	for k, want := range map[string]string{"default/web.qcow2": root, "default/web-data": "data-marker", "default/web-seed.iso": "cidata"} {
		if got := string(h.data[k]); got != want {
			t.Errorf("%s holds %q on the host with the VM, want %q", k, got, want)
		}
	}
}

// Each step of a move fails once (an error, a lost connection, Ctrl-C:
// the move stops there either way): the VM is whole on the host the error
// names, and the next try finishes the move to the same end as one that
// never failed.
func TestMoveInterruptedConverges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host, op string
		onTarget bool
	}{
		{"source", "StopDomain", false},
		{"source", "FlattenVolume", false},
		{"target", "UploadImage", false},
		{"source", "StreamVolume", false},
		{"target", "StreamVolume", false}, // the read-back
		{"target", "DefineDomain", false},
		{"target", "SetAutostart", true},
		{"target", "StartDomain", true},
		{"source", "UndefineDomain", true},
		{"source", "RemoveVolume", true},
	} {
		t.Run(tc.host+"/"+tc.op, func(t *testing.T) {
			t.Parallel()
			src, dst := newMoveFake(), newMoveFake()
			m := movingVM(src)
			h := src
			if tc.host == "target" {
				h = dst
			}
			h.fail[tc.op] = errors.New("injected")
			if tc.op == "RemoveVolume" {
				// Fail only the cleanup's deletes: let the copy's run.
				delete(h.fail, tc.op)
				m.Progress = func(s string) {
					if s == MoveStepCleanup {
						h.fail[tc.op] = errors.New("injected")
					}
				}
			}
			_, err := Move(context.Background(), src, dst, m)
			var me *MoveError
			if !errors.As(err, &me) || me.OnTarget != tc.onTarget {
				t.Fatalf("err = %v, want a MoveError with OnTarget %t", err, tc.onTarget)
			}
			wholeVM(t, src, dst, me.OnTarget)
			if _, ok := src.volumes["default/web.qcow2"+flatSuffix]; ok && me.Step == MoveStepCopy {
				t.Error("a failed copy left its flattened copy on the source")
			}
			delete(h.fail, tc.op)
			m.Progress = nil
			if _, err := Move(context.Background(), src, dst, m); err != nil {
				t.Fatalf("the second try: %v", err)
			}
			if got := dst.contents(); got != movedTarget {
				t.Errorf("target holds\n%s\nwant\n%s", got, movedTarget)
			}
			if got := src.contents(); got != movedSource {
				t.Errorf("source holds\n%s\nwant\n%s", got, movedSource)
			}
		})
	}
}

// A failure once the VM is defined on the target (autostart, the start, the
// guest's wait) leaves nothing on the source: the VM is whole on the target
// alone, so the provider's next ordinary update (not a second move) starts
// it there and converges.
func TestMoveFailureAfterTheDefineLeavesTheSourceClean(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"SetAutostart", "StartDomain", "Wait"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			src, dst := newMoveFake(), newMoveFake()
			m := movingVM(src)
			if op == "Wait" {
				m.Wait = func(context.Context, Host, virt.DomainRef) error { return errors.New("no report within the timeout") }
			} else {
				dst.fail[op] = errors.New("injected")
			}
			_, err := Move(context.Background(), src, dst, m)
			var me *MoveError
			if !errors.As(err, &me) || !me.OnTarget {
				t.Fatalf("err = %v, want a MoveError on the target", err)
			}
			if want := map[string]string{"Wait": MoveStepWait}[op]; want != "" && me.Step != want {
				t.Errorf("step %q, want %q", me.Step, want)
			}
			wholeVM(t, src, dst, true)
			if got := src.contents(); got != movedSource {
				t.Errorf("source holds\n%s\nwant\n%s", got, movedSource)
			}
		})
	}
}

// A copy that lands other bytes than were read is not defined on: the
// source stays the truth.
func TestMoveRefusesACorruptCopy(t *testing.T) {
	t.Parallel()
	src, dst := newMoveFake(), newMoveFake()
	m := movingVM(src)
	corrupt := &corruptingTarget{moveFake: dst}
	_, err := Move(context.Background(), src, corrupt, m)
	var me *MoveError
	if !errors.As(err, &me) || me.Step != MoveStepCopy || me.OnTarget || !strings.Contains(err.Error(), "hash to") {
		t.Fatalf("err = %v, want the copy step refusing a digest mismatch", err)
	}
	if dst.domains["web"] != nil || len(dst.volumes) != 0 {
		t.Fatalf("target holds %s", dst.contents())
	}
	wholeVM(t, src, dst, false)
}

type corruptingTarget struct{ *moveFake }

func (c *corruptingTarget) UploadImage(ctx context.Context, up virt.ImageUpload) (*virt.VolumeDetail, error) {
	b, err := io.ReadAll(up.Source)
	if err != nil {
		return nil, err
	}
	b[0] ^= 0xff
	up.Source = bytes.NewReader(b)
	return c.moveFake.UploadImage(ctx, up)
}

func TestMoveKeepsATargetsOwnSeedAndAStoppedVMStopped(t *testing.T) {
	t.Parallel()
	src, dst := newMoveFake(), newMoveFake()
	m := movingVM(src)
	src.domains["web"].active = false
	m.Running = false
	dst.addVolume("default", "web-seed.iso", "raw", 4096)
	dst.data["default/web-seed.iso"] = []byte("target's own seed")
	if _, err := Move(context.Background(), src, dst, m); err != nil {
		t.Fatal(err)
	}
	if string(dst.data["default/web-seed.iso"]) != "target's own seed" {
		t.Error("the target's own seed was overwritten")
	}
	if dst.domains["web"].active || slices.Contains(dst.ops, "StartDomain") || slices.Contains(src.ops, "StopDomain") {
		t.Errorf("a stopped VM was started or stopped: source %q, target %q", src.ops, dst.ops)
	}
}

func TestMoveRefusesBothRunning(t *testing.T) {
	t.Parallel()
	src, dst := newMoveFake(), newMoveFake()
	m := movingVM(src)
	dst.domains["web"] = &fakeDomain{ref: m.Ref, xml: src.domains["web"].xml, active: true}
	_, err := Move(context.Background(), src, dst, m)
	if err == nil || !strings.Contains(err.Error(), "defined on both hosts") {
		t.Fatalf("err = %v", err)
	}
	if src.domains["web"] == nil || len(src.data) != 4 {
		t.Fatalf("the source was touched: %s", src.contents())
	}
}

func TestMoveRefusesHostDevices(t *testing.T) {
	t.Parallel()
	src, dst := newMoveFake(), newMoveFake()
	m := movingVM(src)
	src.domains["web"].xml = strings.Replace(src.domains["web"].xml, "</devices>",
		`<hostdev mode="subsystem" type="pci" managed="yes"><source><address domain="0" bus="1" slot="0" function="0"/></source></hostdev></devices>`, 1)
	_, err := Move(context.Background(), src, dst, m)
	if err == nil || !strings.Contains(err.Error(), "passed through") {
		t.Fatalf("err = %v", err)
	}
	if slices.Contains(src.ops, "StopDomain") {
		t.Error("the guest was stopped before the refusal")
	}
}

func TestMovedVolumesFromTheDomain(t *testing.T) {
	t.Parallel()
	src := newMoveFake()
	movingVM(src)
	xml := src.domains["web"].xml
	xml = strings.Replace(xml, "<os>", `<metadata><vm xmlns="https://kohaku.dev/xmlns/vm/1"><owned-volume pool="default" volume="web-data"/></vm></metadata><os>`, 1)
	got, err := MovedVolumes(xml, &domain.VolumeRef{Pool: "default", Volume: "web.qcow2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []MovedVolume{
		{Ref: domain.VolumeRef{Pool: "default", Volume: "web.qcow2"}},
		{Ref: domain.VolumeRef{Pool: "default", Volume: "web-data"}},
		{Ref: domain.VolumeRef{Pool: "default", Volume: "web-seed.iso"}, Shared: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// Without the metadata the data disk is not Kohaku's: the move is refused.
	_, err = MovedVolumes(src.domains["web"].xml, &domain.VolumeRef{Pool: "default", Volume: "web.qcow2"})
	if err == nil || !strings.Contains(err.Error(), "data volume default/web-data") {
		t.Fatalf("err = %v, want the user's data volume refused", err)
	}
}

// Two entries of the hosts map that reach the same libvirtd: a "move"
// would delete the volumes it means to copy. Refused before anything.
func TestMoveRefusesOneHostReachedTwoWays(t *testing.T) {
	t.Parallel()
	src, dst := newMoveFake(), newMoveFake()
	m := movingVM(src)
	dst.uuid = src.uuid
	_, err := Move(context.Background(), src, dst, m)
	if err == nil || !strings.Contains(err.Error(), "same libvirt host") {
		t.Fatalf("err = %v", err)
	}
	if len(src.ops) != 0 || len(dst.ops) != 0 {
		t.Fatalf("ops before the refusal: source %q, target %q", src.ops, dst.ops)
	}
}

// The seed's copy a move brings is the VM's on the target: its metadata
// records it, a Read does not take it for the overlay, and the VM's Delete
// removes it there, while the kohaku_seed's own on the source stays. A move
// back to a host with the kohaku_seed's own keeps that one and deletes the
// copy from the host it leaves.
func TestMoveOwnsTheSeedCopyItBrings(t *testing.T) {
	t.Parallel()
	src, dst := newMoveFake(), newMoveFake()
	m := movingVM(src)
	m.Volumes = nil // read from the domain, as the provider does
	m.Overlay = &domain.VolumeRef{Pool: "default", Volume: "web.qcow2"}
	xml, err := domain.SetOwnedVolumes(src.domains["web"].xml, []domain.VolumeRef{*m.Overlay, {Pool: "default", Volume: "web-data"}})
	if err != nil {
		t.Fatal(err)
	}
	src.domains["web"].xml = xml
	if _, err := Move(context.Background(), src, dst, m); err != nil {
		t.Fatal(err)
	}
	seed := domain.VolumeRef{Pool: "default", Volume: "web-seed.iso"}
	view, err := Read(context.Background(), dst, m.Ref, m.Overlay, false)
	if err != nil {
		t.Fatal(err)
	}
	if !ContainsVolume(view.Owned, seed) || view.Overlay == nil || *view.Overlay != *m.Overlay {
		t.Fatalf("after the move the target owns %v with overlay %v: want the seed's copy owned, the overlay unchanged", view.Owned, view.Overlay)
	}
	if string(src.data["default/web-seed.iso"]) != "cidata" {
		t.Fatal("the kohaku_seed's own seed left the source")
	}

	// Back to the first host, which has the kohaku_seed's own seed.
	back := m
	back.Volumes = nil
	if _, err := Move(context.Background(), dst, src, back); err != nil {
		t.Fatal(err)
	}
	if _, ok := dst.volumes["default/web-seed.iso"]; ok {
		t.Error("the seed's copy stayed on the host the VM left")
	}
	view, err = Read(context.Background(), src, m.Ref, m.Overlay, false)
	if err != nil {
		t.Fatal(err)
	}
	if ContainsVolume(view.Owned, seed) {
		t.Errorf("back home the VM owns the kohaku_seed's own seed: %v", view.Owned)
	}

	// Away again, then destroyed there: nothing of it stays on the target.
	again := m
	again.Volumes = nil
	if _, err := Move(context.Background(), src, dst, again); err != nil {
		t.Fatal(err)
	}
	if _, err := Delete(context.Background(), dst, Doomed{Ref: m.Ref, Overlay: m.Overlay, Seed: &seed}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(dst.contents()); got != "" {
		t.Errorf("after the delete the target holds\n%s", got)
	}
	if string(src.data["default/web-seed.iso"]) != "cidata" {
		t.Error("the kohaku_seed's own seed was deleted")
	}
}

// A VM's delete on the host its kohaku_seed was made on spares the seed.
func TestDeleteSparesTheKohakuSeedsOwnSeed(t *testing.T) {
	t.Parallel()
	h := newMoveFake()
	m := movingVM(h)
	seed := domain.VolumeRef{Pool: "default", Volume: "web-seed.iso"}
	if _, err := Delete(context.Background(), h, Doomed{Ref: m.Ref, Overlay: &domain.VolumeRef{Pool: "default", Volume: "web.qcow2"}, Seed: &seed}); err != nil {
		t.Fatal(err)
	}
	if string(h.data["default/web-seed.iso"]) != "cidata" {
		t.Error("the kohaku_seed's own seed was deleted with the VM")
	}
	if _, ok := h.volumes["default/web.qcow2"]; ok {
		t.Error("the VM's overlay was not deleted")
	}
}
