package snapshot

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// Host is what snapshots and reverts need from a libvirt host.
// internal/hosts/libvirthost checks that *virt.Client is one.
type Host interface {
	vmlife.PowerHost
	ReadDomain(ctx context.Context, ref hostapi.DomainRef) (*hostapi.DomainStatus, error)
	VolumeInfo(ctx context.Context, pool, name string) (*hostapi.VolumeDetail, error)
	VolumeExists(ctx context.Context, pool, name string) (bool, error)
	FlattenVolume(ctx context.Context, srcPool, srcName, pool, name string) (*hostapi.VolumeDetail, error)
	HashVolume(ctx context.Context, pool, name string) (hostapi.ImageDigest, error)
	RemoveVolume(ctx context.Context, pool, name string) error
	ListVolumeNames(ctx context.Context, pool string) ([]string, error)
	// A running VM's disks are copied by libvirt's backup job, with the
	// guest's file systems frozen through its agent as the job begins.
	FreezeFilesystems(ctx context.Context, ref hostapi.DomainRef) (int, error)
	ThawFilesystems(ctx context.Context, ref hostapi.DomainRef) error
	BeginBackup(ctx context.Context, ref hostapi.DomainRef, targets []hostapi.BackupTarget) error
	WaitBackup(ctx context.Context, ref hostapi.DomainRef, targets []hostapi.BackupTarget, progress func(done, total uint64)) ([]*hostapi.VolumeDetail, error)
}

// ErrNotSnapshottable is wrapped by the errors of a VM with a disk Kohaku
// cannot snapshot: one it did not make (an existing volume, a kept data
// disk, a file or block device given by path, a disk added by hand), or no
// disk at all.
var ErrNotSnapshottable = errors.New("the VM's disks cannot be snapshotted")

// ErrOtherVM is wrapped by the error of a revert to a snapshot taken of
// another VM.
var ErrOtherVM = errors.New("the snapshot is of another VM")

// nameRE is what a snapshot's name may be: it becomes part of volume names.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// CheckName says what is wrong with a snapshot name, or nil.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q is not a snapshot name: use 1 to 63 letters, digits, '.', '_' and '-', starting with a letter or digit (it becomes part of volume names)", name)
	}
	return nil
}

// SnapVolume is the name of the volume that holds snapshot name's copy of
// the disk volume vol, in vol's pool.
func SnapVolume(vol, name string) string { return vol + ".snap-" + name }

// StagingVolume is the name of the volume a revert copies a snapshot of
// vol into before it replaces vol; its presence says a revert of vol has
// not finished.
func StagingVolume(vol string) string { return vol + ".kohaku-revert" }

// Disk is one disk of a VM that a snapshot copies.
type Disk struct {
	// Disk is "boot" for the boot disk, else the data disk's serial.
	Disk         string
	Pool, Volume string
}

// Target is a VM whose every disk Kohaku can snapshot.
type Target struct {
	VM    hostapi.DomainRef
	State string
	Disks []Disk
	// Agent is whether the domain has a guest agent channel.
	Agent bool
}

// Running reports whether the VM is not shut off.
func (t *Target) Running() bool { return t.State != "shut off" && t.State != "crashed" }

// Find reads the VM vm (name or UUID) and its disks. Every disk must be
// one the VM owns (Kohaku made it and deletes it with the VM); the others
// are refused together, named, with an error wrapping ErrNotSnapshottable.
func Find(ctx context.Context, h Host, vm string) (*Target, error) {
	ref, err := h.LookupDomain(ctx, vm)
	if err != nil {
		return nil, fmt.Errorf("finding the VM %s: %w", vm, err)
	}
	st, err := h.ReadDomain(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("reading the VM %s: %w", ref.Name, err)
	}
	obs, err := domain.Parse(st.XML)
	if err != nil {
		return nil, fmt.Errorf("reading the VM %s: %w", ref.Name, err)
	}
	state, err := h.DomainState(ctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("reading the state of %s: %w", ref.Name, err)
	}
	var owned []domain.VolumeRef
	if obs.Metadata != nil {
		owned = obs.Metadata.Owner.Volumes
	}
	t := &Target{VM: ref, State: state}
	for _, ch := range obs.Channels {
		if ch.Name == domain.GuestAgentChannel {
			t.Agent = true
		}
	}
	var refused []string
	check := func(disk string, src domain.Source, format domain.DiskFormat) {
		switch {
		case src.Path != "":
			refused = append(refused, fmt.Sprintf("%s (the file %s, given by path)", disk, src.Path))
		case !vmlife.ContainsVolume(owned, domain.VolumeRef{Pool: src.Pool, Volume: src.Volume}):
			refused = append(refused, fmt.Sprintf("%s (the volume %s/%s, which Kohaku did not make for this VM: an existing volume or a kept data disk)", disk, src.Pool, src.Volume))
		case format != "" && format != domain.DiskQCOW2:
			refused = append(refused, fmt.Sprintf("%s (the %s volume %s/%s: snapshots and reverts write qcow2 only)", disk, format, src.Pool, src.Volume))
		default:
			t.Disks = append(t.Disks, Disk{Disk: disk, Pool: src.Pool, Volume: src.Volume})
		}
	}
	if d := obs.Spec.Disk; d != nil && !d.IsZero() {
		check("boot", d.Source, d.Format)
	}
	for _, d := range obs.Spec.DataDisks {
		check("data disk "+d.Serial, d.Source, d.Format)
	}
	for i := range t.Disks {
		if t.Disks[i].Disk != "boot" {
			t.Disks[i].Disk = strings.TrimPrefix(t.Disks[i].Disk, "data disk ")
		}
	}
	for _, u := range obs.Unrecognized {
		if strings.HasPrefix(u, "disk") || strings.HasPrefix(u, "lun") {
			refused = append(refused, u+" (not a disk Kohaku made)")
		}
	}
	switch {
	case len(refused) > 0:
		return nil, fmt.Errorf("%w: %s has disks Kohaku cannot snapshot: %s. Kohaku snapshots only the disks it "+
			"made for a VM (the boot overlay of disk.image or disk.base_volume, and data disks with size_gib "+
			"and keep = false)", ErrNotSnapshottable, ref.Name, strings.Join(refused, "; "))
	case len(t.Disks) == 0:
		return nil, fmt.Errorf("%w: %s has no disk (it boots a kernel alone): there is nothing to snapshot", ErrNotSnapshottable, ref.Name)
	}
	return t, nil
}

// say calls progress when it is set.
func say(progress func(string), line string) {
	if progress != nil {
		progress(line)
	}
}

// cleanupTimeout bounds the cleanup after an interrupted step.
const cleanupTimeout = 2 * time.Minute

var copyRE = regexp.MustCompile(`\.(snap-[A-Za-z0-9][A-Za-z0-9_.-]{0,62}|kohaku-revert)$`)

// IsCopyVolume reports whether a volume's name is that of a snapshot's
// copy of a disk or of a revert's staged copy: a standalone qcow2 that is
// not an image, whatever its bytes look like.
func IsCopyVolume(name string) bool { return copyRE.MatchString(name) }
