package vmlife

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// CleanupTimeout bounds the rollback of a failed create, which runs even
// when the create's own deadline has passed.
var CleanupTimeout = 2 * time.Minute

// Steps of Create, as CreateError names them.
const (
	StepCheckName = "check the name"
	StepOverlay   = "create the overlay volume"
	StepDataDisks = "create the data disk volumes"
	StepXML       = "build the domain XML"
	StepDefine    = "define the domain"
	StepAutostart = "set autostart"
	StepStart     = "start the domain"
	StepReady     = "wait for the guest to be ready"
	StepReadBack  = "read the new domain back"
)

// Plan is a VM to create, resolved against the host (Resolve).
type Plan struct {
	Spec domain.Spec
	// Base is the image an overlay disk is backed by; nil when the VM gets
	// no overlay (an existing volume, or no disk). The overlay is
	// Spec.Disk's pool and volume, of SizeBytes (0: the base's size). An
	// existing volume smaller than SizeBytes is grown to it first.
	Base      *domain.VolumeRef
	SizeBytes int64
	// NewDisks are the data disks whose volumes the create makes.
	NewDisks  []NewDisk
	Autostart bool
	Running   bool
	// Ready waits for the started guest, bounded by ctx; nil does not wait.
	Ready func(ctx context.Context) error
	// BeforeDefine runs right before the domain is defined; an error ends
	// the create there, rolling back what was made. A placed VM confirms
	// its GPU claims with it (Acquired.Confirm).
	BeforeDefine func(ctx context.Context) error
	// KeepOnReadyFailure keeps a VM whose readiness wait failed, for
	// inspection, instead of rolling it back.
	KeepOnReadyFailure bool
	// Timeout is the create timeout ctx carries, for messages.
	Timeout time.Duration
}

// CreateError is a create that failed at Step.
type CreateError struct {
	Step string
	Err  error
	// Made says something had been made on the host; it was then rolled
	// back (RolledBack), or kept after a failed readiness wait (Kept).
	Made bool
	// RolledBack says what the rollback undid, Left what it could not.
	RolledBack, Left []string
	// Kept is set when the VM was kept after its readiness wait failed
	// (KeepOnReadyFailure); View is the VM read back then, if it could be.
	Kept bool
	View *View
	// Defined and Overlay are what the create made that is still on the
	// host (what the rollback undid is not): set when Left is not empty
	// or the VM was kept.
	Defined *hostapi.DomainRef
	Overlay *domain.VolumeRef
}

func (e *CreateError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *CreateError) Unwrap() error { return e.Err }

// creation records what a create has made, so a failure can undo it.
type creation struct {
	h       Host
	name    string
	overlay *domain.VolumeRef
	// volumes are the data disk volumes made.
	volumes []domain.VolumeRef
	defined *hostapi.DomainRef
	// maybeDefined is set when defining failed in a way that leaves its
	// outcome unknown (the connection was lost mid-call): rollback then looks
	// the domain up by name, which was checked to be free before.
	maybeDefined bool
}

func (vc *creation) made() bool {
	return vc.overlay != nil || len(vc.volumes) > 0 || vc.defined != nil || vc.maybeDefined
}

// fail rolls back what was made and describes the failure.
func (vc *creation) fail(ctx context.Context, step string, err error) *CreateError {
	e := &CreateError{Step: step, Err: err, Made: vc.made()}
	if !e.Made {
		return e
	}
	e.RolledBack, e.Left = vc.rollback(ctx)
	if len(e.Left) > 0 {
		e.Defined, e.Overlay = vc.defined, vc.overlay
	}
	return e
}

