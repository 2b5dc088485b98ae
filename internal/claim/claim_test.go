package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var (
	gpu   = vfio.Address{Bus: 0x3b}
	audio = vfio.Address{Bus: 0x3b, Function: 1}
	dev   = Device{Address: gpu, Functions: []vfio.Address{gpu, audio}}
	t0    = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
)

func holder(n int) Holder {
	return Holder{VM: fmt.Sprintf("vm-%d", n), UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", n), Workspace: fmt.Sprintf("ws-%d", n)}
}

// clock is a settable clock for Claimer.Now.
type clock struct{ t atomic.Pointer[time.Time] }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) set(t time.Time)  { c.t.Store(&t) }
func (c *clock) now() time.Time   { return *c.t.Load() }

func claimer(f *fakeHost, c *clock) *Claimer {
	var n atomic.Int64
	return &Claimer{Host: f, Now: c.now, NewToken: func() string { return fmt.Sprintf("tok%d", n.Add(1)) }}
}

func TestTake_createsANamedClaimHoldingTheHolder(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	got, err := c.Take(context.Background(), dev, holder(1))
	if err != nil {
		t.Fatal(err)
	}
	if got.Already || got.Reclaimed != nil || got.Message() != "0000:3b:00.0: claimed" {
		t.Errorf("taken %+v: %s", got, got.Message())
	}
	if VolumeName(gpu) != "kohaku-claim-0000_3b_00_0" {
		t.Errorf("volume name %s", VolumeName(gpu))
	}
	var rec Record
	if err := json.Unmarshal(f.vols["kohaku-claim-0000_3b_00_0"], &rec); err != nil {
		t.Fatal(err)
	}
	want := Record{Version: 1, Device: "0000:3b:00.0", Holder: holder(1), Token: "tok1", Created: t0}
	if rec != want {
		t.Errorf("claim %+v, want %+v", rec, want)
	}
	// taken again by the same VM (an apply retried): nothing new
	again, err := c.Take(context.Background(), dev, holder(1))
	if err != nil || !again.Already || again.Token != "tok1" || f.creates != 1 {
		t.Errorf("second take by the holder: %+v, %v (creates %d)", again, err, f.creates)
	}
}

func TestTake_raceOneWinsAndTheLosersNameIt(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 8} {
		for round := range 50 {
			f := newFake()
			c := claimer(f, newClock(t0))
			var ready sync.WaitGroup
			ready.Add(n)
			// every claimer has read the domains before any creates
			f.beforeDomains = func() { ready.Done(); ready.Wait() }
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = c.Take(context.Background(), dev, holder(i))
				}()
			}
			wg.Wait()
			winner := -1
			for i, err := range errs {
				if err == nil {
					if winner >= 0 {
						t.Fatalf("%d claimers, round %d: both %d and %d won", n, round, winner, i)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("%d claimers, round %d: nobody won: %v", n, round, errs)
			}
			for i, err := range errs {
				if i == winner {
					continue
				}
				var ce *ClaimedError
				if !errors.As(err, &ce) || ce.Holder != holder(winner) || !ce.Pending {
					t.Fatalf("loser %d: %v, want a pending *ClaimedError naming %v", i, err, holder(winner))
				}
				if !strings.Contains(err.Error(), "0000:3b:00.0 is claimed by VM vm-"+fmt.Sprint(winner)) {
					t.Errorf("loser's message %q names no holder", err)
				}
			}
			if f.creates != 1 {
				t.Fatalf("%d volumes created, want 1", f.creates)
			}
		}
	}
}

func TestTake_refusesALiveOrPendingClaim(t *testing.T) {
	t.Parallel()
	f := newFake()
	clk := newClock(t0)
	c := claimer(f, clk)
	if _, err := c.Take(context.Background(), dev, holder(1)); err != nil {
		t.Fatal(err)
	}
	// long after, its domain still not defined: stale; but first, defined
	f.defineDomain(holder(1))
	clk.set(t0.Add(time.Hour))
	_, err := c.Take(context.Background(), dev, holder(2))
	var ce *ClaimedError
	if !errors.As(err, &ce) || ce.Pending || ce.Holder != holder(1) {
		t.Fatalf("claim of a live VM: %v", err)
	}
	if want := "0000:3b:00.0 is claimed by VM vm-1 (00000000-0000-4000-8000-000000000001) of workspace ws-1 since 2026-11-27T08:00:00Z; ask for another GPU, or destroy that VM to free it"; err.Error() != want {
		t.Errorf("message\n %s\nwant\n %s", err, want)
	}
	if len(f.deletes) != 0 {
		t.Errorf("deleted %v", f.deletes)
	}
}

