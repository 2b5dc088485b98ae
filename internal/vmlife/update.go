package vmlife

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// Change is an in-place update of a VM.
type Change struct {
	Ref hostapi.DomainRef
	// Want is the VM as planned; Prior is the spec the state describes.
	Want  Want
	Prior domain.Spec
	// Overlay is the overlay volume the state records, if any.
	Overlay *domain.VolumeRef
	// DiskBytes is the boot disk's planned virtual size (disk.size_gib);
	// 0 leaves its size as it is. A larger size grows the disk in place.
	DiskBytes int64
	// NewDisks are the planned data disks whose volumes Kohaku makes.
	NewDisks []NewDisk
	// Recorded are the GPU groups create or the last update recorded.
	Recorded  GPUGroups
	Running   bool
	Autostart bool
	// Grace is how long the guest gets to power off before it is forced.
	Grace time.Duration
	// Record stores the GPU groups: called before anything changes (with
	// the recorded ones merged with the newly read), and with the new
	// groups alone once the update is done.
	Record func(GPUGroups)
	// Warn receives notes for the user.
	Warn func(string)
	// ForcedOff is told when a stop had to force the guest off because it
	// did not power off within Grace of the shutdown request, or within
	// what the operation's timeout left when that was less (waited, from
	// StopGrace; ForcedOffNote says so to the user).
	ForcedOff func(waited time.Duration)
}

// UpdateError is an update that failed at Step.
type UpdateError struct {
	Step string
	Err  error
	// Unchanged says the host was not touched.
	Unchanged bool
	// View is the domain as it is after the failure, when it could be read,
	// so the state can start from the truth.
	View *View
}

func (e *UpdateError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *UpdateError) Unwrap() error { return e.Err }

// Power is what an update does to a domain's run state.
type Power struct {
	Stop bool
	Step string // as an UpdateError names it
}

// Restarts is the run-state part of an update: what to do to a domain that
// is active (or not) when the plan wants it running (or not) and the
// definition was redefined (or not). Only a running domain that stays
// running and was redefined is restarted; a definition change of a stopped
// domain applies at its next start.
func Restarts(want, active, redefined bool) []Power {
	switch {
	case want && active && redefined:
		return []Power{{Stop: true, Step: "stop the domain to apply the new definition"}, {Step: "start the domain with the new definition"}}
	case want && !active:
		return []Power{{Step: "start the domain"}}
	case !want && active:
		return []Power{{Stop: true, Step: "stop the domain"}}
	}
	return nil
}

// DefinitionChanged reports whether the planned spec changes what the domain
// definition holds, and so needs a redefine (and a restart if it runs). It
// compares specs, so moving a device between gpus and hostdevs, or spelling
// an address differently, is no change.
//
// The plan's gpus entries count with their whole groups (groups), and the
// prior's PCI devices are the ones the domain has (observed): after an
// import all of them are hostdevs, and moving them to gpus redefines nothing.
func DefinitionChanged(want, prior domain.Spec, groups GPUGroups, observed []string) bool {
	want.Hostdevs = groups.Hostdevs(want.Hostdevs)
	prior.Hostdevs = observed
	return domain.Hash(want) != domain.Hash(prior)
}

// StepGrowDisk is the step that grows the boot disk.
const StepGrowDisk = "grow the boot disk"

// ErrShrink is a disk size below the volume's: refused, since it would cut
// off the data at the end of the disk.
var ErrShrink = errors.New("a disk is never shrunk: the data past the new size would be lost")

// GrowBootDisk grows the volume behind the domain's boot disk (vda) to size
// bytes: through QEMU's block resize while the domain runs, so the guest
// sees the larger block device at once and nothing restarts, else by
// resizing the volume, which the guest sees at its next start. The same
// volume stays, with its data. A size of 0 or the volume's own does nothing;
// a smaller one is refused with ErrShrink.
func GrowBootDisk(ctx context.Context, h Host, view *View, size int64) error {
	if size <= 0 || view.Observed.Spec.Disk == nil {
		return nil
	}
	vol := view.Overlay
	if vol == nil {
		vol = view.DiskVolume
	}
	if vol == nil {
		src := view.Observed.Spec.Disk.Source
		if src.Pool == "" || src.Volume == "" {
			return fmt.Errorf("the boot disk %s is in no storage pool, so Kohaku cannot resize it", src.Path)
		}
		vol = &domain.VolumeRef{Pool: src.Pool, Volume: src.Volume}
	}
	if view.Status.Active {
		grow, err := needsGrowth(ctx, h, *vol, size)
		if err != nil || !grow {
			return err
		}
		return h.GrowDiskLive(ctx, view.Status.DomainRef, "vda", size)
	}
	return growVolume(ctx, h, *vol, size)
}

