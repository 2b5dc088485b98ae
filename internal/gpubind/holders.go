package gpubind

import (
	"context"
	"fmt"

	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// HolderSource reads what can hold a host's functions: its processes' open
// device files, and NVIDIA's description of the GPUs its driver drives.
type HolderSource interface {
	OpenFiles(ctx context.Context) ([]holders.Open, error)
	vfio.HostFiles
}

// HostShell is a host connection that can read the host's files and run a
// script there. *virt.Client is one.
type HostShell interface {
	Endpoint() hostconn.Endpoint
	ReadsHostFiles() bool
	RunHostScript(ctx context.Context, script string, limit int64) ([]byte, error)
	vfio.HostFiles
}

// clientHolders reads a host's processes through its libvirt connection.
type clientHolders struct{ HostShell }

// OpenFiles scans /proc directly on a local connection, and runs
// holders.Script in an SSH session on a qemu+ssh host.
func (c clientHolders) OpenFiles(ctx context.Context) ([]holders.Open, error) {
	if c.Endpoint().Transport == hostconn.TransportUnix {
		return holders.ScanProc("/proc", "/sys")
	}
	out, err := c.RunHostScript(ctx, holders.Script, 1<<20)
	if err != nil {
		return nil, err
	}
	return holders.ParseScript(out), nil
}

// HostHolders is the holder source of a host's connection; nil where the
// connection cannot read the host (tcp, tls).
func HostHolders(c HostShell) HolderSource {
	if c == nil || !c.ReadsHostFiles() {
		return nil
	}
	return clientHolders{c}
}

// HoldersError is functions of a plan that processes on the host hold.
type HoldersError struct{ Holders []holders.Holder }

func (e *HoldersError) Error() string {
	return "processes on the host hold functions to be unbound:\n" + holders.Describe(e.Holders)
}

// CheckHolders refuses, with a *HoldersError, when a process on the host
// holds a function of the plan that is to leave its driver (those already
// on vfio-pci are left alone). A failure to look is returned as it is.
func CheckHolders(ctx context.Context, src HolderSource, plan []vfio.Binding) error {
	var fns []holders.Function
	for _, b := range plan {
		if b.AlreadyBound || b.Driver == "" {
			continue
		}
		fns = append(fns, holders.Function{Address: b.Address, Driver: b.Driver, NVIDIAMinor: -1})
	}
	hs, err := Holding(ctx, src, fns)
	if err != nil {
		return err
	}
	if len(hs) > 0 {
		return &HoldersError{Holders: hs}
	}
	return nil
}

// Holding returns the processes on the host that hold any of fns (each
// with the driver it is on now), sorted by function, then PID. It reads
// NVIDIA's device minor of the functions on NVIDIA's driver first, so a
// process with one GPU's /dev/nvidiaN open holds that GPU alone; an
// NVIDIAMinor already set is kept.
func Holding(ctx context.Context, src HolderSource, fns []holders.Function) ([]holders.Holder, error) {
	if len(fns) == 0 {
		return nil, nil
	}
	fns = append([]holders.Function(nil), fns...)
	var infos []string
	for _, fn := range fns {
		if fn.Driver == vfio.DriverNVIDIA && fn.NVIDIAMinor < 0 {
			infos = append(infos, holders.NVIDIAInfoPath(fn.Address))
		}
	}
	if len(infos) > 0 {
		files, err := src.ReadHostFiles(ctx, infos, 4096)
		if err != nil {
			return nil, fmt.Errorf("reading NVIDIA's GPU information: %w", err)
		}
		for i := range fns {
			if info, ok := files[holders.NVIDIAInfoPath(fns[i].Address)]; ok && fns[i].NVIDIAMinor < 0 {
				fns[i].NVIDIAMinor = holders.ParseNVIDIAMinor(info)
			}
		}
	}
	opens, err := src.OpenFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the host's open device files: %w", err)
	}
	return holders.Find(opens, fns), nil
}
