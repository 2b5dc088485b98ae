package gpubind

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Machine is what a GPU binding's life needs of its host: the node-device
// calls that move functions, and the host's files and shell for the checks
// around them. *virt.Client is one.
type Machine interface {
	Host
	HostShell
	ReadHostFile(ctx context.Context, path string, limit int64) ([]byte, error)
}

// NVIDIAVersionFile is where the loaded NVIDIA kernel module reports its
// version.
const NVIDIAVersionFile = "/sys/module/nvidia/version"

// Request is a binding to make (create) or make again (update) on a host.
type Request struct {
	Target  vfio.Address
	Options vfio.Options
	// Rebind makes the binding again over one that exists: functions
	// already on vfio-pci stay, and Known gives each function's driver
	// from before Kohaku bound it.
	Rebind bool
	Known  map[string]string
	// ReadNVIDIAVersion reads the host's NVIDIA driver version while the
	// host driver still holds the card.
	ReadNVIDIAVersion bool
}

// Result is what a bind did and read, also when it failed part way.
type Result struct {
	Inventory *vfio.Inventory
	Plan      *vfio.Plan
	Bound     []Bound
	// NVIDIAChecked says the driver version was looked for; NVIDIAVersion
	// is nil where the card is not NVIDIA's, no NVIDIA module is loaded,
	// or it could not be read (NVIDIAVersionErr says why).
	NVIDIAChecked    bool
	NVIDIAVersion    *string
	NVIDIAVersionErr error
	// HoldersErr is a look for processes holding the functions that
	// failed: the bind went ahead without it.
	HoldersErr error
}

// InventoryError is a failure to read the host's PCI devices.
type InventoryError struct{ Err error }

func (e *InventoryError) Error() string { return e.Err.Error() }
func (e *InventoryError) Unwrap() error { return e.Err }

// PlanError is the planner's refusal of a binding (vfio's typed errors).
type PlanError struct{ Err error }

func (e *PlanError) Error() string { return e.Err.Error() }
func (e *PlanError) Unwrap() error { return e.Err }

// InUseError is a running domain that passes a function through (or a
// failure to read which do: a *UsersError inside).
type InUseError struct{ Err error }

func (e *InUseError) Error() string { return e.Err.Error() }
func (e *InUseError) Unwrap() error { return e.Err }

// Plan reads the host's PCI devices and plans the binding of target: what
// plan time, create and update each check against the host.
func (b Binder) Plan(ctx context.Context, target vfio.Address, opts vfio.Options) (*vfio.Inventory, *vfio.Plan, error) {
	inv, err := b.Inventory(ctx)
	if err != nil {
		return nil, nil, &InventoryError{Err: err}
	}
	p, err := vfio.PlanBinding(inv, target, opts)
	if err != nil {
		return inv, nil, &PlanError{Err: err}
	}
	return inv, p, nil
}

// Apply plans the binding against the host, checks that nothing uses the
// functions that are to move (running domains, then host processes where
// the connection can read them), reads the NVIDIA driver version when
// asked, and binds. Before the bind, a failure is an *InventoryError,
// *PlanError, *InUseError or *HoldersError and nothing has moved; the
// bind's own failure is a *BindError.
func Apply(ctx context.Context, b Binder, m Machine, req Request) (*Result, error) {
	inv, p, err := b.Plan(ctx, req.Target, req.Options)
	if err != nil {
		return nil, err
	}
	res := &Result{Inventory: inv, Plan: p}
	if !req.Rebind || NeedsBinding(p.Bind) {
		if err := b.CheckNotInUse(ctx, p.Addresses()); err != nil {
			return res, &InUseError{Err: err}
		}
		if src := HostHolders(m); src == nil {
			b.debug("the host's processes cannot be read over this connection; not looking for holders")
		} else if err := CheckHolders(ctx, src, p.Bind); err != nil {
			var held *HoldersError
			if errors.As(err, &held) {
				return res, err
			}
			res.HoldersErr = err
		}
		if req.ReadNVIDIAVersion {
			res.NVIDIAChecked = true
			res.NVIDIAVersion, res.NVIDIAVersionErr = NVIDIAVersion(ctx, m, inv.Lookup(req.Target))
		}
	}
	if req.Rebind {
		res.Bound, err = b.Rebind(ctx, p.Bind, req.Known)
	} else {
		res.Bound, err = b.Bind(ctx, p.Bind)
	}
	return res, err
}

// NVIDIAVersion reads the host's NVIDIA driver version for an NVIDIA card
// (vendor 10de, or a function the nvidia module drives, whoever made it):
// nil with no error where there is none to read.
func NVIDIAVersion(ctx context.Context, m Machine, dev *vfio.Device) (*string, error) {
	if !dev.IsNVIDIA() {
		return nil, nil
	}
	b, err := m.ReadHostFile(ctx, NVIDIAVersionFile, 256)
	switch {
	case err == nil:
		v := strings.TrimSpace(string(b))
		return &v, nil
	case errors.Is(err, os.ErrNotExist):
		return nil, nil // no NVIDIA module loaded on the host
	}
	return nil, err
}
