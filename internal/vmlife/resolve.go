package vmlife

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// Steps of Resolve, as StepError names them.
const (
	StepShares = "check shared folders"
	StepGPUs   = "read the GPUs' IOMMU groups"
)

// Want is a VM as configured, before the host is asked.
type Want struct {
	Spec domain.Spec
	// GPUs are gpus entries (kohaku_gpu_binding ids); each brings the
	// functions of its IOMMU group that are on vfio-pci.
	GPUs []string
	// DiskMode is "base_volume", "volume" or "" (no disk).
	DiskMode string
	// InspectSeed reads the seed even when every NIC has a MAC: create
	// needs the seed's report token and phone-home URL to wait.
	InspectSeed bool
	// NUMAPlacement is PlacementAuto ("" means auto) or PlacementNone.
	NUMAPlacement string
	// Nodes are the host NUMA nodes placement chose for a NUMA-local VM
	// without GPUs, bound as a GPU VM is bound to its GPUs' nodes (Place);
	// ignored when GPUs is set.
	Nodes []int
	// KeepPins keeps the domain's one-to-one vCPU pins (a placement's
	// pin_cpus, made at create) through an update.
	KeepPins bool
}

// Resolved is a spec completed against the host.
type Resolved struct {
	Spec   domain.Spec
	Groups GPUGroups
	// Seed is what the seed volume holds, when it was read.
	Seed *seed.Inspection
	// Warnings are notes for the user (GPU group members off vfio-pci).
	Warnings []string
}

// ShareError is a shared folder whose source cannot be exported.
type ShareError struct {
	Index int
	Err   error
}

func (e *ShareError) Error() string { return e.Err.Error() }
func (e *ShareError) Unwrap() error { return e.Err }

// Resolve completes w against the host in the one order create and update
// share: shared folders are checked (on a local host), gpus entries become
// the hostdevs of their groups, NICs without a MAC take the seed's, and an
// existing boot volume's format is looked up. groups, when not nil, are the
// gpus entries' groups read already; creating also looks the seed volume up
// by itself first. Nothing on the host is changed. The Resolved is never nil:
// its Warnings hold even when an error is returned.
func Resolve(ctx context.Context, h Host, w Want, groups GPUGroups, creating bool) (*Resolved, error) {
	r := &Resolved{Spec: w.Spec}
	if i, err := checkShareSources(h, r.Spec.SharedFolders); err != nil {
		return r, stepErr(StepShares, &ShareError{Index: i, Err: err})
	}
	if groups == nil {
		var err error
		groups, r.Warnings, err = ExpandGPUs(ctx, w.GPUs, HostPCIReader(h))
		if err != nil {
			return r, stepErr(StepGPUs, err)
		}
	}
	r.Groups = groups
	r.Spec.Hostdevs = groups.Hostdevs(r.Spec.Hostdevs)
	if err := Place(ctx, h, &r.Spec, w.NUMAPlacement, w.GPUs, w.Nodes, creating); err != nil {
		return r, stepErr(StepPlace, err)
	}
	if s := r.Spec.Seed; s != nil {
		if creating {
			if _, err := h.VolumeInfo(ctx, s.Pool, s.Volume); err != nil {
				return r, stepErr("look up the seed", fmt.Errorf("seed_id %s/%s: %w", s.Pool, s.Volume, err))
			}
		}
		if needsSeedMACs(&r.Spec) || w.InspectSeed {
			in, err := InspectSeed(ctx, h, s.Pool, s.Volume)
			if err != nil {
				hint := "Set mac on every network_interface to skip reading the seed"
				if creating {
					hint = "Set mac on every network_interface and wait_for = \"none\" or \"guest_agent\" to skip reading the seed"
				}
				return r, stepErr("read the seed", fmt.Errorf("%w. %s", err, hint))
			}
			r.Seed = in
			applySeedMACs(&r.Spec, in.MACs)
		}
	}
	if w.DiskMode == "volume" && r.Spec.Disk != nil {
		vol, err := h.VolumeInfo(ctx, r.Spec.Disk.Pool, r.Spec.Disk.Volume)
		if err == nil {
			r.Spec.Disk.Format, err = diskFormat(vol)
		}
		if err != nil {
			return r, stepErr("look up the disk volume", err)
		}
	}
	return r, nil
}

// InspectSeed reads a seed volume back (at most seed.MaxVolumeBytes, the
// most a kohaku_seed stores): its MACs, report token and phone-home URL.
func InspectSeed(ctx context.Context, h Host, pool, volume string) (*seed.Inspection, error) {
	iso, err := h.DownloadVolume(ctx, pool, volume, seed.MaxVolumeBytes)
	if err != nil {
		return nil, fmt.Errorf("reading seed %s/%s: %w", pool, volume, err)
	}
	in, err := seed.Inspect(iso)
	if err != nil {
		return nil, fmt.Errorf("seed %s/%s: %w", pool, volume, err)
	}
	return in, nil
}

// needsSeedMACs reports whether some NIC has no MAC, i.e. whether reading the
// seed can change anything.
func needsSeedMACs(spec *domain.Spec) bool {
	for _, n := range spec.NICs {
		if n.MAC == "" {
			return true
		}
	}
	return false
}

// applySeedMACs gives NIC i the seed's i-th MAC when the NIC has none.
func applySeedMACs(spec *domain.Spec, macs []string) {
	for i := range spec.NICs {
		if spec.NICs[i].MAC == "" && i < len(macs) {
			spec.NICs[i].MAC = macs[i]
		}
	}
}

func diskFormat(v *hostapi.VolumeDetail) (domain.DiskFormat, error) {
	switch v.Format {
	case "qcow2", "":
		if v.Format == "" {
			return domain.DiskRaw, nil
		}
		return domain.DiskQCOW2, nil
	case "raw", "iso":
		return domain.DiskRaw, nil
	}
	return "", fmt.Errorf("volume %s/%s is in %s format; Kohaku boots qcow2 or raw volumes", v.Pool, v.Name, v.Format)
}

// checkShareSources checks that shared folders exist when the host is this
// machine (unix transport); remote hosts check when the VM starts. It
// returns the index of the folder at fault.
func checkShareSources(h Host, shares []domain.SharedFolder) (int, error) {
	if h.Endpoint().Transport != hostconn.TransportUnix {
		return 0, nil
	}
	for i, sf := range shares {
		fi, err := os.Stat(sf.Source)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return i, fmt.Errorf("shared_folder[%d].source: %s does not exist on this host. Create the "+
				"directory first (mkdir -p %s), for example with a local_file or null_resource the VM depends on", i, sf.Source, sf.Source)
		case err != nil:
			return i, fmt.Errorf("shared_folder[%d].source: %v", i, err)
		case !fi.IsDir():
			return i, fmt.Errorf("shared_folder[%d].source: %s is not a directory; a shared folder exports a directory", i, sf.Source)
		}
	}
	return 0, nil
}
