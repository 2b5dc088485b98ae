package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// placedWorld is a fleet of fakes that logs every step in order and
// keeps what is held: claims by device, functions on vfio-pci.
type placedWorld struct {
	ops      []string
	pl       *placement.Placement
	placeErr error
	claims   map[vfio.Address]string // device -> holder UUID
	onVFIO   map[vfio.Address]bool
	fail     map[string]error // "take", "bind <addr>", "giveback <addr>", "release <addr>", "reset <addr>", "quarantine <addr>"
	hostErr  error
	// quarantined holds each quarantined device's reason.
	quarantined map[vfio.Address]string
}

func gpuAddr(bus uint8) vfio.Address { return vfio.Address{Bus: bus} }

func audioOf(a vfio.Address) vfio.Address { a.Function = 1; return a }

func newPlacedWorld(gpus ...vfio.Address) *placedWorld {
	return &placedWorld{
		pl:     &placement.Placement{Host: "gpu2", NUMANode: 0, GPUs: gpus},
		claims: map[vfio.Address]string{}, onVFIO: map[vfio.Address]bool{}, fail: map[string]error{},
		quarantined: map[vfio.Address]string{},
	}
}

func (w *placedWorld) Place(_ context.Context, r *placement.Request) (*placement.Placement, error) {
	w.ops = append(w.ops, "place "+r.Name)
	if w.placeErr != nil {
		return nil, w.placeErr
	}
	return w.pl, nil
}

func (w *placedWorld) Snapshots(_ context.Context, names []string) []*placement.Host {
	h := &placement.Host{Name: names[0]}
	for _, g := range w.pl.GPUs {
		h.GPUs = append(h.GPUs, placement.GPU{Address: g, GroupMembers: []vfio.Address{g, audioOf(g)}})
	}
	return []*placement.Host{h}
}

func (w *placedWorld) TakeAll(_ context.Context, devs []claim.Device, h claim.Holder) ([]*claim.Taken, error) {
	for _, d := range devs {
		w.ops = append(w.ops, fmt.Sprintf("claim %s (%d functions)", d.Address, len(d.Functions)))
	}
	if err := w.fail["take"]; err != nil {
		return nil, err // TakeAll takes all or none
	}
	var out []*claim.Taken
	for _, d := range devs {
		w.claims[d.Address] = h.UUID
		out = append(out, &claim.Taken{Record: claim.Record{Device: d.Address.String(), Holder: h}})
	}
	return out, nil
}

func (w *placedWorld) Release(_ context.Context, dev vfio.Address, h claim.Holder) error {
	w.ops = append(w.ops, "release "+dev.String())
	if err := w.fail["release "+dev.String()]; err != nil {
		return err
	}
	if w.claims[dev] == h.UUID {
		delete(w.claims, dev)
	}
	return nil
}

func (w *placedWorld) BindGPU(_ context.Context, g vfio.Address) (all, moved []vfio.Address, err error) {
	w.ops = append(w.ops, "bind "+g.String())
	if err := w.fail["bind "+g.String()]; err != nil {
		return nil, nil, err
	}
	fns := []vfio.Address{g, audioOf(g)}
	for _, f := range fns {
		w.onVFIO[f] = true
	}
	return fns, fns, nil
}

func (w *placedWorld) GiveBackGPU(_ context.Context, fns []vfio.Address) error {
	w.ops = append(w.ops, "giveback "+fns[0].String())
	if err := w.fail["giveback "+fns[0].String()]; err != nil {
		return err
	}
	for _, f := range fns {
		delete(w.onVFIO, f)
	}
	return nil
}

func (w *placedWorld) Quarantine(_ context.Context, dev vfio.Address, reason string, from claim.Holder) error {
	w.ops = append(w.ops, "quarantine "+dev.String())
	if err := w.fail["quarantine "+dev.String()]; err != nil {
		return err
	}
	if from != trainer {
		return fmt.Errorf("quarantined as given back by %s", from)
	}
	w.quarantined[dev] = reason
	return nil
}

// ResetGPU resets only a group that is on vfio-pci, as gpubind.Reset.
func (w *placedWorld) ResetGPU(_ context.Context, g vfio.Address) error {
	w.ops = append(w.ops, "reset "+g.String())
	if !w.onVFIO[g] {
		return fmt.Errorf("%s: not bound to vfio-pci", g)
	}
	return w.fail["reset "+g.String()]
}

func (w *placedWorld) host(name string) (PlacedHost, error) {
	if w.hostErr != nil {
		return PlacedHost{}, w.hostErr
	}
	return PlacedHost{Claims: w, Binder: w}, nil
}

func (w *placedWorld) holds() string {
	return fmt.Sprintf("%d claims, %d functions on vfio-pci", len(w.claims), len(w.onVFIO))
}

