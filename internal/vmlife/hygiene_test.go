package vmlife

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// releasedWorld is a placed VM of two GPUs, both moved to vfio-pci by
// placement, its domain gone, ready for ReleasePlaced with a resetter.
func releasedWorld(t *testing.T) (*placedWorld, PlacedHost, []vfio.Address, map[vfio.Address][]vfio.Address) {
	t.Helper()
	w := newPlacedWorld(gpuAddr(0x18), gpuAddr(0x2a))
	a, err := Acquire(context.Background(), w, w.host, trainRequest(), trainer)
	if err != nil {
		t.Fatal(err)
	}
	w.ops = nil
	ph, _ := w.host("gpu2")
	ph.Resetter = w
	return w, ph, w.pl.GPUs, a.Moved
}

func TestReleasePlaced_resetsEachGroupOnVFIOBeforeGivingItBack(t *testing.T) {
	t.Parallel()
	w, ph, gpus, moved := releasedWorld(t)
	hy, err := ReleasePlaced(context.Background(), ph, trainer, gpus, moved)
	if err != nil {
		t.Fatal(err)
	}
	want := "reset 0000:2a:00.0; reset 0000:18:00.0; giveback 0000:2a:00.0; giveback 0000:18:00.0; release 0000:2a:00.0; release 0000:18:00.0"
	if got := strings.Join(w.ops, "; "); got != want {
		t.Errorf("steps\n got %s\nwant %s", got, want)
	}
	if len(hy.Reset) != 2 || len(hy.Quarantined) != 0 || len(hy.Unreset) != 0 || len(w.quarantined) != 0 {
		t.Errorf("hygiene %+v, quarantined %v", hy, w.quarantined)
	}
	if w.holds() != "0 claims, 0 functions on vfio-pci" {
		t.Errorf("left %s", w.holds())
	}
}

func TestReleasePlaced_quarantinesAGPUThatCannotBeResetBeforeReleasingItsClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
	}{
		{"no reset method", fmt.Errorf("no reset method: the kernel offers no function-level, power-management, slot or bus reset for any of 0000:2a:00.0")},
		{"reset failed", fmt.Errorf("the kernel could not reset 0000:2a:00.0 by bus reset: %w", virt.ErrResetUnusable)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, ph, gpus, moved := releasedWorld(t)
			w.fail["reset 0000:2a:00.0"] = c.err
			hy, err := ReleasePlaced(context.Background(), ph, trainer, gpus, moved)
			if err != nil {
				t.Fatal(err)
			}
			want := "reset 0000:2a:00.0; quarantine 0000:2a:00.0; reset 0000:18:00.0; giveback 0000:2a:00.0; giveback 0000:18:00.0; release 0000:2a:00.0; release 0000:18:00.0"
			if got := strings.Join(w.ops, "; "); got != want {
				t.Errorf("steps\n got %s\nwant %s", got, want)
			}
			why := w.quarantined[gpuAddr(0x2a)]
			if len(w.quarantined) != 1 || !strings.Contains(why, "not reset after VM train") || !strings.Contains(why, c.err.Error()) {
				t.Errorf("quarantined %v", w.quarantined)
			}
			if len(hy.Quarantined) != 1 || hy.Quarantined[0].GPU != gpuAddr(0x2a) || hy.Quarantined[0].Why != why ||
				len(hy.Reset) != 1 || hy.Reset[0] != gpuAddr(0x18) {
				t.Errorf("hygiene %+v", hy)
			}
			// given back and released as any other: the marker holds it back
			if w.holds() != "0 claims, 0 functions on vfio-pci" {
				t.Errorf("left %s", w.holds())
			}
		})
	}
}

// A GPU that can be neither reset nor quarantined keeps its claim, so no
// apply takes it; the other GPU is given back as usual.
func TestReleasePlaced_keepsTheClaimWhenTheMarkerCannotBeWritten(t *testing.T) {
	t.Parallel()
	w, ph, gpus, moved := releasedWorld(t)
	w.fail["reset 0000:2a:00.0"] = errors.New("device wedged")
	w.fail["quarantine 0000:2a:00.0"] = errors.New("pool full")
	hy, err := ReleasePlaced(context.Background(), ph, trainer, gpus, moved)
	if err == nil || !strings.Contains(err.Error(), "0000:2a:00.0 could not be reset (device wedged) nor quarantined (pool full)") ||
		!strings.Contains(err.Error(), "its claim is kept") {
		t.Fatalf("err %v", err)
	}
	if strings.Contains(strings.Join(w.ops, "; "), "release 0000:2a:00.0") {
		t.Errorf("the claim of the GPU neither reset nor quarantined was released: %s", strings.Join(w.ops, "; "))
	}
	if w.claims[gpuAddr(0x2a)] != trainer.UUID || len(w.claims) != 1 || len(hy.Quarantined) != 0 {
		t.Errorf("claims %v, hygiene %+v", w.claims, hy)
	}
}

// Over a connection that cannot reach the kernel's reset (tcp, tls),
// nothing is quarantined: the GPUs go back as before, and the caller warns.
func TestReleasePlaced_connectionWithoutResetGivesBackUnreset(t *testing.T) {
	t.Parallel()
	w, ph, gpus, moved := releasedWorld(t)
	unreachable := fmt.Errorf("resetting needs a local or qemu+ssh:// connection: %w", virt.ErrHostFilesUnsupported)
	w.fail["reset 0000:2a:00.0"], w.fail["reset 0000:18:00.0"] = unreachable, unreachable
	hy, err := ReleasePlaced(context.Background(), ph, trainer, gpus, moved)
	if err != nil {
		t.Fatal(err)
	}
	if len(hy.Unreset) != 2 || len(hy.Quarantined) != 0 || len(w.quarantined) != 0 || w.holds() != "0 claims, 0 functions on vfio-pci" {
		t.Errorf("hygiene %+v, quarantined %v, left %s", hy, w.quarantined, w.holds())
	}
}

// The rollback of a create that kept nothing in state gives back without
// resetting: a group half bound cannot be reset, and its failure would
// quarantine GPUs that a failed create only claimed.
func TestAcquiredRelease_doesNotReset(t *testing.T) {
	t.Parallel()
	w := newPlacedWorld(gpuAddr(0x18))
	a, err := Acquire(context.Background(), w, func(string) (PlacedHost, error) {
		return PlacedHost{Claims: w, Binder: w, Resetter: w}, nil
	}, trainRequest(), trainer)
	if err != nil {
		t.Fatal(err)
	}
	w.ops = nil
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(w.ops, "; "); got != "giveback 0000:18:00.0; release 0000:18:00.0" {
		t.Errorf("steps %s", got)
	}
}
