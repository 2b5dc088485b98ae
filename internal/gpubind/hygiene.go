package gpubind

import (
	"context"
	"fmt"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// GroupResetter resets the IOMMU group of a GPU a destroyed VM gave back
// (vmlife.GPUResetter), with Reset. Progress, when set, hears each line.
type GroupResetter struct {
	Host     ResetHost
	Progress func(string)
}

// ResetGPU resets gpu's group; see Reset for what it refuses.
func (r GroupResetter) ResetGPU(ctx context.Context, gpu vfio.Address) error {
	if _, err := Reset(ctx, r.Host, gpu, r.Progress); err != nil {
		return fmt.Errorf("resetting %s: %w", gpu, err)
	}
	return nil
}

// Quarantines clears devices' quarantine markers; *claim.Claimer is one.
type Quarantines interface {
	ClearQuarantine(ctx context.Context, dev vfio.Address) (bool, error)
}

// ResetAndReturn is how an operator returns a quarantined GPU: it resets
// target's group (Reset) and, when the reset succeeded, clears the
// quarantine of every function of the group (a marker names the GPU's
// lead function, and target may be any of them). It returns the
// functions reset and the quarantines cleared; a failed reset clears
// nothing.
func ResetAndReturn(ctx context.Context, h ResetHost, q Quarantines, target vfio.Address, progress func(string)) (done, cleared []vfio.Address, err error) {
	if progress == nil {
		progress = func(string) {}
	}
	group, done, err := reset(ctx, h, target, progress)
	if err != nil {
		return done, nil, err
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
