package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// View is a domain as Read sees it.
type View struct {
	Status   *hostapi.DomainStatus
	Observed domain.Observed
	// Overlay is the boot disk volume this resource created, if any.
	Overlay *domain.VolumeRef
	// Owned is every volume this resource created (the overlay, and any the
	// domain's metadata records).
	Owned []domain.VolumeRef
	// Base and SizeGiB describe the overlay's backing image; they are only
	// looked up on import, when the state cannot tell.
	Base    *domain.VolumeRef
	SizeGiB int64
	// DiskVolume is the pool and volume of a boot disk the domain names by
	// file path (as virt-install and virsh define do), looked up by that
	// path; nil when the disk names a volume, or when no pool holds it
	// (DiskOutsidePools then names the path).
	DiskVolume       *domain.VolumeRef
	DiskOutsidePools string
	// GPUGroups is what create or update recorded: the functions passed
	// through for each gpus entry. Read attributes them to the entry with
	// it, without asking libvirt.
	GPUGroups GPUGroups
}

// Read is a read's whole conversation with libvirt: ReadDomain's three calls
// on refresh, plus a few lookups of the overlay's base image on import.
// overlay is the overlay volume the prior state records, if any; importing
// says the state cannot tell the base image.
func Read(ctx context.Context, h Host, ref hostapi.DomainRef, overlay *domain.VolumeRef, importing bool) (*View, error) {
	st, err := h.ReadDomain(ctx, ref)
	if err != nil {
		return nil, err
	}
	obs, err := domain.Parse(st.XML)
	if err != nil {
		return nil, err
	}
	v := &View{Status: st, Observed: obs}
	if obs.Metadata != nil {
		v.Owned = append(v.Owned, obs.Metadata.Owner.Volumes...)
	}
	if err := v.diskVolume(ctx, h); err != nil {
		return nil, err
	}
	if overlay != nil && !ContainsVolume(v.Owned, *overlay) {
		v.Owned = append(v.Owned, *overlay)
	}
	if d := obs.Spec.Disk; d != nil {
		for _, o := range v.Owned {
			if o.Pool == d.Pool && o.Volume == d.Volume {
				v.Overlay = &o
				break
			}
		}
	}
	if v.Overlay == nil {
		// Not a data disk's volume, which the metadata records too, nor
		// the seed's copy a move brought along.
		for _, o := range v.Owned {
			seed := obs.Spec.Seed != nil && obs.Spec.Seed.Pool == o.Pool && obs.Spec.Seed.Volume == o.Volume
			if !seed && !slices.ContainsFunc(obs.Spec.DataDisks, func(d domain.DataDisk) bool { return d.Pool == o.Pool && d.Volume == o.Volume }) {
				v.Overlay = &o
				break
			}
		}
	}
	if importing && v.Overlay != nil {
		ov, err := h.VolumeInfo(ctx, v.Overlay.Pool, v.Overlay.Volume)
		if err != nil {
			return nil, fmt.Errorf("the domain's overlay volume: %w", err)
		}
		if ov.BackingPath != "" {
			pool, name, err := h.VolumeByPath(ctx, ov.BackingPath)
			if err != nil {
				return nil, fmt.Errorf("the backing image %s of overlay %s/%s: %w", ov.BackingPath, ov.Pool, ov.Name, err)
			}
			v.Base = &domain.VolumeRef{Pool: pool, Volume: name}
			base, err := h.VolumeInfo(ctx, pool, name)
			if err != nil {
				return nil, err
			}
			if ov.CapacityBytes > base.CapacityBytes && ov.CapacityBytes%(1<<30) == 0 {
				v.SizeGiB = ov.CapacityBytes >> 30
			}
		}
	}
	return v, nil
}

// diskVolume looks up the volume of a boot disk given by path: Kohaku
// names disks by pool and volume, and libvirt finds the volume of a path
// in whichever pool holds it. A domain Kohaku made costs no call.
func (v *View) diskVolume(ctx context.Context, h Host) error {
	d := v.Observed.Spec.Disk
	if d == nil || d.Path == "" {
		return nil
	}
	pool, name, err := h.VolumeByPath(ctx, d.Path)
	switch {
	case errors.Is(err, hostapi.ErrNotFound):
		v.DiskOutsidePools = d.Path
		return nil
	case err != nil:
		return fmt.Errorf("the volume of the boot disk %s: %w", d.Path, err)
	}
	v.DiskVolume = &domain.VolumeRef{Pool: pool, Volume: name}
	return nil
}

// ContainsVolume reports whether list holds v.
func ContainsVolume(list []domain.VolumeRef, v domain.VolumeRef) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