// growVolume grows a volume no running domain uses to size bytes; one of
// that size is left alone, a larger one is refused with ErrShrink.
func growVolume(ctx context.Context, h Host, vol domain.VolumeRef, size int64) error {
	grow, err := needsGrowth(ctx, h, vol, size)
	if err != nil || !grow {
		return err
	}
	return h.GrowVolume(ctx, vol.Pool, vol.Volume, size)
}

// needsGrowth says whether vol is smaller than size bytes; larger is
// ErrShrink.
func needsGrowth(ctx context.Context, h Host, vol domain.VolumeRef, size int64) (bool, error) {
	info, err := h.VolumeInfo(ctx, vol.Pool, vol.Volume)
	if err != nil {
		return false, err
	}
	if size < info.CapacityBytes {
		return false, fmt.Errorf("volume %s/%s has %d bytes, more than the %d planned: %w", vol.Pool, vol.Volume, info.CapacityBytes, size, ErrShrink)
	}
	return size > info.CapacityBytes, nil
}

// Update brings the domain to the plan: the GPU groups are read anew, the
// boot disk grows in place (GrowBootDisk) when the plan makes it larger, the
// domain is redefined (same UUID, same disk) when its definition changes,
// from its current definition with what Kohaku owns set (domain.Merge),
// then stopped, started or restarted as Restarts says, and its autostart
// set. A domain that no longer exists yields an error wrapping
// hostapi.ErrDomainNotFound; any other failure is an *UpdateError.
func Update(ctx context.Context, h Host, ch Change) (*View, error) {
	record, warn := ch.Record, ch.Warn
	if record == nil {
		record = func(GPUGroups) {}
	}
	if warn == nil {
		warn = func(string) {}
	}
	groups := ch.Recorded
	// made are the data volumes this update created. When it fails, those
	// the domain's definition does not use are deleted again: no state
	// would record them. One whose attach may have happened (the call's
	// answer was lost) is kept when the definition, read anew, has it, and
	// also when that read fails.
	var made []domain.VolumeRef
	fail := func(step string, err error) error {
		e := &UpdateError{Step: step, Err: err}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), storyReadTimeout)
		defer rcancel()
		if view, rerr := Read(rctx, h, ch.Ref, ch.Overlay, false); rerr == nil {
			for _, v := range unattached(made, view.Observed) {
				if derr := h.RemoveVolume(rctx, v.Pool, v.Volume); derr != nil {
					e.Err = fmt.Errorf("%w; the new data disk's volume %s/%s could not be deleted again (%v): delete it with virsh vol-delete --pool %s %s", e.Err, v.Pool, v.Volume, derr, v.Pool, v.Volume)
				}
			}
			view.GPUGroups = groups
			e.View = view
		}
		return e
	}
	view, err := Read(ctx, h, ch.Ref, ch.Overlay, false)
	if errors.Is(err, hostapi.ErrDomainNotFound) {
		return nil, fmt.Errorf("%w: it was removed outside Terraform since the last refresh; run terraform apply again to create it anew", err)
	}
	if err != nil {
		return nil, fail("read the domain", err)
	}
	// A redefine or start is not abandoned halfway; the graceful
	// shutdown's wait is what the update's deadline bounds.
	steady, cancel := bounded(ctx)
	defer cancel()

	// Each gpus entry brings the functions of its IOMMU group that its
	// binding moved to vfio-pci, read anew: the group is the host's to tell.
	planned, warnings, err := ExpandGPUs(ctx, ch.Want.GPUs, HostPCIReader(h))
	for _, w := range warnings {
		warn(w)
	}
	if err != nil {
		return nil, &UpdateError{Step: StepGPUs, Err: err, Unchanged: true}
	}
	// Recorded before anything changes, so a refresh after a failed step
	// attributes whichever devices the domain then has.
	groups = groups.Merged(planned)
	record(groups)
	// The NUMA binding is the host's to tell too (the nodes of the GPUs):
	// placed anew, it is compared with the domain's own.
	// So are one-to-one pins, made at create and kept.
	if ch.Want.KeepPins {
		ch.Want.Spec.CPUPins, ch.Want.Spec.EmulatorCPUs = view.Observed.Spec.CPUPins, view.Observed.Spec.EmulatorCPUs
	}
	want, prior := ch.Want.Spec, ch.Prior
	if err := Place(ctx, h, &want, ch.Want.NUMAPlacement, ch.Want.GPUs, ch.Want.Nodes, false); err != nil {
		return nil, &UpdateError{Step: StepPlace, Err: err, Unchanged: true}
	}
	prior.NUMA = view.Observed.Spec.NUMA
	prior.CPUPins, prior.EmulatorCPUs = view.Observed.Spec.CPUPins, view.Observed.Spec.EmulatorCPUs
	// The boot disk grows first, live when the domain runs: nothing else
	// of the update depends on it, and a failure leaves the rest as it was.
	if err := GrowBootDisk(steady, h, view, ch.DiskBytes); err != nil {
		return nil, fail(StepGrowDisk, err)
	}
	// Data disks: their volumes are made first; on a running domain they
	// are hot-plugged (live and in the definition), so only other hardware
	// changes restart it.
	diff := dataDiskDiff(domain.Normalize(want).DataDisks, view.Observed)
	made, err = createDataVolumes(steady, h, ch.NewDisks)
	if err != nil {
		return nil, fail(StepDataDisks, err)
	}
	wantHW, priorHW := want, prior
	wantHW.DataDisks, priorHW.DataDisks = nil, nil
	restart := DefinitionChanged(wantHW, priorHW, planned, view.Observed.Spec.Hostdevs)
	owned := ownedVolumes(view.Overlay, ch.NewDisks)
	ownedBefore := view.Owned
	if s := view.Observed.Spec.Seed; s != nil {
		// The seed's copy a move brought: the VM's to delete, still.
		if v := (domain.VolumeRef{Pool: s.Pool, Volume: s.Volume}); ContainsVolume(ownedBefore, v) && !ContainsVolume(owned, v) {
			owned = append(owned, v)
		}
	}
	if view.Status.Active && !diff.empty() {
		if err := hotplug(steady, h, ch.Ref, view.Status.XML, diff); err != nil {
			var se *StepError
			errors.As(err, &se)
			return nil, fail(se.Step, se.Err)
		}
		if view, err = Read(steady, h, ch.Ref, ch.Overlay, false); err != nil {
			return nil, fail("read the domain", err)
		}
	}
	redefine := restart || !diff.empty() || !sameVolumes(owned, ownedBefore)
	if redefine {
		if err := redefineDomain(ctx, steady, h, ch, view, planned, owned, fail); err != nil {
			return nil, err
		}
	}
	// The volumes of removed data disks go once no definition names them.
	for _, v := range removedVolumes(ownedBefore, owned, want.DataDisks) {
		if err := h.RemoveVolume(steady, v.Pool, v.Volume); err != nil {
			return nil, fail(StepDeleteVolume, fmt.Errorf("%s/%s: %w", v.Pool, v.Volume, err))
		}
	}

	for _, p := range Restarts(ch.Running, view.Status.Active, restart) {
		var err error
		if p.Stop {
			var how hostapi.StopResult
			waited := StopGrace(ctx, ch.Grace)
			how, err = h.StopDomain(ctx, ch.Ref, ch.Grace)
			if err == nil && how == hostapi.StopForced && ch.Grace > 0 && ch.ForcedOff != nil {
				ch.ForcedOff(waited)
			}
		} else {
			err = h.StartDomain(steady, ch.Ref)
		}
		if err != nil {
			return nil, fail(p.Step, err)
		}
	}
	if ch.Autostart != view.Status.Autostart {
		if err := h.SetAutostart(steady, ch.Ref, ch.Autostart); err != nil {
			return nil, fail("set autostart", err)
		}
	}

	view, err = Read(steady, h, ch.Ref, ch.Overlay, false)
	if err != nil {
		return nil, fail("read the domain back", err)
	}
	view.GPUGroups = planned
	record(planned)
	if ch.Running && !view.Status.Active {
		return nil, fail("start the domain", stoppedAtOnce(view))
	}
	return view, nil
}

