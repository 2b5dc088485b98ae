package vmlife

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func overlayBytes(t *testing.T, h *fakeHost) int64 {
	t.Helper()
	v, ok := h.volumes["default/vm-root.qcow2"]
	if !ok {
		t.Fatal("the overlay is gone")
	}
	return v.CapacityBytes
}

// A larger disk on a running VM grows live: the same domain, the same
// overlay, no stop and no start, no redefine.
func TestUpdateGrowsBootDiskLive(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	ch.DiskBytes = 6 << 30
	view, err := Update(context.Background(), h, ch)
	if err != nil {
		t.Fatal(err)
	}
	if got := overlayBytes(t, h); got != 6<<30 {
		t.Errorf("overlay has %d bytes, want %d", got, int64(6<<30))
	}
	if !slices.Contains(h.ops, "GrowDiskLive") || slices.Contains(h.ops, "GrowVolume") {
		t.Errorf("ops %v: want a live block resize", h.ops)
	}
	if p := powerOps(h); len(p) != 0 {
		t.Errorf("growing a disk did %v; want nothing", p)
	}
	if view.Status.UUID != ch.Ref.UUID || view.Overlay == nil || view.Overlay.Volume != "vm-root.qcow2" {
		t.Errorf("after the grow: uuid %s overlay %v", view.Status.UUID, view.Overlay)
	}
}

// A stopped VM's disk grows by resizing its volume; it stays stopped.
func TestUpdateGrowsBootDiskOfStoppedVM(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	h.domains["vm"].active = false
	ch.Running, ch.DiskBytes = false, 5<<30
	if _, err := Update(context.Background(), h, ch); err != nil {
		t.Fatal(err)
	}
	if got := overlayBytes(t, h); got != 5<<30 {
		t.Errorf("overlay has %d bytes, want %d", got, int64(5<<30))
	}
	if !slices.Contains(h.ops, "GrowVolume") || slices.Contains(h.ops, "GrowDiskLive") {
		t.Errorf("ops %v: want a volume resize", h.ops)
	}
	if h.domains["vm"].active {
		t.Error("the VM was started")
	}
}

// The size it has, or none planned, touches nothing; a smaller one is
// refused before anything changes on the disk.
func TestUpdateNeverShrinksBootDisk(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	before := overlayBytes(t, h)
	for _, size := range []int64{0, before} {
		ch.DiskBytes = size
		if _, err := Update(context.Background(), h, ch); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
	}
	if slices.Contains(h.ops, "GrowDiskLive") || slices.Contains(h.ops, "GrowVolume") {
		t.Errorf("ops %v: nothing to grow", h.ops)
	}
	ch.DiskBytes = before - 1<<30
	_, err := Update(context.Background(), h, ch)
	var ue *UpdateError
	if !errors.Is(err, ErrShrink) || !errors.As(err, &ue) || ue.Step != StepGrowDisk {
		t.Fatalf("shrink: %v", err)
	}
	if got := overlayBytes(t, h); got != before {
		t.Errorf("overlay has %d bytes after a refused shrink, want %d", got, before)
	}
	if !h.domains["vm"].active {
		t.Error("the VM stopped")
	}
}

// A failed live resize is an update error with the domain as it is, so
// the state starts from the truth; the next apply tries again.
func TestUpdateGrowFailureKeepsVM(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	before := overlayBytes(t, h)
	h.fail["GrowDiskLive"] = lost("GrowDiskLive")
	ch.DiskBytes = before + 1<<30
	_, err := Update(context.Background(), h, ch)
	var ue *UpdateError
	if !errors.As(err, &ue) || ue.Step != StepGrowDisk || ue.View == nil {
		t.Fatalf("err %v", err)
	}
	delete(h.fail, "GrowDiskLive")
	if _, err := Update(context.Background(), h, ch); err != nil {
		t.Fatal(err)
	}
	if got := overlayBytes(t, h); got != before+1<<30 {
		t.Errorf("overlay has %d bytes, want %d", got, before+1<<30)
	}
}

// An existing boot volume smaller than the planned size is grown before the
// domain is defined; a larger one is refused and nothing is made.
func TestCreateGrowsExistingBootVolume(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		have, want int64
		ok         bool
	}{{2 << 30, 5 << 30, true}, {5 << 30, 5 << 30, true}, {6 << 30, 5 << 30, false}} {
		h := newFakeHost()
		h.addVolume("default", "vm-root.qcow2", "qcow2", c.have)
		p := Plan{Spec: testSpec("vm"), SizeBytes: c.want, Running: true}
		_, err := Create(context.Background(), h, p)
		switch {
		case c.ok && err != nil:
			t.Errorf("%d -> %d: %v", c.have, c.want, err)
		case !c.ok && !errors.Is(err, ErrShrink):
			t.Errorf("%d -> %d: %v, want ErrShrink", c.have, c.want, err)
		case !c.ok && len(h.domains) != 0:
			t.Errorf("%d -> %d: a domain was defined after the refusal", c.have, c.want)
		}
		want := c.want
		if !c.ok {
			want = c.have
		}
		if got := h.volumes["default/vm-root.qcow2"].CapacityBytes; got != want {
			t.Errorf("%d -> %d: the volume has %d bytes, want %d", c.have, c.want, got, want)
		}
		if grew := slices.Contains(h.ops, "GrowVolume"); grew != (c.have < c.want) {
			t.Errorf("%d -> %d: ops %v", c.have, c.want, h.ops)
		}
	}
}
