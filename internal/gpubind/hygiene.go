package gpubind

import (
	"context"
	"fmt"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// GroupResetter resets the IOMMU group of a GPU a destroyed VM gave back
// (vmlife.GPUResetter), with Reset, then runs the operator's health check
// when there is one. Progress, when set, hears each line.
type GroupResetter struct {
	Host     ResetHost
	Progress func(string)
	Health   HealthCheck
}

// HealthCheck is the operator's check that a GPU is fit for its next
// tenant, run on its host after its reset: nil error returns it to
// placement, an error (a *HealthError) keeps it back.
type HealthCheck func(ctx context.Context, gpu vfio.Address) error

// HealthRunner runs the operator's health check command on a host;
// *virt.Client is one (local and SSH connections).
type HealthRunner interface {
	RunHealthCheck(ctx context.Context, command, gpu string, timeout time.Duration) error
}

// CommandCheck is the HealthCheck that runs command on h with the GPU's
// address, bounded by timeout; nil when command is empty (no check).
func CommandCheck(h HealthRunner, command string, timeout time.Duration) HealthCheck {
	if command == "" {
		return nil
	}
	return func(ctx context.Context, gpu vfio.Address) error {
		return h.RunHealthCheck(ctx, command, gpu.String(), timeout)
	}
}

// HealthError is a GPU the operator's health check failed.
type HealthError struct {
	GPU vfio.Address
	Err error
}

func (e *HealthError) Error() string {
	return fmt.Sprintf("the operator's health check failed for %s after its reset: %v", e.GPU, e.Err)
}
func (e *HealthError) Unwrap() error { return e.Err }

// ResetGPU resets gpu's group (see Reset for what it refuses), then runs
// the health check; either failing is an error.
func (r GroupResetter) ResetGPU(ctx context.Context, gpu vfio.Address) error {
	if _, err := Reset(ctx, r.Host, gpu, r.Progress); err != nil {
		return fmt.Errorf("resetting %s: %w", gpu, err)
	}
	return r.Health.check(ctx, gpu)
}

func (h HealthCheck) check(ctx context.Context, gpu vfio.Address) error {
	if h == nil {
		return nil
	}
	if err := h(ctx, gpu); err != nil {
		return &HealthError{GPU: gpu, Err: err}
	}
	return nil
}

// Quarantines clears devices' quarantine markers; *claim.Claimer is one.
type Quarantines interface {
	ClearQuarantine(ctx context.Context, dev vfio.Address) (bool, error)
}

// ResetAndReturn is how an operator returns a quarantined GPU: it resets
// target's group (Reset), runs the health check (nil: none) and, when both
// succeeded, clears the quarantine of every function of the group (a
// marker names the GPU's lead function, and target may be any of them).
// It returns the functions reset and the quarantines cleared; a failed
// reset or check clears nothing.
func ResetAndReturn(ctx context.Context, h ResetHost, q Quarantines, target vfio.Address, health HealthCheck, progress func(string)) (done, cleared []vfio.Address, err error) {
	if progress == nil {
		progress = func(string) {}
	}
	group, done, err := reset(ctx, h, target, progress)
	if err != nil {
		return done, nil, err
	}
	if err := health.check(ctx, target); err != nil {
		return done, nil, err
	}
	if health != nil {
		progress(fmt.Sprintf("The operator's health check passed for %s", target))
	}
	for _, a := range group {
		ok, err := q.ClearQuarantine(ctx, a)
		if err != nil {
			return done, cleared, fmt.Errorf("the reset succeeded, but returning %s to placement failed: %w", a, err)
		}
		if ok {
			cleared = append(cleared, a)
			progress(fmt.Sprintf("Cleared the quarantine of %s: placement may hand it out again", a))
		}
	}
	return done, cleared, nil
}