func TestTake_takesOverAStaleClaimAndSaysSo(t *testing.T) {
	t.Parallel()
	f := newFake()
	clk := newClock(t0)
	c := claimer(f, clk)
	if _, err := c.Take(context.Background(), dev, holder(1)); err != nil {
		t.Fatal(err)
	}
	// young, no domain: being created
	clk.set(t0.Add(DefaultStaleAfter - time.Second))
	if _, err := c.Take(context.Background(), dev, holder(2)); err == nil || !strings.Contains(err.Error(), "which another apply is creating") {
		t.Fatalf("young claim without a domain: %v", err)
	}
	clk.set(t0.Add(DefaultStaleAfter))
	got, err := c.Take(context.Background(), dev, holder(2))
	if err != nil {
		t.Fatal(err)
	}
	if got.Reclaimed == nil || got.Reclaimed.Holder != holder(1) || got.Holder != holder(2) {
		t.Fatalf("takeover %+v", got)
	}
	if !strings.Contains(got.Message(), "took over the stale claim of VM vm-1") {
		t.Errorf("message %q", got.Message())
	}
	if names := f.names(); !slices.Equal(names, []string{"kohaku-claim-0000_3b_00_0"}) {
		t.Errorf("volumes left %v, want the claim alone (the reservation removed)", names)
	}
	recs, err := c.List(context.Background())
	if err != nil || len(recs) != 1 || recs[0].Holder != holder(2) {
		t.Errorf("claims %+v, %v", recs, err)
	}
}

func TestTake_takeoverRaceOneWins(t *testing.T) {
	t.Parallel()
	for round := range 100 {
		f := newFake()
		clk := newClock(t0)
		c := claimer(f, clk)
		if _, err := c.Take(context.Background(), dev, holder(1)); err != nil {
			t.Fatal(err)
		}
		clk.set(t0.Add(time.Hour))
		var ready sync.WaitGroup
		ready.Add(2)
		f.beforeDomains = func() { ready.Done(); ready.Wait() }
		errs := make([]error, 2)
		taken := make([]*Taken, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				taken[i], errs[i] = c.Take(context.Background(), dev, holder(10+i))
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: errors %v, want exactly one winner", round, errs)
		}
		w := 0
		if errs[0] != nil {
			w = 1
		}
		var ce *ClaimedError
		if !errors.As(errs[1-w], &ce) || (ce.Holder != holder(10+w) && !ce.TakingOver) {
			t.Fatalf("round %d: loser %v", round, errs[1-w])
		}
		recs, err := c.List(context.Background())
		if err != nil || len(recs) != 1 || recs[0].Holder != holder(10+w) || taken[w].Reclaimed == nil {
			t.Fatalf("round %d: claims %+v (%v), winner %d", round, recs, err, w)
		}
	}
}

func TestTakeOver_aLateTakerDoesNotDeleteTheNewClaim(t *testing.T) {
	t.Parallel()
	f := newFake()
	clk := newClock(t0)
	c := claimer(f, clk)
	first, err := c.Take(context.Background(), dev, holder(1))
	if err != nil {
		t.Fatal(err)
	}
	stale := first.Record
	clk.set(t0.Add(time.Hour))
	// A takes the stale claim over and finishes (its reservation gone)...
	if _, err := c.Take(context.Background(), dev, holder(2)); err != nil {
		t.Fatal(err)
	}
	// ...then B, which read the same stale claim before, goes on with it
	body, _ := json.Marshal(Record{Version: 1, Device: gpu.String(), Holder: holder(3), Token: "late", Created: clk.now()})
	got, again, err := c.takeOver(context.Background(), gpu, &stale, Record{}, body)
	if err != nil || got != nil || !again {
		t.Fatalf("late takeover: %+v, again %v, %v; want to look again", got, again, err)
	}
	recs, _ := c.List(context.Background())
	if len(recs) != 1 || recs[0].Holder != holder(2) {
		t.Fatalf("claims %+v: the late taker replaced the new claim", recs)
	}
	if names := f.names(); len(names) != 1 {
		t.Errorf("volumes %v: the late taker left its reservation", names)
	}
	// and Take, looking again, names A as holder
	if _, err := c.Take(context.Background(), dev, holder(3)); err == nil || !strings.Contains(err.Error(), "VM vm-2") {
		t.Errorf("late taker's take: %v", err)
	}
}

func TestTakeOver_aCrashedReservationIsStaleInTurn(t *testing.T) {
	t.Parallel()
	f := newFake()
	clk := newClock(t0)
	c := claimer(f, clk)
	first, err := c.Take(context.Background(), dev, holder(1))
	if err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(time.Hour))
	// an apply reserved the takeover and crashed
	crashed, _ := json.Marshal(Record{Version: 1, Device: gpu.String(), Holder: holder(5), Token: "dead", Created: clk.now()})
	f.vols[takeoverName(gpu, first.Token, 1)] = crashed
	_, err = c.Take(context.Background(), dev, holder(2))
	var ce *ClaimedError
	if !errors.As(err, &ce) || !ce.TakingOver || ce.Holder != holder(5) || !strings.Contains(err.Error(), "being taken over right now by VM vm-5") {
		t.Fatalf("a fresh reservation: %v", err)
	}
	clk.set(t0.Add(2 * time.Hour))
	got, err := c.Take(context.Background(), dev, holder(2))
	if err != nil || got.Reclaimed == nil {
		t.Fatalf("after the reservation went stale: %+v, %v", got, err)
	}
	if _, ok := f.vols[takeoverName(gpu, first.Token, 2)]; ok {
		t.Error("the second reservation was left behind")
	}
}