// redefineDomain is Update's redefine: the plan resolved against the host
// (same UUID, same boot disk, the volumes Kohaku owns now) and merged into
// the domain's current definition. fail is Update's, for a failure after
// which the domain may have changed.
func redefineDomain(ctx, steady context.Context, h Host, ch Change, view *View, planned GPUGroups, owned []domain.VolumeRef,
	fail func(step string, err error) error) error {
	w := ch.Want
	w.Spec.UUID = ch.Ref.UUID
	w.Spec.Disk = view.Observed.Spec.Disk // disk changes replace the VM
	w.Spec.Owner.Volumes = owned
	w.DiskMode, w.InspectSeed = "", false
	r, err := Resolve(ctx, h, w, planned, false)
	var se *StepError
	switch {
	case errors.As(err, &se) && se.Step == StepShares:
		return &UpdateError{Step: se.Step, Err: se.Err, Unchanged: true}
	case errors.As(err, &se):
		return fail(se.Step, se.Err)
	}
	// The definition is edited, not regenerated: what Kohaku does not
	// own (devices, metadata, settings it has no attribute for)
	// survives as the domain has it.
	xml, err := domain.Merge(view.Status.XML, r.Spec)
	if err != nil {
		return fail("build the domain XML", err)
	}
	if _, err := h.DefineDomain(steady, r.Spec.Name, xml); err != nil {
		return fail("redefine the domain", err)
	}
	return nil
}
