package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// RevertRequest is one revert of a VM's disks to a snapshot.
type RevertRequest struct {
	VM string // name or UUID
	// SnapshotOf is the UUID of the VM the snapshot was taken of; a VM
	// with another UUID is refused before anything changes.
	SnapshotOf string
	Name       string
	// Start says whether to start the VM afterwards; nil starts it when it
	// was running before the revert.
	Start *bool
	// ShutdownTimeout bounds the clean shutdown of a running VM; one still
	// running then is left running and nothing is changed.
	ShutdownTimeout time.Duration
	// Progress receives a line per step; nil discards them.
	Progress func(string)
}

// RevertResult says how a revert went.
type RevertResult struct {
	Target *Target
	// WasRunning is whether the VM ran when the revert began.
	WasRunning bool
	// Resumed is set when the revert finished one that an interruption
	// had left past its commit (some disks deleted, their copies staged).
	Resumed bool
	// Started is whether the VM was started afterwards.
	Started bool
	// Warnings are for the user: a staged copy left behind.
	Warnings []string
}

// RevertError is a revert step that failed. Committed says the VM's old
// disks were being replaced: the VM is shut off and cannot start (at least
// one disk is missing) until the revert is run again, which finishes it.
// Otherwise the VM's disks are as they were.
type RevertError struct {
	Step      string
	Committed bool
	Err       error
}

func (e *RevertError) Error() string {
	if e.Committed {
		return e.Step + ": " + e.Err.Error() + ". The VM's disks were being replaced by the snapshot's, so it is shut " +
			"off and cannot start until the revert is run again, which finishes it"
	}
	return e.Step + ": " + e.Err.Error()
}
func (e *RevertError) Unwrap() error { return e.Err }

// CheckRevert finds the VM and checks, changing nothing, that it is the VM
// the snapshot was taken of, that Kohaku can snapshot its every disk, and
// that the snapshot holds a copy of each (or, for a revert an interruption
// left unfinished, its staged copy).
func CheckRevert(ctx context.Context, h Host, req RevertRequest) (*Target, error) {
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	ref, err := h.LookupDomain(ctx, req.VM)
	if err != nil {
		return nil, fmt.Errorf("finding the VM %s: %w", req.VM, err)
	}
	if req.SnapshotOf != "" && ref.UUID != req.SnapshotOf {
		return nil, fmt.Errorf("%w: the snapshot %q was taken of the VM with UUID %s, and %s is %s. A VM's disks "+
			"return only to its own snapshots", ErrOtherVM, req.Name, req.SnapshotOf, ref.Name, ref.UUID)
	}
	t, err := Find(ctx, h, ref.UUID)
	if err != nil {
		return nil, err
	}
	for _, d := range t.Disks {
		snap, err := h.VolumeExists(ctx, d.Pool, SnapVolume(d.Volume, req.Name))
		if err != nil {
			return nil, err
		}
		if snap {
			continue
		}
		staged, err := h.VolumeExists(ctx, d.Pool, StagingVolume(d.Volume))
		if err != nil {
			return nil, err
		}
		if !staged {
			return nil, fmt.Errorf("%w: the snapshot %q has no copy of %s's %s disk %s/%s (no volume %s): the disk "+
				"was added after the snapshot, or the copy was deleted. Nothing was changed", ErrNotSnapshottable,
				req.Name, t.VM.Name, d.Disk, d.Pool, d.Volume, SnapVolume(d.Volume, req.Name))
		}
	}
	return t, nil
}

