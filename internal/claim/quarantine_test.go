package claim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQuarantine_takeRefusesBeforeCreatingAnything(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	ctx := context.Background()
	if err := c.Quarantine(ctx, gpu, "reset failed: boom", holder(1)); err != nil {
		t.Fatal(err)
	}
	creates := f.creates
	_, err := c.Take(ctx, dev, holder(2))
	var qe *QuarantinedError
	if !errors.As(err, &qe) || qe.Device != gpu || qe.Marker.Reason != "reset failed: boom" || qe.Marker.From != holder(1) {
		t.Fatalf("take of a quarantined GPU: %v", err)
	}
	if f.creates != creates {
		t.Errorf("take created %d volumes", f.creates-creates)
	}
	for _, want := range []string{"quarantined", "given back by VM vm-1", "kohaku_gpu_reset", "virsh vol-delete --pool kohaku-claims kohaku-claim-0000_3b_00_0.quarantine"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// The race the marker's ordering closes: the taker passed the fast path
// before the marker existed, and the giver released its claim (after
// writing the marker) before the taker's create.
func TestQuarantine_takeThatCreatedItsClaimAfterTheMarkerBacksOut(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	ctx := context.Background()
	f.afterCreate = func(name string) {
		if name == VolumeName(gpu) {
			f.afterCreate = nil
			if err := c.Quarantine(ctx, gpu, "no reset method", holder(1)); err != nil {
				t.Error(err)
			}
		}
	}
	_, err := c.Take(ctx, dev, holder(2))
	var qe *QuarantinedError
	if !errors.As(err, &qe) {
		t.Fatalf("take: %v, want a *QuarantinedError", err)
	}
	if got := f.names(); !slices.Equal(got, []string{QuarantineName(gpu)}) {
		t.Errorf("pool holds %v, want the marker alone (the claim given back)", got)
	}
}

func TestQuarantine_markerBeforeReleaseKeepsTheNextTakerOut(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	ctx := context.Background()
	if _, err := c.Take(ctx, dev, holder(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Quarantine(ctx, gpu, "reset failed", holder(1)); err != nil {
		t.Fatal(err)
	}
	// the claim is still the giver's: the GPU is out either way
	if _, err := c.Take(ctx, dev, holder(2)); err == nil {
		t.Fatal("take between marker and release succeeded")
	}
	if err := c.Release(ctx, gpu, holder(1)); err != nil {
		t.Fatal(err)
	}
	var qe *QuarantinedError
	if _, err := c.Take(ctx, dev, holder(2)); !errors.As(err, &qe) {
		t.Fatalf("take after release: %v, want a *QuarantinedError", err)
	}
	// a second quarantine keeps the first reason
	if err := c.Quarantine(ctx, gpu, "another reason", holder(3)); err != nil {
		t.Fatal(err)
	}
	ms, err := c.Quarantines(ctx)
	if err != nil || len(ms) != 1 || ms[0].Reason != "reset failed" || !ms[0].Since.Equal(t0) {
		t.Errorf("quarantines %+v, %v", ms, err)
	}
	// the marker is no claim
	if cl, err := c.List(ctx); err != nil || len(cl) != 0 {
		t.Errorf("claims %+v, %v", cl, err)
	}
}

func TestQuarantine_staleTakeoverBacksOutToo(t *testing.T) {
	t.Parallel()
	f := newFake()
	clk := newClock(t0)
	c := claimer(f, clk)
	ctx := context.Background()
	if _, err := c.Take(ctx, dev, holder(1)); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(time.Hour)) // vm-1 never defined: its claim is stale
	f.afterCreate = func(name string) {
		if name == VolumeName(gpu) {
			f.afterCreate = nil
			_ = c.Quarantine(ctx, gpu, "reset failed", holder(1))
		}
	}
	var qe *QuarantinedError
	if _, err := c.Take(ctx, dev, holder(2)); !errors.As(err, &qe) {
		t.Fatalf("takeover: %v, want a *QuarantinedError", err)
	}
	if got := f.names(); !slices.Equal(got, []string{QuarantineName(gpu)}) {
		t.Errorf("pool holds %v", got)
	}
}

func TestQuarantine_clearReturnsTheDevice(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	ctx := context.Background()
	if cleared, err := c.ClearQuarantine(ctx, gpu); cleared || err != nil {
		t.Errorf("clearing a GPU that is not quarantined: %v, %v", cleared, err)
	}
	if err := c.Quarantine(ctx, gpu, "reset failed", holder(1)); err != nil {
		t.Fatal(err)
	}
	reasons, err := c.QuarantineReasons(ctx)
	if err != nil || !strings.HasPrefix(reasons[gpu], "reset failed (given back by VM vm-1") {
		t.Errorf("reasons %v, %v", reasons, err)
	}
	if cleared, err := c.ClearQuarantine(ctx, gpu); !cleared || err != nil {
		t.Fatalf("clear: %v, %v", cleared, err)
	}
	if _, err := c.Take(ctx, dev, holder(2)); err != nil {
		t.Errorf("take after clearing: %v", err)
	}
	if ms, err := c.Quarantines(ctx); err != nil || len(ms) != 0 {
		t.Errorf("quarantines after clearing %+v, %v", ms, err)
	}
}