// rollback removes everything this create made, with its own deadline so it
// runs even after the create's timeout. It returns what it did and what it
// could not undo.
func (vc *creation) rollback(ctx context.Context) (done []string, left []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	// A host that cannot be reached (libvirtd restarting) is waited for:
	// each undo step runs again until libvirt answers, for a while.
	retry := func(fn func() error) error { return hostconn.WhileUnreachable(ctx, hostconn.Unreachable, fn) }
	if vc.defined == nil && vc.maybeDefined {
		var ref hostapi.DomainRef
		err := retry(func() (err error) { ref, err = vc.h.LookupDomain(ctx, vc.name); return err })
		if err == nil {
			vc.defined = &ref
		} else if !errors.Is(err, hostapi.ErrDomainNotFound) {
			left = append(left, fmt.Sprintf("domain %s may have been defined (%v): virsh undefine --nvram %s", vc.name, err, vc.name))
		}
	}
	if vc.defined != nil {
		if err := retry(func() error { _, err := vc.h.StopDomain(ctx, *vc.defined, 0); return err }); err != nil {
			left = append(left, fmt.Sprintf("domain %s is still running (%v): virsh destroy %s; virsh undefine --nvram %s", vc.name, err, vc.name, vc.name))
		} else if err := retry(func() error { return vc.h.UndefineDomain(ctx, *vc.defined) }); err != nil {
			left = append(left, fmt.Sprintf("domain %s is still defined (%v): virsh undefine --nvram %s", vc.name, err, vc.name))
		} else {
			done = append(done, "undefined domain "+vc.name)
			vc.defined = nil
		}
	}
	var kept []domain.VolumeRef
	for _, v := range vc.volumes {
		if err := retry(func() error { return vc.h.RemoveVolume(ctx, v.Pool, v.Volume) }); err != nil {
			left = append(left, fmt.Sprintf("data disk volume %s/%s is still there (%v): virsh vol-delete --pool %s %s", v.Pool, v.Volume, err, v.Pool, v.Volume))
			kept = append(kept, v)
		} else {
			done = append(done, fmt.Sprintf("deleted data disk volume %s/%s", v.Pool, v.Volume))
		}
	}
	vc.volumes = kept
	if vc.overlay != nil {
		if err := retry(func() error { return vc.h.RemoveVolume(ctx, vc.overlay.Pool, vc.overlay.Volume) }); err != nil {
			left = append(left, fmt.Sprintf("overlay volume %s/%s is still there (%v): virsh vol-delete --pool %s %s", vc.overlay.Pool, vc.overlay.Volume, err, vc.overlay.Pool, vc.overlay.Volume))
		} else {
			done = append(done, fmt.Sprintf("deleted overlay volume %s/%s", vc.overlay.Pool, vc.overlay.Volume))
			vc.overlay = nil // undone: the state must not claim it
		}
	}
	return done, left
}

