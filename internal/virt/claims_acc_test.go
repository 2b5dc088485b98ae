package virt

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// accHolder is a holder whose domain does not exist: a VM being created.
func accHolder(t *testing.T, vm string) claim.Holder {
	t.Helper()
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		t.Fatal(err)
	}
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	return claim.Holder{VM: vm, UUID: fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), Workspace: fmt.Sprintf("acc-%d", os.Getpid())}
}

// keepHostAsFound removes the claim pool at the end of the test when the
// test's claims made it (the provider leaves it for the next claim; a test
// leaves the host as it found it).
func keepHostAsFound(t *testing.T) {
	t.Helper()
	uri := acctest.URI(t)
	if _, err := acctest.Virsh(uri, "pool-info", claim.Pool); err == nil {
		return
	}
	_, statErr := os.Stat(claim.PoolPath)
	t.Cleanup(func() {
		_, _ = acctest.Virsh(uri, "pool-destroy", claim.Pool)
		if out, err := acctest.Virsh(uri, "pool-undefine", claim.Pool); err != nil {
			t.Errorf("removing the claim pool the test made: %v\n%s", err, out)
		}
		if os.IsNotExist(statErr) {
			_ = os.Remove(claim.PoolPath)
		}
	})
}

// accDevice is a PCI address no host has, so the claims made on it touch
// no real device; the claim protocol never looks at the device itself.
func accDevice(i int) claim.Device {
	a := vfio.Address{Domain: 0xfffe, Bus: uint8(os.Getpid()), Slot: uint8(i & 0x1f)}
	return claim.Device{Address: a, Functions: []vfio.Address{a}}
}

// Two applies racing for one device through two separate connections to
// libvirtd, ten times: exactly one gets the claim each time, and the other
// fails naming it; the winner gives it back and the volume is gone.
func TestAccClaims_raceOneWins(t *testing.T) {
	a, b := accClient(t), accClient(t)
	keepHostAsFound(t)
	ctx := context.Background()
	for _, c := range []*Client{a, b} { // dial both before the race
		if _, err := c.Domains(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dev := accDevice(1)
	name := claim.VolumeName(dev.Address)
	t.Cleanup(func() { _ = a.DeleteClaim(context.Background(), name) })
	for round := range 10 {
		hs := []claim.Holder{accHolder(t, fmt.Sprintf("race-a-%d", round)), accHolder(t, fmt.Sprintf("race-b-%d", round))}
		claimers := []*claim.Claimer{{Host: a}, {Host: b}}
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = claimers[i].Take(ctx, dev, hs[i])
			}()
		}
		close(start)
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: errors %v and %v, want exactly one winner", round+1, errs[0], errs[1])
		}
		w := 0
		if errs[0] != nil {
			w = 1
		}
		var ce *claim.ClaimedError
		if !errors.As(errs[1-w], &ce) || ce.Holder != hs[w] {
			t.Fatalf("round %d: loser's error %v, want a *ClaimedError naming %v", round+1, errs[1-w], hs[w])
		}
		t.Logf("round %d: %s won; the other got: %v", round+1, hs[w].VM, errs[1-w])
		recs, err := claimers[1-w].List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range recs {
			if r.Device == dev.Address.String() {
				found = r.Holder == hs[w]
			}
		}
		if !found {
			t.Fatalf("round %d: the claims listed %+v do not show %s holding %s", round+1, recs, hs[w].VM, dev.Address)
		}
		if err := claimers[1-w].Release(ctx, dev.Address, hs[1-w]); !errors.As(err, new(*claim.NotHolderError)) {
			t.Fatalf("round %d: release by the loser: %v, want a *NotHolderError", round+1, err)
		}
		if err := claimers[w].Release(ctx, dev.Address, hs[w]); err != nil {
			t.Fatalf("round %d: release by the winner: %v", round+1, err)
		}
		if _, err := a.ReadClaim(ctx, name); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("round %d: after release, reading the claim: %v, want not found", round+1, err)
		}
	}
}

// A claim whose VM never came (older than StaleAfter, no domain of its
// UUID) is taken over by the next apply, which says so.
func TestAccClaims_staleClaimTakenOver(t *testing.T) {
	c := accClient(t)
	keepHostAsFound(t)
	ctx := context.Background()
	dev := accDevice(2)
	t.Cleanup(func() { _ = c.DeleteClaim(context.Background(), claim.VolumeName(dev.Address)) })
	gone := accHolder(t, "crashed-create")
	past := &claim.Claimer{Host: c, Now: func() time.Time { return time.Now().Add(-time.Hour) }}
	if _, err := past.Take(ctx, dev, gone); err != nil {
		t.Fatal(err)
	}
	next := accHolder(t, "next-apply")
	got, err := (&claim.Claimer{Host: c}).Take(ctx, dev, next)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reclaimed == nil || got.Reclaimed.Holder != gone || got.Holder != next {
		t.Fatalf("takeover %+v", got)
	}
	t.Log(got.Message())
	names, err := c.ListClaims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n != claim.VolumeName(dev.Address) && strings.HasPrefix(n, claim.VolumeName(dev.Address)) || strings.HasPrefix(n, "kohaku-scratch-") {
			t.Errorf("volume %s left behind by the takeover", n)
		}
	}
}