var trainer = claim.Holder{VM: "train", UUID: "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"}

func trainRequest() *placement.Request {
	return &placement.Request{Name: "train", GPU: &placement.GPUAsk{Count: 2}, VCPUs: 4, MemoryMiB: 4096}
}

func TestAcquire_placesThenClaimsThenBinds(t *testing.T) {
	t.Parallel()
	w := newPlacedWorld(gpuAddr(0x18), gpuAddr(0x2a))
	a, err := Acquire(context.Background(), w, w.host, trainRequest(), trainer)
	if err != nil {
		t.Fatal(err)
	}
	want := "place train; claim 0000:18:00.0 (2 functions); claim 0000:2a:00.0 (2 functions); bind 0000:18:00.0; bind 0000:2a:00.0"
	if got := strings.Join(w.ops, "; "); got != want {
		t.Errorf("steps\n got %s\nwant %s", got, want)
	}
	if a.Placement.Host != "gpu2" || len(a.Functions[gpuAddr(0x18)]) != 2 || len(a.Moved[gpuAddr(0x2a)]) != 2 {
		t.Errorf("acquired %+v", a)
	}
	if w.holds() != "2 claims, 4 functions on vfio-pci" {
		t.Errorf("holds %s", w.holds())
	}
	w.ops = nil
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	want = "giveback 0000:2a:00.0; giveback 0000:18:00.0; release 0000:2a:00.0; release 0000:18:00.0"
	if got := strings.Join(w.ops, "; "); got != want {
		t.Errorf("release steps\n got %s\nwant %s", got, want)
	}
	if w.holds() != "0 claims, 0 functions on vfio-pci" {
		t.Errorf("after release: holds %s", w.holds())
	}
}

// A failure at each step leaves nothing held, and the error says which
// step failed and why, with the cause reachable.
func TestAcquire_failureAtEachStepLeavesNothing(t *testing.T) {
	t.Parallel()
	nofit := &placement.NoFitError{Request: "2 GPUs", Misses: []placement.HostMiss{{Host: "gpu1", Reason: "no GPU"}}}
	holder := &claim.ClaimedError{Device: gpuAddr(0x18), Holder: claim.Holder{VM: "other", UUID: "u-2"}}
	for name, tc := range map[string]struct {
		setup   func(w *placedWorld)
		step    string
		cause   func(error) bool
		lastOps string
	}{
		"place": {
			setup: func(w *placedWorld) { w.placeErr = nofit },
			step:  StepChoose, cause: func(err error) bool { var e *placement.NoFitError; return errors.As(err, &e) },
			lastOps: "place train",
		},
		"host": {
			setup: func(w *placedWorld) { w.hostErr = errors.New("connection refused") },
			step:  StepClaim, cause: func(err error) bool { return strings.Contains(err.Error(), "connection refused") },
			lastOps: "place train",
		},
		"claim": {
			setup: func(w *placedWorld) { w.fail["take"] = holder },
			step:  StepClaim, cause: func(err error) bool { var e *claim.ClaimedError; return errors.As(err, &e) },
			lastOps: "claim 0000:2a:00.0 (2 functions)",
		},
		"first bind": {
			setup: func(w *placedWorld) { w.fail["bind 0000:18:00.0"] = errors.New("held by nvidia-persistenced") },
			step:  StepBind, cause: func(err error) bool { return strings.Contains(err.Error(), "nvidia-persistenced") },
			lastOps: "release 0000:18:00.0",
		},
		"second bind": {
			setup: func(w *placedWorld) { w.fail["bind 0000:2a:00.0"] = errors.New("detach failed") },
			step:  StepBind, cause: func(err error) bool { return strings.Contains(err.Error(), "detach failed") },
			lastOps: "release 0000:18:00.0",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newPlacedWorld(gpuAddr(0x18), gpuAddr(0x2a))
			tc.setup(w)
			a, err := Acquire(context.Background(), w, w.host, trainRequest(), trainer)
			var ae *AcquireError
			if a != nil || !errors.As(err, &ae) || ae.Step != tc.step || !tc.cause(err) || len(ae.Left) != 0 {
				t.Fatalf("got %v, %v; want an AcquireError at %q", a, err, tc.step)
			}
			if w.holds() != "0 claims, 0 functions on vfio-pci" {
				t.Errorf("holds %s after %v (steps %q)", w.holds(), err, w.ops)
			}
			if got := w.ops[len(w.ops)-1]; got != tc.lastOps {
				t.Errorf("last step %q, want %q (steps %q)", got, tc.lastOps, w.ops)
			}
		})
	}
}