func TestTake_aDeviceGivenByHandIsTaken(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.domains = []Domain{{Name: "handmade", UUID: "u-hand", Hostdevs: []vfio.Address{audio}}}
	c := claimer(f, newClock(t0))
	_, err := c.Take(context.Background(), dev, holder(1))
	var ce *ClaimedError
	if !errors.As(err, &ce) || !ce.ByHand || ce.Holder.VM != "handmade" {
		t.Fatalf("device in a domain by hand: %v", err)
	}
	if !strings.Contains(err.Error(), "domain handmade (u-hand) has it as a hostdev, without a Kohaku claim") {
		t.Errorf("message %q", err)
	}
	if f.creates != 0 {
		t.Error("a claim was created")
	}
	// a domain that holds the claim is named as its holder, not as by hand
	f.domains = nil
	if _, err := c.Take(context.Background(), dev, holder(3)); err != nil {
		t.Fatal(err)
	}
	f.domains = []Domain{{Name: "vm-3", UUID: holder(3).UUID, Hostdevs: []vfio.Address{gpu}}}
	if _, err := c.Take(context.Background(), dev, holder(1)); !errors.As(err, &ce) || ce.ByHand || ce.Holder != holder(3) {
		t.Errorf("device of a running claimed VM: %v", err)
	}
	if err := c.Release(context.Background(), gpu, holder(3)); err != nil {
		t.Fatal(err)
	}
	f.domains = []Domain{{Name: "handmade", UUID: "u-hand", Hostdevs: []vfio.Address{audio}}}
	// the holder's own domain having it is fine (a retried create)
	f.domains[0].UUID = holder(1).UUID
	if _, err := c.Take(context.Background(), dev, holder(1)); err != nil {
		t.Errorf("own domain: %v", err)
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	if err := c.Release(context.Background(), gpu, holder(1)); err != nil {
		t.Errorf("release of nothing: %v", err)
	}
	if _, err := c.Take(context.Background(), dev, holder(1)); err != nil {
		t.Fatal(err)
	}
	var nh *NotHolderError
	if err := c.Release(context.Background(), gpu, holder(2)); !errors.As(err, &nh) || nh.Holder != holder(1) {
		t.Errorf("release by another: %v", err)
	}
	if len(f.names()) != 1 {
		t.Fatal("someone else's release deleted the claim")
	}
	if err := c.Release(context.Background(), gpu, holder(1)); err != nil || len(f.names()) != 0 {
		t.Errorf("release by the holder: %v, left %v", err, f.names())
	}
}

func TestTakeAll_allOrNothing(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	other := Device{Address: vfio.Address{Bus: 0x5d}}
	if _, err := c.Take(context.Background(), other, holder(9)); err != nil {
		t.Fatal(err)
	}
	reads := f.domainReads.Load()
	_, err := c.TakeAll(context.Background(), []Device{dev, other}, holder(1))
	if n := f.domainReads.Load() - reads; n != 1 {
		t.Errorf("TakeAll of 2 devices read the domains %d times, want once", n)
	}
	var ce *ClaimedError
	if !errors.As(err, &ce) || ce.Device != other.Address {
		t.Fatalf("TakeAll: %v", err)
	}
	if names := f.names(); !slices.Equal(names, []string{VolumeName(other.Address)}) {
		t.Errorf("volumes %v: the first device's claim was not given back", names)
	}
	ts, err := c.TakeAll(context.Background(), []Device{dev}, holder(1))
	if err != nil || len(ts) != 1 {
		t.Errorf("TakeAll of a free device: %v", err)
	}
}

func TestList_skipsReservationsAndRefusesForeignContent(t *testing.T) {
	t.Parallel()
	f := newFake()
	c := claimer(f, newClock(t0))
	for _, b := range []uint8{0x9a, 0x18} {
		if _, err := c.Take(context.Background(), Device{Address: vfio.Address{Bus: b}}, holder(int(b))); err != nil {
			t.Fatal(err)
		}
	}
	f.vols[takeoverName(gpu, "x", 1)] = []byte("{}")
	f.vols["somebody-elses.iso"] = []byte("zzz")
	recs, err := c.List(context.Background())
	if err != nil || len(recs) != 2 || recs[0].Device != "0000:18:00.0" || recs[1].Device != "0000:9a:00.0" {
		t.Fatalf("claims %+v, %v", recs, err)
	}
	// padded with zeros, as a backend that rounds sizes up leaves it
	f.vols[VolumeName(gpu)] = append(f.vols[VolumeName(vfio.Address{Bus: 0x18})], 0, 0, 0)
	if _, err := c.List(context.Background()); err != nil {
		t.Errorf("a claim padded with zeros: %v", err)
	}
	f.vols[VolumeName(gpu)] = []byte("not json")
	_, err = c.List(context.Background())
	var fe *ForeignVolumeError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "virsh vol-delete --pool kohaku-claims kohaku-claim-0000_3b_00_0") {
		t.Errorf("foreign content: %v", err)
	}
	if _, err := c.Take(context.Background(), dev, holder(1)); !errors.As(err, &fe) {
		t.Errorf("take over foreign content: %v", err)
	}
}
