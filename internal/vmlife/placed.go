package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Placer chooses a host and devices for a VM's request; placement.Shared
// is one. Snapshots gives the hosts as the placer last saw them, which
// name each GPU's IOMMU group.
type Placer interface {
	Place(ctx context.Context, r *placement.Request) (*placement.Placement, error)
	Snapshots(ctx context.Context, names []string) []*placement.Host
}

// DeviceClaims takes and gives back claims on one host's devices, and
// holds back (quarantines) a device that could not be reset;
// *claim.Claimer is one.
type DeviceClaims interface {
	TakeAll(ctx context.Context, devs []claim.Device, h claim.Holder) ([]*claim.Taken, error)
	Release(ctx context.Context, dev vfio.Address, h claim.Holder) error
	Quarantine(ctx context.Context, dev vfio.Address, reason string, from claim.Holder) error
}

// GPUResetter resets a GPU's IOMMU group through the host's kernel while
// it is on vfio-pci and no domain holds it; gpubind.GroupResetter is one.
// An error wrapping hostapi.ErrHostFilesUnsupported says the connection
// cannot reach the kernel's reset at all (tcp, tls): nothing was tried.
type GPUResetter interface {
	ResetGPU(ctx context.Context, gpu vfio.Address) error
}

// GPUBinder moves a placed GPU's IOMMU group to vfio-pci, as a
// kohaku_gpu_binding would, and gives back what it moved; gpubind.Placed
// is one. BindGPU returns every function of the group now on vfio-pci and
// those it moved there; on failure, those it moved and could not give back.
type GPUBinder interface {
	BindGPU(ctx context.Context, gpu vfio.Address) (all, moved []vfio.Address, err error)
	GiveBackGPU(ctx context.Context, fns []vfio.Address) error
}

// PlacedHost is a chosen host's side of a placed VM.
type PlacedHost struct {
	Claims DeviceClaims
	Binder GPUBinder
	// Resetter resets each GPU a destroyed VM gives back; nil resets
	// none.
	Resetter GPUResetter
}

// Steps of Acquire, as AcquireError names them.
const (
	StepChoose = "choose a host and GPUs"
	StepClaim  = "claim the GPUs"
	StepBind   = "bind the GPUs to vfio-pci"
)

// AcquireError is a placement that failed at Step; Left says what the
// rollback could not give back (nothing when empty: the hosts are as they
// were).
type AcquireError struct {
	Step string
	Err  error
	Left []string
}

func (e *AcquireError) Error() string {
	s := e.Step + ": " + e.Err.Error()
	if len(e.Left) > 0 {
		s += " (and giving back what was taken failed: " + strings.Join(e.Left, "; ") + ")"
	}
	return s
}
func (e *AcquireError) Unwrap() error { return e.Err }

// Acquired is what a placed VM holds before its domain is made: the host
// and GPUs placement chose, a claim on each, and their groups on vfio-pci.
type Acquired struct {
	Placement *placement.Placement
	Holder    claim.Holder
	// Functions are each GPU's functions on vfio-pci, what the VM passes
	// through; Moved those Acquire moved there, what Release gives back.
	Functions map[vfio.Address][]vfio.Address
	Moved     map[vfio.Address][]vfio.Address
	// Notes say what claiming did beyond the ordinary (stale claims taken
	// over).
	Notes []string
	host  PlacedHost
	devs  []claim.Device
}

// Confirm takes the claims again right before the domain is defined:
// Take returns Already while a claim is still this VM's, so a create that
// stalled past claim.StaleAfter between its claims and its define, and
// had a GPU taken over meanwhile, finds it here and defines nothing (the
// claim package's one gap, narrowed to the define call itself).
func (a *Acquired) Confirm(ctx context.Context) error {
	if a == nil || a.host.Claims == nil || len(a.devs) == 0 {
		return nil
	}
	if _, err := a.host.Claims.TakeAll(ctx, a.devs, a.Holder); err != nil {
		return fmt.Errorf("confirming the GPU claims before the define: %w", err)
	}
	return nil
}