// Create makes the VM: checks the name is free, creates the overlay volume,
// defines the domain, sets autostart, starts it and waits for it to be ready,
// then reads it back. A failed step rolls back everything made before it
// and comes back as a *CreateError. Calls that make something run to
// completion even when ctx ends meanwhile (each is still bounded by the
// host's own call timeout): a call abandoned halfway would leave an object
// the create cannot account for. ctx is checked between them.
func Create(ctx context.Context, h Host, p Plan) (*View, error) {
	spec := p.Spec
	vc := &creation{h: h, name: spec.Name}
	steady, cancel := bounded(ctx)
	defer cancel()
	expired := func() error {
		if ctx.Err() != nil {
			return fmt.Errorf("the create timeout (%s) ran out; raise timeouts.create if the host is slow", p.Timeout)
		}
		return nil
	}

	// 1. The name must be free: a domain this create did not make is not
	// to be touched, let alone rolled back.
	if ref, err := h.LookupDomain(ctx, spec.Name); err == nil {
		return nil, vc.fail(ctx, StepCheckName, fmt.Errorf("a domain named %s already exists (UUID %s) and this "+
			"resource did not create it. Choose another name, remove that domain (virsh undefine --nvram %s), "+
			"or bring it under Terraform with terraform import", spec.Name, ref.UUID, spec.Name))
	} else if !errors.Is(err, hostapi.ErrDomainNotFound) {
		return nil, vc.fail(ctx, StepCheckName, err)
	}

	// 2. The overlay volume.
	if p.Base != nil && spec.Disk != nil {
		if err := expired(); err != nil {
			return nil, vc.fail(ctx, StepOverlay, err)
		}
		vol, err := h.CreateOverlay(steady, spec.Disk.Pool, spec.Disk.Volume, p.Base.Pool, p.Base.Volume, p.SizeBytes)
		if outcomeUnknown(err) {
			// The outcome is unknown; the name was free when the call
			// checked, so deleting it is safe (and a no-op if absent).
			vc.overlay = &domain.VolumeRef{Pool: spec.Disk.Pool, Volume: spec.Disk.Volume}
		}
		if err != nil {
			return nil, vc.fail(ctx, StepOverlay, err)
		}
		vc.overlay = &domain.VolumeRef{Pool: vol.Pool, Volume: vol.Name}
		spec.Owner.Volumes = []domain.VolumeRef{*vc.overlay}
	}
	if p.Base == nil && spec.Disk != nil && p.SizeBytes > 0 && spec.Disk.Volume != "" {
		if err := growVolume(steady, h, domain.VolumeRef{Pool: spec.Disk.Pool, Volume: spec.Disk.Volume}, p.SizeBytes); err != nil {
			return nil, vc.fail(ctx, StepGrowDisk, err)
		}
	}
	for _, d := range p.NewDisks {
		if err := expired(); err != nil {
			return nil, vc.fail(ctx, StepDataDisks, err)
		}
		err := makeDataVolume(steady, h, d)
		if err == nil || outcomeUnknown(err) {
			vc.volumes = append(vc.volumes, d.Volume)
		}
		if err != nil {
			return nil, vc.fail(ctx, StepDataDisks, err)
		}
		if !d.Keep {
			spec.Owner.Volumes = append(spec.Owner.Volumes, d.Volume)
		}
	}

	// 3. Define.
	xml, err := domain.Marshal(spec)
	if err != nil {
		return nil, vc.fail(ctx, StepXML, err)
	}
	if err := expired(); err != nil {
		return nil, vc.fail(ctx, StepDefine, err)
	}
	if p.BeforeDefine != nil {
		if err := p.BeforeDefine(steady); err != nil {
			return nil, vc.fail(ctx, StepDefine, err)
		}
	}
	ref, err := h.DefineDomain(steady, spec.Name, xml)
	if err != nil {
		vc.maybeDefined = outcomeUnknown(err)
		return nil, vc.fail(ctx, StepDefine, err)
	}
	vc.defined = &ref

	// 4. Autostart.
	if p.Autostart {
		if err := expired(); err != nil {
			return nil, vc.fail(ctx, StepAutostart, err)
		}
		if err := h.SetAutostart(steady, ref, true); err != nil {
			return nil, vc.fail(ctx, StepAutostart, err)
		}
	}

	// 5. Start, and 6. wait, bounded by ctx, which carries the create timeout.
	if p.Running {
		if err := expired(); err != nil {
			return nil, vc.fail(ctx, StepStart, err)
		}
		if err := h.StartDomain(steady, ref); err != nil {
			return nil, vc.fail(ctx, StepStart, err)
		}
		if p.Ready != nil {
			if err := p.Ready(ctx); err != nil {
				if !p.KeepOnReadyFailure {
					return nil, vc.fail(ctx, StepReady, err)
				}
				e := &CreateError{Step: StepReady, Err: err, Made: true, Kept: true, Defined: vc.defined, Overlay: vc.overlay}
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), storyReadTimeout)
				view, rerr := Read(rctx, h, ref, nil, false)
				rcancel()
				if rerr == nil {
					e.View = view
				}
				return nil, e
			}
		}
	}

	// 7. Read back what libvirt made of it.
	view, err := Read(steady, h, ref, nil, false)
	if err != nil {
		return nil, vc.fail(ctx, StepReadBack, err)
	}
	if p.Running && !view.Status.Active {
		return nil, vc.fail(ctx, StepStart, stoppedAtOnce(view))
	}
	return view, nil
}

func stoppedAtOnce(v *View) error {
	return fmt.Errorf("the domain stopped right after it started (libvirt state %d); the guest's serial console is logged to %s", v.Status.State, v.Observed.Spec.SerialLogPath)
}

// bounded keeps ctx's deadline (the operation's timeout) but not its
// cancellation: a call that makes something is not abandoned halfway when
// Terraform is interrupted, yet no call outlives the timeout (a hung call
// would otherwise overrun it by up to the host's call timeout).
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	steady := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(steady, dl)
	}
	return context.WithCancel(steady)
}

// outcomeUnknown says a call that makes something may or may not have
// made it: the connection was lost, or the timeout ended the wait for its
// answer.
func outcomeUnknown(err error) bool {
	var lost *hostconn.ConnectionError
	return errors.As(err, &lost) || errors.Is(err, context.DeadlineExceeded)
}

// storyReadTimeout bounds the read that tells what a failed guest showed.
const storyReadTimeout = 10 * time.Second