// Revert returns every disk of the VM to the snapshot req.Name: the VM is
// shut down cleanly (never forced), each disk's snapshot is copied into a
// staging volume beside it (StagingVolume), then (the commit) every old
// disk volume is deleted, each disk volume is made again, under its own
// name, from its staged copy, the staged copies are deleted, and the VM is
// started as req.Start says.
//
// Where the truth is at each step: until the commit, in the VM's disks,
// untouched (a failure deletes the staged copies and starts the VM again
// when it ran). From the commit on, in the staged copies: a disk volume
// that is missing keeps the VM from starting, and a run of Revert that
// finds a disk missing finishes that revert (from the staged copies, or
// the snapshot's where one is gone) rather than starting over. Once
// committed, an interruption (ctx cancelled) no longer stops the copies,
// only ctx's deadline does, so an interrupted revert ends reverted
// whenever there is time to. A VM started by someone else while the
// copies were staged is not committed on: its disks are in use.
func Revert(ctx context.Context, h Host, req RevertRequest) (*RevertResult, error) {
	t, err := CheckRevert(ctx, h, req)
	if err != nil {
		return nil, &RevertError{Step: "check the snapshot and the VM", Err: err}
	}
	res := &RevertResult{Target: t, WasRunning: t.Running()}
	name := t.VM.Name
	if res.WasRunning {
		sctx, cancel := context.WithTimeout(ctx, req.ShutdownTimeout)
		_, err := vmlife.RunPower(sctx, h, vmlife.PowerRequest{Domain: t.VM.UUID, Op: vmlife.PowerShutdown, Progress: req.Progress})
		cancel()
		if err != nil {
			return nil, &RevertError{Step: "shut the VM down cleanly", Err: fmt.Errorf("%s did not power off within %s "+
				"of being asked and was not forced off: it is still running and nothing was changed. Raise "+
				"shutdown_timeout, or stop the VM yourself first (%w)", name, req.ShutdownTimeout, err)}
		}
	}
	committed, err := isCommitted(ctx, h, t)
	if err != nil {
		return nil, &RevertError{Step: "look for an unfinished revert", Err: err}
	}
	res.Resumed = committed
	if committed {
		say(req.Progress, "finishing the revert of "+name+" that was interrupted after its old disks were deleted")
	} else {
		if err := stage(ctx, h, t, req); err != nil {
			return nil, restartAfter(ctx, h, res, &RevertError{Step: "copy the snapshot beside the disks", Err: err})
		}
	}
	if !committed {
		state, err := h.DomainState(ctx, t.VM.Name)
		if err == nil && state != "shut off" && state != "crashed" {
			err = fmt.Errorf("%s was started (it is %s) while the snapshot was staged; its disks are in use and were "+
				"left as they are", name, state)
		}
		if err != nil {
			return nil, &RevertError{Step: "check the VM is still shut off", Err: dropStaged(ctx, h, t, err)}
		}
	}
	// The commit: from the first deletion on, the staged copies are the
	// truth and the revert finishes even when interrupted (not past ctx's
	// deadline).
	cctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		cctx, cancel = context.WithDeadline(cctx, dl)
		defer cancel()
	}
	for i, d := range t.Disks {
		say(req.Progress, fmt.Sprintf("deleting %s's old %s disk %s/%s", name, d.Disk, d.Pool, d.Volume))
		err := h.RemoveVolume(cctx, d.Pool, d.Volume)
		if err == nil {
			continue
		}
		if i == 0 && !committed {
			// Nothing deleted yet, unless this deletion happened after all.
			if kept, xerr := h.VolumeExists(cctx, d.Pool, d.Volume); xerr == nil && kept {
				err = dropStaged(ctx, h, t, fmt.Errorf("deleting the old %s disk: %w", d.Disk, err))
				return nil, restartAfter(ctx, h, res, &RevertError{Step: "replace the disks", Err: err})
			}
		}
		return nil, &RevertError{Step: "delete the old " + d.Disk + " disk", Committed: true, Err: err}
	}
	for _, d := range t.Disks {
		src := StagingVolume(d.Volume)
		ok, err := h.VolumeExists(cctx, d.Pool, src)
		if err != nil {
			return nil, &RevertError{Step: "find the staged copy of the " + d.Disk + " disk", Committed: true, Err: err}
		}
		if !ok {
			src = SnapVolume(d.Volume, req.Name) // staged copy lost: the snapshot holds the same
		}
		say(req.Progress, fmt.Sprintf("making %s/%s again from %s", d.Pool, d.Volume, src))
		if _, err := h.FlattenVolume(cctx, d.Pool, src, d.Pool, d.Volume); err != nil {
			return nil, &RevertError{Step: "make the " + d.Disk + " disk again from the snapshot", Committed: true, Err: err}
		}
	}
	for _, d := range t.Disks {
		if err := h.RemoveVolume(cctx, d.Pool, StagingVolume(d.Volume)); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("The disks of %s are reverted, but deleting the staged copy "+
				"%s/%s failed: %v. Delete it by hand (virsh vol-delete --pool %s %s); it holds a copy of the snapshot.",
				name, d.Pool, StagingVolume(d.Volume), err, d.Pool, StagingVolume(d.Volume)))
		}
	}
	start := res.WasRunning
	if req.Start != nil {
		start = *req.Start
	}
	if start {
		say(req.Progress, "starting "+name)
		if err := h.StartDomain(cctx, t.VM); err != nil {
			return nil, &RevertError{Step: "start the VM", Err: fmt.Errorf("%w; its disks are reverted", err)}
		}
		res.Started = true
	}
	return res, nil
}

// isCommitted reports whether an earlier revert deleted a disk of t: a
// disk volume is missing. Its staged copy, or else the snapshot's copy
// (CheckRevert found one of them), makes it again.
func isCommitted(ctx context.Context, h Host, t *Target) (bool, error) {
	for _, d := range t.Disks {
		vol, err := h.VolumeExists(ctx, d.Pool, d.Volume)
		if err != nil {
			return false, err
		}
		if !vol {
			return true, nil
		}
	}
	return false, nil
}

// stage copies each disk's snapshot into its staging volume, deleting a
// stale one first. A failure deletes the staged copies.
func stage(ctx context.Context, h Host, t *Target, req RevertRequest) error {
	var err error
	for _, d := range t.Disks {
		staging := StagingVolume(d.Volume)
		if err = h.RemoveVolume(ctx, d.Pool, staging); err != nil {
			break
		}
		say(req.Progress, fmt.Sprintf("copying the snapshot %s of %s's %s disk into %s", req.Name, t.VM.Name, d.Disk, staging))
		if _, err = h.FlattenVolume(ctx, d.Pool, SnapVolume(d.Volume, req.Name), d.Pool, staging); err != nil {
			break
		}
	}
	if err == nil {
		return nil
	}
	return dropStaged(ctx, h, t, err)
}

// dropStaged deletes the staged copies after a revert failed with err
// before its commit, and says so in the error it returns.
func dropStaged(ctx context.Context, h Host, t *Target, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, d := range t.Disks {
		if derr := h.RemoveVolume(cctx, d.Pool, StagingVolume(d.Volume)); derr != nil {
			errs = append(errs, derr)
		}
	}
	if derr := errors.Join(errs...); derr != nil {
		return fmt.Errorf("%w; deleting the staged copies failed too: %v", err, derr)
	}
	return fmt.Errorf("%w (the VM's disks are unchanged; the staged copies were deleted)", err)
}

// restartAfter starts a VM that was running again after a revert failed
// before its commit, and adds to err what happened.
func restartAfter(ctx context.Context, h Host, res *RevertResult, err error) error {
	if !res.WasRunning {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if serr := h.StartDomain(cctx, res.Target.VM); serr != nil {
		return fmt.Errorf("%w; starting the VM again failed too: %v", err, serr)
	}
	return fmt.Errorf("%w; the VM was started again on its unchanged disks", err)
}
