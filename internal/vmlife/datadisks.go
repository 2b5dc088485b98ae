package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// NewDisk is a data disk whose volume Kohaku creates (when it is not there
// yet): empty, of SizeBytes, in Format, or, with From, a standalone qcow2
// copy of the volume From on the same host (a backup restored), made by
// the host itself; From is only read, and the copy is the VM's, never From.
// Destroy deletes it with the VM unless Keep; removing it from the VM
// deletes it likewise.
type NewDisk struct {
	Serial    string
	Volume    domain.VolumeRef
	Format    domain.DiskFormat
	SizeBytes int64
	Keep      bool
	From      *domain.VolumeRef
}

// makeDataVolume makes the volume of a new data disk: empty, or a copy of
// From.
func makeDataVolume(ctx context.Context, h Host, d NewDisk) error {
	if d.From != nil {
		_, err := h.FlattenVolume(ctx, d.From.Pool, d.From.Volume, d.Volume.Pool, d.Volume.Volume)
		if err != nil {
			return fmt.Errorf("copying %s/%s into the new data disk %s/%s: %w", d.From.Pool, d.From.Volume, d.Volume.Pool, d.Volume.Volume, err)
		}
		return nil
	}
	_, err := h.CreateVolume(ctx, d.Volume.Pool, d.Volume.Volume, string(d.Format), d.SizeBytes)
	return err
}

// The steps of an update's data disk changes.
const (
	StepAttach       = "attach a data disk"
	StepDetach       = "detach a data disk"
	StepDeleteVolume = "delete a removed data disk's volume"
)

// ownedVolumes are the volumes a VM's metadata records as Kohaku's to
// delete: the overlay, and the volumes of new data disks not kept.
func ownedVolumes(overlay *domain.VolumeRef, disks []NewDisk) []domain.VolumeRef {
	var out []domain.VolumeRef
	if overlay != nil {
		out = append(out, *overlay)
	}
	for _, d := range disks {
		if !d.Keep {
			out = append(out, d.Volume)
		}
	}
	return out
}

// diskDiff is what an update changes of the data disks: the planned ones
// the domain does not have (by serial), and the ones Kohaku attached that
// the plan no longer names.
type diskDiff struct {
	added, removed []domain.DataDisk
}

func dataDiskDiff(want []domain.DataDisk, obs domain.Observed) diskDiff {
	var d diskDiff
	has := func(list []domain.DataDisk, serial string) bool {
		return slices.ContainsFunc(list, func(x domain.DataDisk) bool { return x.Serial == serial })
	}
	for _, w := range want {
		if !has(obs.Spec.DataDisks, w.Serial) {
			d.added = append(d.added, w)
		}
	}
	var recorded []string
	if obs.Metadata != nil {
		recorded = obs.Metadata.DataDisks
	}
	for _, o := range obs.Spec.DataDisks {
		if !has(want, o.Serial) && slices.Contains(recorded, o.Serial) {
			d.removed = append(d.removed, o)
		}
	}
	return d
}

func (d diskDiff) empty() bool { return len(d.added) == 0 && len(d.removed) == 0 }

// createDataVolumes makes the volumes of the planned new data disks that do
// not exist yet, and returns those it made (also when it fails midway). One
// that exists is used as it is.
func createDataVolumes(ctx context.Context, h Host, disks []NewDisk) ([]domain.VolumeRef, error) {
	var made []domain.VolumeRef
	for _, d := range disks {
		_, err := h.VolumeInfo(ctx, d.Volume.Pool, d.Volume.Volume)
		if err == nil {
			continue
		}
		if !errors.Is(err, hostapi.ErrNotFound) {
			return made, err
		}
		if err := makeDataVolume(ctx, h, d); err != nil {
			var exists *hostapi.OverlayExistsError
			if !errors.As(err, &exists) {
				return made, err
			}
			continue
		}
		made = append(made, d.Volume)
	}
	return made, nil
}

// unattached are the volumes of made that no data disk of the domain's
// definition (as obs reads it) uses: those an update that failed made for
// nothing, and so deletes, since no state records them.
func unattached(made []domain.VolumeRef, obs domain.Observed) []domain.VolumeRef {
	var out []domain.VolumeRef
	for _, v := range made {
		if !slices.ContainsFunc(obs.Spec.DataDisks, func(d domain.DataDisk) bool { return d.Pool == v.Pool && d.Volume == v.Volume }) {
			out = append(out, v)
		}
	}
	return out
}

// hotplug attaches the added data disks to a running domain and detaches
// the removed ones, live and in its persistent definition, so nothing
// restarts.
func hotplug(ctx context.Context, h Host, ref hostapi.DomainRef, xml string, diff diskDiff) error {
	for _, d := range diff.removed {
		target, err := domain.DataDiskTarget(xml, d.Serial)
		if err != nil {
			return stepErr(StepDetach, err)
		}
		doc, err := domain.DataDiskXML(d, target)
		if err != nil {
			return stepErr(StepDetach, err)
		}
		if err := h.DetachDisk(ctx, ref, doc); err != nil {
			return stepErr(StepDetach, fmt.Errorf("disk %s (%s): %w", d.Serial, target, err))
		}
	}
	for _, d := range diff.added {
		// Read anew for each: the previous attach took a target.
		st, err := h.ReadDomain(ctx, ref)
		if err != nil {
			return stepErr(StepAttach, err)
		}
		target, err := domain.FreeDiskTarget(st.XML)
		if err != nil {
			return stepErr(StepAttach, err)
		}
		doc, err := domain.DataDiskXML(d, target)
		if err != nil {
			return stepErr(StepAttach, err)
		}
		if err := h.AttachDisk(ctx, ref, doc); err != nil {
			return stepErr(StepAttach, fmt.Errorf("disk %s (%s): %w", d.Serial, target, err))
		}
	}
	return nil
}

// removedVolumes are the volumes that were Kohaku's to delete (owned by
// the VM before the update) and are neither owned any longer nor used by a
// planned data disk: the volumes of removed, not kept, data disks.
func removedVolumes(before, after []domain.VolumeRef, want []domain.DataDisk) []domain.VolumeRef {
	var out []domain.VolumeRef
	for _, v := range before {
		used := slices.ContainsFunc(want, func(d domain.DataDisk) bool { return d.Pool == v.Pool && d.Volume == v.Volume })
		if !ContainsVolume(after, v) && !used {
			out = append(out, v)
		}
	}
	return out
}

// sameVolumes says whether a and b hold the same volumes, in any order.
func sameVolumes(a, b []domain.VolumeRef) bool {
	if len(a) != len(b) {
		return false
	}
	for _, v := range a {
		if !ContainsVolume(b, v) {
			return false
		}
	}
	return true
}
