package snapshot

import (
	"context"
	"errors"
	"fmt"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// ConsistencyPoweredOff is a snapshot of a VM that was shut off while its
// disks were copied: consistent as the guest left them when it powered
// off, with no guest agent involved.
const ConsistencyPoweredOff = "powered_off"

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
	Digest        virt.ImageDigest
}

// Snapshot is a snapshot as made.
type Snapshot struct {
	VM          virt.DomainRef
	Name        string
	Copies      []Copy
	Consistency string
}

// StepError is a step that failed. A snapshot that fails leaves no volume
// behind, unless the error says it could not delete one.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// Take copies every disk of a shut-off VM into a standalone qcow2 volume
// beside it (SnapVolume), with its base image merged in, and reads each
// copy back for its digest. A running VM is refused (ErrRunning), as is one
// with a disk Kohaku did not make (ErrNotSnapshottable). A volume of a
// copy's name that exists already is never overwritten. A failure, or a VM
// started while its disks were copied, deletes the copies made.
func Take(ctx context.Context, h Host, req TakeRequest) (*Snapshot, error) {
	if err := CheckName(req.Name); err != nil {
		return nil, &StepError{Step: "check the name", Err: err}
	}
	t, err := Find(ctx, h, req.VM)
	if err != nil {
		return nil, &StepError{Step: "find the VM's disks", Err: err}
	}
	if t.Running() {
		return nil, &StepError{Step: "check the VM is shut off", Err: runningErr(t)}
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
		var exists *virt.VolumeExistsError
		if errors.As(err, &exists) {
			return fail("copy the "+d.Disk+" disk", fmt.Errorf("the volume %s/%s exists already, and Kohaku never overwrites "+
				"it: another snapshot named %q of this disk, or one left behind. Choose another name, or delete it "+
				"(virsh vol-delete --pool %s %s) if it is stale", d.Pool, name, req.Name, d.Pool, name))
		}
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

func runningErr(t *Target) error {
	return fmt.Errorf("%w: %s is %s. Kohaku snapshots a VM that is shut off, whose disks hold what the guest wrote "+
		"before it powered off: set its running = false (and apply) first, or shut it down with the kohaku_vm_power "+
		"action. Snapshots of running VMs (through libvirt's backup API, frozen through the guest agent) are not "+
		"supported yet", ErrRunning, t.VM.Name, t.State)
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
		if err := h.DeleteVolume(ctx, c.Pool, c.Snapshot); err != nil {
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
	out := &Snapshot{VM: t.VM, Name: name, Consistency: ConsistencyPoweredOff}
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