// Acquire places r (Placer), then on the chosen host claims its GPUs (all
// or none), then binds each to vfio-pci. Nothing is made before the
// claims: of two applies racing for the last GPU, the loser fails here
// naming the holder. A failure gives back, last first, what was taken and
// comes back as an *AcquireError whose cause is the placer's (a
// *placement.NoFitError or *placement.AttributeError), the claim's (a
// *claim.ClaimedError) or the bind's. h.UUID is the UUID the domain will
// be defined with.
func Acquire(ctx context.Context, p Placer, host func(name string) (PlacedHost, error), r *placement.Request, h claim.Holder) (*Acquired, error) {
	pl, err := p.Place(ctx, r)
	if err != nil {
		return nil, &AcquireError{Step: StepChoose, Err: err}
	}
	a := &Acquired{Placement: pl, Holder: h, Functions: map[vfio.Address][]vfio.Address{}, Moved: map[vfio.Address][]vfio.Address{}}
	if len(pl.GPUs) == 0 {
		return a, nil
	}
	if len(pl.Mdevs) > 0 {
		return nil, &AcquireError{Step: StepChoose, Err: errors.New("vGPUs (mdev) are not placed by kohaku_vm yet; ask for whole GPUs")}
	}
	ph, err := host(pl.Host)
	if err != nil {
		return nil, &AcquireError{Step: StepClaim, Err: fmt.Errorf("host %q: %w", pl.Host, err)}
	}
	a.host = ph
	devs := claimDevices(p, pl)
	a.devs = devs
	taken, err := ph.Claims.TakeAll(ctx, devs, h)
	if err != nil {
		return nil, &AcquireError{Step: StepClaim, Err: err}
	}
	for _, t := range taken {
		if t.Reclaimed != nil {
			a.Notes = append(a.Notes, t.Message())
		}
	}
	for _, g := range pl.GPUs {
		all, moved, err := ph.Binder.BindGPU(ctx, g)
		if len(moved) > 0 {
			a.Moved[g] = moved
		}
		if err != nil {
			return nil, &AcquireError{Step: StepBind, Err: err, Left: a.release(ctx)}
		}
		a.Functions[g] = all
	}
	return a, nil
}

// claimDevices are the placed GPUs with their groups' functions as the
// placer's snapshot of the host has them (the GPU alone when it does not).
func claimDevices(p Placer, pl *placement.Placement) []claim.Device {
	var snap *placement.Host
	if hs := p.Snapshots(context.Background(), []string{pl.Host}); len(hs) == 1 {
		snap = hs[0]
	}
	devs := make([]claim.Device, 0, len(pl.GPUs))
	for _, g := range pl.GPUs {
		d := claim.Device{Address: g, Functions: []vfio.Address{g}}
		if snap != nil {
			if i := slices.IndexFunc(snap.GPUs, func(x placement.GPU) bool { return x.Address == g }); i >= 0 && len(snap.GPUs[i].GroupMembers) > 0 {
				d.Functions = slices.Clone(snap.GPUs[i].GroupMembers)
			}
		}
		devs = append(devs, d)
	}
	return devs
}

// Release gives back what Acquire took, last first: the GPUs it moved to
// vfio-pci, then the claims, without a reset. It is for a create that
// fails after Acquire and keeps nothing in state; the error lists what
// could not be given back.
func (a *Acquired) Release(ctx context.Context) error {
	if left := a.release(ctx); len(left) > 0 {
		return fmt.Errorf("giving back the placed GPUs: %s", strings.Join(left, "; "))
	}
	return nil
}

func (a *Acquired) release(ctx context.Context) []string {
	if a.host.Claims == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	return releaseOn(ctx, a.host, a.Holder, a.Placement.GPUs, a.Moved, nil)
}

