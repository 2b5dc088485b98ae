package gpubind

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Placed binds the GPUs placement chose for a VM, as a kohaku_gpu_binding
// of the whole group would (Apply: the same holders check, the same bind
// and rollback), and gives back at the VM's end what it moved. A VM that
// asks for GPUs has no binding resource of its own: this is its binding.
type Placed struct {
	Binder  Binder
	Machine Machine
	// Options are the binding plan's (AllowOtherClasses for an SR-IOV
	// VF alone in its group, whatever class its PF's card has).
	Options vfio.Options
}

// BindGPU moves gpu's IOMMU group to vfio-pci. It returns every function
// of the group now on vfio-pci (what the VM passes through) and those this
// call moved there (what GiveBackGPU is to give back: functions that were
// on vfio-pci before stay there). A failure has moved nothing, or gave
// back what it moved; a rollback that could not says so and which
// functions it left.
func (p Placed) BindGPU(ctx context.Context, gpu vfio.Address) (all, moved []vfio.Address, err error) {
	res, err := Apply(ctx, p.Binder, p.Machine, Request{Target: gpu, Options: p.Options})
	if err != nil {
		var be *BindError
		if errors.As(err, &be) && len(be.Left) > 0 {
			for _, b := range be.Left {
				moved = append(moved, b.Address)
			}
			return nil, moved, fmt.Errorf("binding %s to vfio-pci: %w", gpu, err)
		}
		return nil, nil, fmt.Errorf("binding %s to vfio-pci: %w", gpu, err)
	}
	for _, b := range res.Plan.Bind {
		all = append(all, b.Address)
		if !b.AlreadyBound {
			moved = append(moved, b.Address)
		}
	}
	return all, moved, nil
}

// GiveBackGPU gives fns back to the host, last first (Release), once no
// running domain uses them.
func (p Placed) GiveBackGPU(ctx context.Context, fns []vfio.Address) error {
	if len(fns) == 0 {
		return nil
	}
	if err := p.Binder.CheckNotInUse(ctx, fns); err != nil {
		return fmt.Errorf("giving %s back to the host: %w", vfio.JoinAddresses(fns), err)
	}
	notes, failed := p.Binder.Release(ctx, fns, nil)
	for _, n := range notes {
		p.Binder.log("giving back a placed GPU", map[string]any{"note": n})
	}
	if len(failed) > 0 {
		return fmt.Errorf("giving back to the host: still on vfio-pci: %s (give each back by hand with virsh nodedev-reattach pci_DDDD_BB_SS_F)", strings.Join(failed, "; "))
	}
	return nil
}