func TestAcquire_rollbackThatFailsSaysWhatIsLeft(t *testing.T) {
	t.Parallel()
	w := newPlacedWorld(gpuAddr(0x18), gpuAddr(0x2a))
	w.fail["bind 0000:2a:00.0"] = errors.New("detach failed")
	w.fail["giveback 0000:18:00.0"] = errors.New("reattach failed")
	_, err := Acquire(context.Background(), w, w.host, trainRequest(), trainer)
	var ae *AcquireError
	if !errors.As(err, &ae) || len(ae.Left) != 1 || !strings.Contains(err.Error(), "reattach failed") {
		t.Fatalf("err %v", err)
	}
	// The claims still go: the device is given back by hand, and no other
	// VM is refused it for a claim nobody holds.
	if len(w.claims) != 0 {
		t.Errorf("claims %v left", w.claims)
	}
}

func TestAcquire_CPUOnlyClaimsNothing(t *testing.T) {
	t.Parallel()
	w := newPlacedWorld()
	a, err := Acquire(context.Background(), w, w.host, &placement.Request{Name: "web", VCPUs: 1, MemoryMiB: 512}, trainer)
	if err != nil || a.Placement.Host != "gpu2" || strings.Join(w.ops, ";") != "place web" {
		t.Fatalf("a %+v err %v ops %q", a, err, w.ops)
	}
	if err := a.Release(context.Background()); err != nil || len(w.ops) != 1 {
		t.Errorf("release of nothing: %v, ops %q", err, w.ops)
	}
}

func TestReleasePlaced_givesBackThenReleasesAndGoesOnPastFailures(t *testing.T) {
	t.Parallel()
	w := newPlacedWorld(gpuAddr(0x18), gpuAddr(0x2a))
	if _, err := Acquire(context.Background(), w, w.host, trainRequest(), trainer); err != nil {
		t.Fatal(err)
	}
	ph, _ := w.host("gpu2")
	moved := map[vfio.Address][]vfio.Address{gpuAddr(0x18): {gpuAddr(0x18), audioOf(gpuAddr(0x18))}}
	w.ops = nil
	w.fail["release 0000:2a:00.0"] = errors.New("pool gone")
	_, err := ReleasePlaced(context.Background(), ph, trainer, []vfio.Address{gpuAddr(0x18), gpuAddr(0x2a)}, moved)
	if err == nil || !strings.Contains(err.Error(), "0000:2a:00.0: pool gone") {
		t.Fatalf("err %v", err)
	}
	// only what placement moved goes back (0x2a was on vfio-pci before, per moved)
	want := "giveback 0000:18:00.0; release 0000:2a:00.0; release 0000:18:00.0"
	if got := strings.Join(w.ops, "; "); got != want {
		t.Errorf("steps\n got %s\nwant %s", got, want)
	}
	if _, ok := w.claims[gpuAddr(0x18)]; ok {
		t.Errorf("claim on 0000:18:00.0 kept after the other failed")
	}
}

// A placed create confirms its claims right before the define: while they
// are its own the confirmation takes them again (Already); once another
// apply took one over (a create stalled past claim.StaleAfter), Create
// stops before the define, defines nothing and rolls back what it made.
func TestAcquire_confirmBeforeDefine(t *testing.T) {
	t.Parallel()
	w := newPlacedWorld(gpuAddr(0x18))
	a, err := Acquire(context.Background(), w, w.host, trainRequest(), trainer)
	if err != nil {
		t.Fatal(err)
	}
	w.ops = nil
	if err := a.Confirm(context.Background()); err != nil || strings.Join(w.ops, "; ") != "claim 0000:18:00.0 (2 functions)" {
		t.Fatalf("confirming own claims: %v, steps %q", err, w.ops)
	}
	// Taken over meanwhile: the fake's TakeAll fails as claim.Take does.
	w.fail["take"] = &claim.ClaimedError{Device: gpuAddr(0x18), Holder: claim.Holder{VM: "other", UUID: "0b5e1a2c-3d4e-4f50-8a6b-7c8d9e0f1a2b"}}
	h := newFakeHost()
	p := createPlan(h, "train")
	p.BeforeDefine = a.Confirm
	_, err = Create(context.Background(), h, p)
	var ce *claim.ClaimedError
	if err == nil || !errors.As(err, &ce) || ce.Holder.VM != "other" {
		t.Fatalf("create after a takeover: err = %v, want the claim error naming the other VM", err)
	}
	if slices.Contains(h.ops, "DefineDomain") || len(h.domains) != 0 {
		t.Errorf("the create defined a domain on a GPU another VM holds: ops %q", h.ops)
	}
	if got := h.state(); got != baseOnly {
		t.Errorf("what the create made was not rolled back:\n%s", got)
	}
}
