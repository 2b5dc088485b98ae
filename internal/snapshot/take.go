package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// How consistent a snapshot's copies are.
const (
	// ConsistencyPoweredOff is a snapshot of a VM that was shut off while
	// its disks were copied: consistent as the guest left them when it
	// powered off, with no guest agent involved.
	ConsistencyPoweredOff = "powered_off"
	// ConsistencyQuiesced is a snapshot of a running VM taken with its file
	// systems frozen through the guest agent: every disk at the same
	// moment, with what the guest had written flushed.
	ConsistencyQuiesced = "quiesced"
	// ConsistencyCrash is a snapshot of a running VM whose agent did not
	// freeze its file systems: every disk at the same moment, as after a
	// power cut (journaling file systems recover; data the guest had not
	// written out is missing).
	ConsistencyCrash = "crash_consistent"
)

// thawTimeout bounds the thaw, which runs whatever became of the context.
const thawTimeout = 30 * time.Second

// TakeRequest is one snapshot to make.
type TakeRequest struct {
	VM   string // name or UUID
	Name string
	// Progress receives a line per step; nil discards them.
	Progress func(string)
}

// Copy is a snapshot's copy of one disk.
type Copy struct {
	Disk
	// Snapshot is the copy's volume, in the disk's pool.
	Snapshot      string
	Path          string
	CapacityBytes int64
	Digest        hostapi.ImageDigest
}

// Snapshot is a snapshot as made.
type Snapshot struct {
	VM          hostapi.DomainRef
	Name        string
	Copies      []Copy
	Consistency string
	// Warnings are for the user: a running VM copied without its file
	// systems frozen.
	Warnings []string
}

// StepError is a step that failed. A snapshot that fails leaves no volume
// behind, unless the error says it could not delete one.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// Take copies every disk of a VM into a standalone qcow2 volume beside it
// (SnapVolume), with its base image merged in, and reads each copy back
// for its digest. A shut-off VM's disks are copied as they are
// (ConsistencyPoweredOff); a running VM's through libvirt's backup job
// (takeRunning). A VM with a disk Kohaku did not make is refused
// (ErrNotSnapshottable). A volume of a copy's name that exists already is
// never overwritten. A failure, or a stopped VM started while its disks
// were copied, deletes the copies made.
func Take(ctx context.Context, h Host, req TakeRequest) (*Snapshot, error) {
	if err := CheckName(req.Name); err != nil {
		return nil, &StepError{Step: "check the name", Err: err}
	}
	t, err := Find(ctx, h, req.VM)
	if err != nil {
		return nil, &StepError{Step: "find the VM's disks", Err: err}
	}
	for _, d := range t.Disks {
		name := SnapVolume(d.Volume, req.Name)
		taken, err := h.VolumeExists(ctx, d.Pool, name)
		if err != nil {
			return nil, &StepError{Step: "check the copies' names are free", Err: err}
		}
		if taken {
			return nil, &StepError{Step: "check the copies' names are free", Err: fmt.Errorf("the volume %s/%s exists "+
				"already, and Kohaku never overwrites it: another snapshot named %q of this disk, or one left behind. "+
				"Choose another name, or delete it (virsh vol-delete --pool %s %s) if it is stale", d.Pool, name,
				req.Name, d.Pool, name)}
		}
	}
	if t.Running() {
		return takeRunning(ctx, h, t, req)
	}
	out := &Snapshot{VM: t.VM, Name: req.Name, Consistency: ConsistencyPoweredOff}
	fail := func(step string, err error) (*Snapshot, error) {
		if derr := Delete(context.WithoutCancel(ctx), h, out.Copies); derr != nil {
			err = fmt.Errorf("%w; deleting the copies made failed too: %v", err, derr)
		} else if len(out.Copies) > 0 {
			err = fmt.Errorf("%w (the copies made were deleted)", err)
		}
		return nil, &StepError{Step: step, Err: err}
	}
	for _, d := range t.Disks {
		name := SnapVolume(d.Volume, req.Name)
		say(req.Progress, fmt.Sprintf("copying %s's %s disk %s/%s into %s", t.VM.Name, d.Disk, d.Pool, d.Volume, name))
		vol, err := h.FlattenVolume(ctx, d.Pool, d.Volume, d.Pool, name)
		if err != nil {
			return fail("copy the "+d.Disk+" disk", err)
		}
		c := Copy{Disk: d, Snapshot: name, Path: vol.Path, CapacityBytes: vol.CapacityBytes}
		out.Copies = append(out.Copies, c)
		dg, err := h.HashVolume(ctx, d.Pool, name)
		if err != nil {
			return fail("read the "+d.Disk+" disk's copy back for its digest", err)
		}
		out.Copies[len(out.Copies)-1].Digest = dg
	}
	// A VM started while its disks were copied may have written to some
	// of them after they were copied: such copies are not of one moment.
	state, err := h.DomainState(ctx, t.VM.Name)
	if err != nil {
		return fail("read the VM's state after the copies", err)
	}
	if state != t.State {
		return fail("check the VM stayed shut off", fmt.Errorf("%s became %s while its disks were copied, so the copies "+
			"may not be of one moment; keep it shut off while the snapshot is taken", t.VM.Name, state))
	}
	return out, nil
}

