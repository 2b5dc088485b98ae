package sriov

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Writer writes a number to one of a host's SR-IOV sysfs files; the host
// connection is one (local and SSH connections; tcp and tls cannot).
type Writer interface {
	WriteHostFile(ctx context.Context, path, value string) error
}

// VendorTool is a host that can run NVIDIA's sriov-manage, which NVIDIA
// documents as the way to enable and disable its GPUs' VFs (a host
// without it answers with an error wrapping os.ErrNotExist).
type VendorTool interface {
	RunSRIOVManage(ctx context.Context, enable bool, pf string) error
}

// viaVendorTool runs sriov-manage where the PF is on NVIDIA's driver and
// the host has the script: done reports whether it ran (and err its
// result); false means write sriov_numvfs instead.
func viaVendorTool(ctx context.Context, w Writer, g *GPU, enable bool) (done bool, err error) {
	vt, ok := w.(VendorTool)
	if !ok || g.Driver != vfio.DriverNVIDIA {
		return false, nil
	}
	err = vt.RunSRIOVManage(ctx, enable, g.Address.String())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return true, err
}

// Enable gives pf n virtual functions. On a GPU driven by NVIDIA's driver
// whose host has NVIDIA's sriov-manage, and n all it can have, that
// script does it (NVIDIA documents no other way); otherwise sriov_numvfs
// is written. The kernel takes a new count only from 0, so a PF that has
// another count now is refused (Disable it first); one that has n
// already is left alone.
func Enable(ctx context.Context, w Writer, g *GPU, n int) error {
	switch {
	case n < 1 || (g.MaxVFs > 0 && n > g.MaxVFs):
		return fmt.Errorf("%s can have 1 to %d virtual functions, not %d", g.Address, g.MaxVFs, n)
	case g.NumVFs == n:
		return nil
	case g.NumVFs != 0:
		return fmt.Errorf("%s has %d virtual functions enabled, not %d: the kernel changes the count only from 0 (disable them first)", g.Address, g.NumVFs, n)
	}
	if n == g.MaxVFs {
		if done, err := viaVendorTool(ctx, w, g, true); done {
			return err
		}
	}
	if err := w.WriteHostFile(ctx, NumVFsPath(g.Address), strconv.Itoa(n)); err != nil {
		return fmt.Errorf("enabling %d virtual functions on %s: %w", n, g.Address, explainWrite(err))
	}
	return nil
}

// InUseError is a PF whose VFs cannot be disabled: types are set on some.
type InUseError struct {
	GPU vfio.Address
	VFs []vfio.Address
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("the virtual functions of %s cannot be disabled: %s still have a vGPU type set (destroy their kohaku_vgpu first)", e.GPU, vfio.JoinAddresses(e.VFs))
}

// Disable removes pf's virtual functions (sriov_numvfs = 0), refusing
// while any VF has a vGPU type set: that VF is someone's vGPU.
func Disable(ctx context.Context, w Writer, g *GPU) error {
	var busy []vfio.Address
	for _, vf := range g.VFs {
		if vf.Current != 0 {
			busy = append(busy, vf.Address)
		}
	}
	if len(busy) > 0 {
		return &InUseError{GPU: g.Address, VFs: busy}
	}
	if g.NumVFs == 0 {
		return nil
	}
	if done, err := viaVendorTool(ctx, w, g, false); done {
		return err
	}
	if err := w.WriteHostFile(ctx, NumVFsPath(g.Address), "0"); err != nil {
		return fmt.Errorf("disabling the virtual functions of %s: %w", g.Address, explainWrite(err))
	}
	return nil
}

// SetType sets t on vf. A VF that already has a type (another apply set
// one first) comes back as an error wrapping syscall.EBUSY; a type the
// driver does not take now, wrapping syscall.EINVAL.
func SetType(ctx context.Context, w Writer, vf vfio.Address, t Type) error {
	if err := w.WriteHostFile(ctx, CurrentPath(vf), strconv.Itoa(t.ID)); err != nil {
		return fmt.Errorf("setting vGPU type %s on %s: %w", typeLabel(t), vf, explainWrite(err))
	}
	return nil
}

// ClearType clears vf's vGPU type (0), which gives its share of the GPU
// back. A VF that is gone (its VFs disabled) has nothing to clear.
func ClearType(ctx context.Context, w Writer, vf vfio.Address) error {
	err := w.WriteHostFile(ctx, CurrentPath(vf), "0")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clearing the vGPU type of %s: %w", vf, explainWrite(err))
	}
	return nil
}

// explainWrite adds what the kernel's answer means to a failed write.
func explainWrite(err error) error {
	switch {
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("%w (busy: a type is set already, or the device is in use)", err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("%w (the driver does not take that value now: the type is not creatable on it, or the count is out of range)", err)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w (no such file: the device is gone, or its driver offers no vGPU files)", err)
	}
	return err
}