// GPUNote is a GPU and what happened to it, for a warning.
type GPUNote struct {
	GPU vfio.Address
	Why string
}

// Hygiene is what ReleasePlaced did to make each GPU clean for its next
// VM: the GPUs it reset, those it quarantined (could not be reset: no
// reset method, or the reset failed), and those the connection could not
// reset at all (given back unreset, as before Kohaku reset GPUs).
type Hygiene struct {
	Reset       []vfio.Address
	Quarantined []GPUNote
	Unreset     []GPUNote
}

// ReleasePlaced gives back a placed VM's GPUs once its domain is gone,
// last GPU first. First each GPU's group is reset while it is still on
// vfio-pci (PlacedHost.Resetter); a GPU that cannot be reset is
// quarantined (its marker is written before its claim is released, so no
// apply can take it in between: see internal/claim). Then the functions
// placement moved to vfio-pci (moved, by GPU) go back to the host, then
// each GPU's claim is released. It goes on past a failure, so that
// everything that can be given back is; the error names what could not.
// A GPU that could be neither reset nor quarantined keeps its claim.
func ReleasePlaced(ctx context.Context, h PlacedHost, holder claim.Holder, gpus []vfio.Address, moved map[vfio.Address][]vfio.Address) (*Hygiene, error) {
	hy := resetOrQuarantine(ctx, h, holder, gpus)
	left := hy.left
	left = append(left, releaseOn(ctx, h, holder, gpus, moved, hy.keep)...)
	if len(left) > 0 {
		return &hy.Hygiene, fmt.Errorf("giving back the placed GPUs: %s", strings.Join(left, "; "))
	}
	return &hy.Hygiene, nil
}

type hygieneRun struct {
	Hygiene
	keep map[vfio.Address]bool
	left []string
}

// resetOrQuarantine resets each of gpus, or quarantines it when it cannot
// be reset; a GPU whose marker could not be written is to keep its claim.
func resetOrQuarantine(ctx context.Context, h PlacedHost, holder claim.Holder, gpus []vfio.Address) hygieneRun {
	run := hygieneRun{keep: map[vfio.Address]bool{}}
	if h.Resetter == nil {
		return run
	}
	for _, g := range slices.Backward(gpus) {
		err := h.Resetter.ResetGPU(ctx, g)
		switch {
		case err == nil:
			run.Reset = append(run.Reset, g)
		case errors.Is(err, hostapi.ErrHostFilesUnsupported):
			run.Unreset = append(run.Unreset, GPUNote{GPU: g, Why: err.Error()})
		default:
			why := fmt.Sprintf("not reset after VM %s: %v", holder.VM, err)
			if qerr := h.Claims.Quarantine(ctx, g, why, holder); qerr != nil {
				run.keep[g] = true
				run.left = append(run.left, fmt.Sprintf("%s could not be reset (%v) nor quarantined (%v): its claim is kept so that no VM gets it; "+
					"reset it with the kohaku_gpu_reset action, then delete its claim (virsh vol-delete --pool %s %s)", g, err, qerr, claim.Pool, claim.VolumeName(g)))
				continue
			}
			run.Quarantined = append(run.Quarantined, GPUNote{GPU: g, Why: why})
		}
	}
	return run
}

func releaseOn(ctx context.Context, h PlacedHost, holder claim.Holder, gpus []vfio.Address, moved map[vfio.Address][]vfio.Address, keep map[vfio.Address]bool) []string {
	var left []string
	for _, g := range slices.Backward(gpus) {
		if fns := moved[g]; len(fns) > 0 {
			if err := h.Binder.GiveBackGPU(ctx, fns); err != nil {
				left = append(left, err.Error())
			}
		}
	}
	for _, g := range slices.Backward(gpus) {
		if keep[g] {
			continue
		}
		if err := h.Claims.Release(ctx, g, holder); err != nil {
			left = append(left, fmt.Sprintf("releasing the claim on %s: %v", g, err))
		}
	}
	return left
}