// takeRunning copies a running VM's disks through libvirt's backup job:
// the guest's file systems are frozen through its agent (when it has one
// that answers) just before the job begins, and thawed as soon as it has
// begun, whatever happened; the job copies every disk as it was at that
// moment while the guest runs on. A failure or an interruption aborts the
// job and deletes the copies.
func takeRunning(ctx context.Context, h Host, t *Target, req TakeRequest) (*Snapshot, error) {
	out := &Snapshot{VM: t.VM, Name: req.Name, Consistency: ConsistencyCrash}
	targets := make([]hostapi.BackupTarget, 0, len(t.Disks))
	for _, d := range t.Disks {
		targets = append(targets, hostapi.BackupTarget{SourcePool: d.Pool, SourceVolume: d.Volume, Pool: d.Pool, Name: SnapVolume(d.Volume, req.Name)})
	}
	frozen := false
	switch {
	case !t.Agent:
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s has no guest agent channel, so its file systems were not "+
			"frozen: the snapshot is crash-consistent, as after a power cut (what the guest had not written out is "+
			"missing). Give the VM the guest agent (kohaku_vm's guest_agent and qemu-guest-agent in the guest), or "+
			"snapshot it shut off.", t.VM.Name))
	default:
		say(req.Progress, "freezing "+t.VM.Name+"'s file systems through its guest agent")
		n, err := h.FreezeFilesystems(ctx, t.VM)
		if err != nil {
			out.Warnings = append(out.Warnings, fmt.Sprintf("%s's guest agent did not freeze its file systems (%v), "+
				"so the snapshot is crash-consistent, as after a power cut (what the guest had not written out is "+
				"missing). Install and start qemu-guest-agent in the guest, or snapshot it shut off.", t.VM.Name, err))
			break
		}
		frozen = true
		say(req.Progress, fmt.Sprintf("froze %d file systems", n))
	}
	say(req.Progress, "beginning the backup job of "+t.VM.Name)
	berr := h.BeginBackup(ctx, t.VM, targets)
	if frozen {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), thawTimeout)
		terr := h.ThawFilesystems(tctx, t.VM)
		if terr != nil { // once more: a guest left frozen stops writing
			say(req.Progress, fmt.Sprintf("thawing failed (%v); trying again", terr))
			terr = h.ThawFilesystems(tctx, t.VM)
		}
		cancel()
		if terr != nil {
			err := fmt.Errorf("thawing the guest's file systems failed: %w; the guest may be stuck until they are "+
				"thawed (virsh domfsthaw %s)", terr, t.VM.Name)
			if berr == nil {
				return nil, abortBackup(ctx, h, t, targets, &StepError{Step: "thaw the guest's file systems", Err: err})
			}
			berr = fmt.Errorf("%w; also, %v", berr, err)
		}
		out.Consistency = ConsistencyQuiesced
	}
	switch {
	case berr != nil && hostapi.Unsupported(berr):
		return nil, &StepError{Step: "begin the backup", Err: fmt.Errorf("%w: the host's libvirt or QEMU cannot copy "+
			"a running VM's disks (backup API); snapshot the VM shut off instead (running = false)", berr)}
	case berr != nil:
		return nil, &StepError{Step: "begin the backup", Err: berr}
	}
	vols, err := h.WaitBackup(ctx, t.VM, targets, func(done, total uint64) {
		if total > 0 {
			say(req.Progress, fmt.Sprintf("copied %d of %d MiB", done>>20, total>>20))
		}
	})
	if err != nil {
		return nil, &StepError{Step: "copy the disks (backup job)", Err: err}
	}
	for i, d := range t.Disks {
		out.Copies = append(out.Copies, Copy{Disk: d, Snapshot: targets[i].Name, Path: vols[i].Path, CapacityBytes: vols[i].CapacityBytes})
	}
	for i := range out.Copies {
		c := &out.Copies[i]
		dg, err := h.HashVolume(ctx, c.Pool, c.Snapshot)
		if err != nil {
			if derr := Delete(context.WithoutCancel(ctx), h, out.Copies); derr != nil {
				err = fmt.Errorf("%w; deleting the copies failed too: %v", err, derr)
			}
			return nil, &StepError{Step: "read the " + c.Disk.Disk + " disk's copy back for its digest", Err: err}
		}
		c.Digest = dg
	}
	return out, nil
}

// abortBackup ends a backup job that began, and deletes its copies, after
// err; WaitBackup does both when its context has ended.
func abortBackup(ctx context.Context, h Host, t *Target, targets []hostapi.BackupTarget, err error) error {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	if _, werr := h.WaitBackup(cctx, t.VM, targets, nil); werr != nil {
		return fmt.Errorf("%w (%v)", err, werr)
	}
	return err
}

// Missing lists the copies whose volumes are gone from the host.
func Missing(ctx context.Context, h Host, copies []Copy) ([]Copy, error) {
	var gone []Copy
	for _, c := range copies {
		ok, err := h.VolumeExists(ctx, c.Pool, c.Snapshot)
		if err != nil {
			return nil, fmt.Errorf("looking up the snapshot volume %s/%s: %w", c.Pool, c.Snapshot, err)
		}
		if !ok {
			gone = append(gone, c)
		}
	}
	return gone, nil
}

// Delete deletes the copies' volumes; those already gone are no error.
// It goes on past a failure and returns every failure together.
func Delete(ctx context.Context, h Host, copies []Copy) error {
	var errs []error
	for _, c := range copies {
		if err := h.RemoveVolume(ctx, c.Pool, c.Snapshot); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s/%s: %w", c.Pool, c.Snapshot, err))
		}
	}
	return errors.Join(errs...)
}

// Open reads the snapshot name of the VM vm as the host has it, for an
// import: the copies of the VM's disks that exist, each read back for its
// digest. A disk without a copy is an error.
func Open(ctx context.Context, h Host, vm, name string) (*Snapshot, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	t, err := Find(ctx, h, vm)
	if err != nil {
		return nil, err
	}
	out := &Snapshot{VM: t.VM, Name: name} // how consistent is not on the host
	for _, d := range t.Disks {
		snap := SnapVolume(d.Volume, name)
		vol, err := h.VolumeInfo(ctx, d.Pool, snap)
		if err != nil {
			return nil, fmt.Errorf("the snapshot %q of %s's %s disk (%s/%s): %w", name, t.VM.Name, d.Disk, d.Pool, snap, err)
		}
		dg, err := h.HashVolume(ctx, d.Pool, snap)
		if err != nil {
			return nil, fmt.Errorf("reading %s/%s for its digest: %w", d.Pool, snap, err)
		}
		out.Copies = append(out.Copies, Copy{Disk: d, Snapshot: snap, Path: vol.Path, CapacityBytes: vol.CapacityBytes, Digest: dg})
	}
	return out, nil
}

// List finds the snapshots of the VM vm (name or UUID) on the host: the
// names with a copy of every disk of the VM, sorted. A VM Kohaku cannot
// snapshot has none (an error wrapping ErrNotSnapshottable).
func List(ctx context.Context, h Host, vm string) (*Target, []string, error) {
	t, err := Find(ctx, h, vm)
	if err != nil {
		return nil, nil, err
	}
	count := map[string]int{}
	listed := map[string][]string{}
	for _, d := range t.Disks {
		names, ok := listed[d.Pool]
		if !ok {
			if names, err = h.ListVolumeNames(ctx, d.Pool); err != nil {
				return nil, nil, fmt.Errorf("listing the volumes of pool %s: %w", d.Pool, err)
			}
			listed[d.Pool] = names
		}
		prefix := d.Volume + ".snap-"
		for _, n := range names {
			if name, ok := strings.CutPrefix(n, prefix); ok && CheckName(name) == nil {
				count[name]++
			}
		}
	}
	var out []string
	for name, n := range count {
		if n == len(t.Disks) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return t, out, nil
}
