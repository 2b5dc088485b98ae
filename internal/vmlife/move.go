package vmlife

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// MoveHost is what a cold move needs from each of its two hosts: a VM's
// life, and volumes as byte streams. *hostapi.Client is one.
type MoveHost interface {
	Host
	VolumeLength(ctx context.Context, pool, name string) (int64, error)
	StreamVolume(ctx context.Context, pool, name string, length int64, w io.Writer) error
	UploadImage(ctx context.Context, up hostapi.ImageUpload) (*hostapi.VolumeDetail, error)
	FlattenVolume(ctx context.Context, srcPool, srcName, pool, name string) (*hostapi.VolumeDetail, error)
	HostInfo(ctx context.Context) (*hostapi.HostInfo, error)
}

// MovedVolume is a volume a move brings to the target, under the same pool
// and name (the domain's XML names its disks by pool and volume, so it
// needs no rewriting).
type MovedVolume struct {
	Ref domain.VolumeRef
	// Shared is a volume the VM uses but may not own (its seed, which a
	// kohaku_seed owns): copied only when the target lacks it, and then
	// recorded in the target's metadata as the VM's own copy, so the VM's
	// delete removes it there.
	Shared bool
	// OwnCopy marks a shared volume that is the VM's own copy on the
	// source (an earlier move brought it there): deleted from the source
	// after the move like the VM's other volumes. A shared volume without
	// it (the kohaku_seed's own) is never deleted from the source.
	OwnCopy bool
}

// Moving is a VM to move cold from one host to another.
type Moving struct {
	Ref hostapi.DomainRef
	// Overlay is the boot disk's overlay the state records, if any.
	Overlay *domain.VolumeRef
	// Volumes, when nil, are read from the domain (MovedVolumes).
	Volumes []MovedVolume
	// Running and Autostart are what the VM should be on the target.
	Running, Autostart bool
	// Grace is how long the guest gets to power off cleanly before it is
	// forced off (shutdown_timeout).
	Grace time.Duration
	// Wait, when set, waits for the started guest on the target, as after a
	// reboot.
	Wait func(ctx context.Context, h Host, ref hostapi.DomainRef) error
	// ForcedOff is told when the guest did not power off within Grace.
	ForcedOff func(waited time.Duration)
	// Progress is told each step as it starts.
	Progress func(step string)
}

// MoveError is a move that failed at Step. OnTarget says which host holds
// the VM now: the target once its domain is defined there (every volume
// was verified before), the source until then. Either way the VM is whole
// on that host, and running the move again finishes it.
type MoveError struct {
	Step     string
	Err      error
	OnTarget bool
}

func (e *MoveError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *MoveError) Unwrap() error { return e.Err }

// The steps of a move, as MoveError and Progress name them.
const (
	MoveStepFind     = "find the VM"
	MoveStepShutdown = "shut down on the source"
	MoveStepCopy     = "copy the volumes"
	MoveStepDefine   = "define on the target"
	MoveStepCleanup  = "remove from the source"
	MoveStepStart    = "start on the target"
	MoveStepWait     = "wait for the guest on the target"
)

// flatSuffix names the standalone copy of an overlay made on the source
// for the copy.
const flatSuffix = ".kohaku-move"

// Move moves a VM cold from src to dst: a clean shutdown on the source,
// every volume copied and verified (an overlay flattened first, so the
// target needs no base image), the domain defined on the target from the
// source's own XML (same UUID, name, MACs and everything Kohaku does not
// model), started there when it should run, and only then undefined and its
// volumes deleted on the source.
//
// It is safe to interrupt anywhere and to run again: while the domain is
// not defined on the target the source is the truth, and volumes left on
// the target by an earlier try are deleted and copied anew; once it is
// defined on the target (which happens only after every volume verified),
// the target is the truth and the source is only cleanup.
func Move(ctx context.Context, src, dst MoveHost, m Moving) (*View, error) {
	progress := func(step string) {
		if m.Progress != nil {
			m.Progress(step)
		}
	}
	progress(MoveStepFind)
	if err := distinctHosts(ctx, src, dst); err != nil {
		return nil, &MoveError{Step: MoveStepFind, Err: err}
	}
	tst, err := dst.ReadDomain(ctx, m.Ref)
	switch {
	case err == nil:
		// An earlier try got as far as the define: finish it.
		st, serr := src.ReadDomain(ctx, m.Ref)
		if serr == nil && st.Active {
			return nil, &MoveError{Step: MoveStepFind, OnTarget: true, Err: fmt.Errorf("domain %s is defined on both hosts "+
				"and runs on the source: an earlier move defined it on the target, and something started it on the "+
				"source since. Kohaku will not choose which copy's data to keep: shut down the one to drop, "+
				"then apply again", m.Ref)}
		}
		if serr != nil && !errors.Is(serr, hostapi.ErrDomainNotFound) {
			return nil, &MoveError{Step: MoveStepFind, OnTarget: true, Err: fmt.Errorf("reading the source: %w", serr)}
		}
		if m.Volumes == nil {
			// What the VM owned on the source is the source's metadata's
			// to say; with the source domain gone, its shared volumes are
			// taken as not its own, so the kohaku_seed's are never deleted.
			xml, ownCopies := tst.XML, false
			if serr == nil {
				xml, ownCopies = st.XML, true
			}
			if m.Volumes, err = MovedVolumes(xml, m.Overlay); err != nil {
				return nil, &MoveError{Step: MoveStepFind, OnTarget: true, Err: err}
			}
			for i := range m.Volumes {
				m.Volumes[i].OwnCopy = m.Volumes[i].OwnCopy && ownCopies
			}
		}
		return finishMove(ctx, src, dst, m, progress)
	case !errors.Is(err, hostapi.ErrDomainNotFound):
		return nil, &MoveError{Step: MoveStepFind, Err: fmt.Errorf("reading the target: %w", err)}
	}
	st, err := src.ReadDomain(ctx, m.Ref)
	if err != nil {
		return nil, &MoveError{Step: MoveStepFind, Err: fmt.Errorf("reading the source: %w", err)}
	}
	if err := checkMovable(st.XML); err != nil {
		return nil, &MoveError{Step: MoveStepFind, Err: err}
	}
	if m.Volumes == nil {
		if m.Volumes, err = MovedVolumes(st.XML, m.Overlay); err != nil {
			return nil, &MoveError{Step: MoveStepFind, Err: err}
		}
	}

	progress(MoveStepShutdown)
	if st.Active {
		how, err := src.StopDomain(ctx, m.Ref, m.Grace)
		if err != nil {
			return nil, &MoveError{Step: MoveStepShutdown, Err: err}
		}
		if how == hostapi.StopForced && m.Grace > 0 && m.ForcedOff != nil {
			m.ForcedOff(StopGrace(ctx, m.Grace))
		}
	}

	progress(MoveStepCopy)
	obs, err := domain.Parse(st.XML)
	if err != nil {
		return nil, &MoveError{Step: MoveStepCopy, Err: fmt.Errorf("parsing the domain's XML: %w", err)}
	}
	var owned []domain.VolumeRef
	if obs.Metadata != nil {
		owned = obs.Metadata.Owner.Volumes
	}
	for _, v := range m.Volumes {
		copied, err := moveVolume(ctx, src, dst, v)
		if err != nil {
			return nil, &MoveError{Step: MoveStepCopy, Err: err}
		}
		if v.Shared {
			// The VM owns the copy it brought; one the target had is
			// someone else's (a kohaku_seed made there).
			owned = slices.DeleteFunc(slices.Clone(owned), func(o domain.VolumeRef) bool { return o == v.Ref })
			if copied {
				owned = append(owned, v.Ref)
			}
		}
	}
	xml := st.XML
	if obs.Metadata == nil || !slices.Equal(owned, obs.Metadata.Owner.Volumes) {
		if xml, err = domain.SetOwnedVolumes(xml, owned); err != nil {
			return nil, &MoveError{Step: MoveStepCopy, Err: fmt.Errorf("recording the volumes the VM owns on the target: %w", err)}
		}
	}

	progress(MoveStepDefine)
	ref, err := dst.DefineDomain(ctx, m.Ref.Name, xml)
	if err != nil {
		return nil, &MoveError{Step: MoveStepDefine, Err: err}
	}
	if ref.UUID != m.Ref.UUID {
		// libvirt keeps the XML's UUID; another means the XML was not ours.
		return nil, &MoveError{Step: MoveStepDefine, OnTarget: true, Err: fmt.Errorf("the target defined %s with UUID %s, not %s", m.Ref.Name, ref.UUID, m.Ref.UUID)}
	}
	return finishMove(ctx, src, dst, m, progress)
}

// finishMove runs the steps after the define, the target being the truth:
// the source's domain and volumes go first, so that whatever fails after
// (a start the target refuses, a guest that does not report) leaves the VM
// whole on the target alone, where the next apply's ordinary update starts
// it and sets its autostart; then autostart and start there, and the wait.
func finishMove(ctx context.Context, src, dst MoveHost, m Moving, progress func(string)) (*View, error) {
	fail := func(step string, err error) (*View, error) {
		return nil, &MoveError{Step: step, Err: err, OnTarget: true}
	}
	progress(MoveStepCleanup)
	steady, cancel := bounded(ctx)
	defer cancel()
	switch _, err := src.ReadDomain(ctx, m.Ref); {
	case err == nil:
		// Shut off (Move refuses a source that runs beside a target).
		if err := src.UndefineDomain(steady, m.Ref); err != nil {
			return fail(MoveStepCleanup, fmt.Errorf("%w. The VM is defined on the target; undefine the old copy by hand "+
				"(virsh undefine --nvram %s) and delete its volumes there", err, m.Ref.Name))
		}
	case !errors.Is(err, hostapi.ErrDomainNotFound):
		return fail(MoveStepCleanup, err)
	}
	for _, v := range m.Volumes {
		if v.Shared && !v.OwnCopy {
			continue
		}
		for _, name := range []string{v.Ref.Volume + flatSuffix, v.Ref.Volume} {
			if err := src.RemoveVolume(steady, v.Ref.Pool, name); err != nil {
				return fail(MoveStepCleanup, fmt.Errorf("%w. The VM is defined on the target; delete the volume by hand (virsh vol-delete --pool %s %s)", err, v.Ref.Pool, name))
			}
		}
	}

	progress(MoveStepStart)
	st, err := dst.ReadDomain(ctx, m.Ref)
	if err != nil {
		return fail(MoveStepStart, err)
	}
	if st.Autostart != m.Autostart {
		if err := dst.SetAutostart(ctx, m.Ref, m.Autostart); err != nil {
			return fail(MoveStepStart, err)
		}
	}
	if m.Running && !st.Active {
		if err := dst.StartDomain(ctx, m.Ref); err != nil {
			return fail(MoveStepStart, err)
		}
		if m.Wait != nil {
			if err := m.Wait(ctx, dst, m.Ref); err != nil {
				return fail(MoveStepWait, err)
			}
		}
	}
	view, err := Read(ctx, dst, m.Ref, nil, false)
	if err != nil {
		return fail(MoveStepStart, fmt.Errorf("reading the moved VM: %w", err))
	}
	return view, nil
}

// distinctHosts refuses a move between two ways to reach one libvirt host
// (a unix socket and qemu+tcp, say): the target's volumes would be the
// source's, and clearing the target's leftovers would delete them.
func distinctHosts(ctx context.Context, src, dst MoveHost) error {
	a, err := src.HostInfo(ctx)
	if err != nil {
		return fmt.Errorf("reading the source host: %w", err)
	}
	b, err := dst.HostInfo(ctx)
	if err != nil {
		return fmt.Errorf("reading the target host: %w", err)
	}
	if (a.UUID != "" && a.UUID == b.UUID) || (a.UUID == "" && a.Hostname == b.Hostname) {
		return fmt.Errorf("the old and the new host are the same libvirt host (%s, UUID %s) reached two ways: "+
			"there is nothing to move. Set host back, or point the two hosts map entries at different hosts", a.Hostname, a.UUID)
	}
	return nil
}

// moveVolume brings one volume to the target: whatever an earlier try left
// there is deleted, an overlay is flattened on the source into a
// standalone copy, and the copy is verified (copyVerified). copied is
// false for a shared volume the target already had.
func moveVolume(ctx context.Context, src, dst MoveHost, v MovedVolume) (copied bool, err error) {
	pool, name := v.Ref.Pool, v.Ref.Volume
	if v.Shared {
		switch _, err := dst.VolumeInfo(ctx, pool, name); {
		case err == nil:
			return false, nil // the target has its own (a kohaku_seed made there)
		case !errors.Is(err, hostapi.ErrNotFound):
			return false, fmt.Errorf("looking for %s/%s on the target: %w", pool, name, err)
		}
	} else if err := dst.RemoveVolume(ctx, pool, name); err != nil {
		return false, fmt.Errorf("deleting what an earlier move left of %s/%s on the target: %w", pool, name, err)
	}
	return true, copyVolume(ctx, src, dst, pool, name)
}

// copyVolume copies pool/name from src to dst, flattening an overlay first.
func copyVolume(ctx context.Context, src, dst MoveHost, pool, name string) error {
	info, err := src.VolumeInfo(ctx, pool, name)
	if err != nil {
		return fmt.Errorf("reading %s/%s on the source: %w", pool, name, err)
	}
	from := name
	if info.BackingPath != "" {
		from = name + flatSuffix
		if err := src.RemoveVolume(ctx, pool, from); err != nil {
			return fmt.Errorf("deleting what an earlier move left of %s/%s on the source: %w", pool, from, err)
		}
		if _, err := src.FlattenVolume(ctx, pool, name, pool, from); err != nil {
			return fmt.Errorf("flattening %s/%s (an overlay on %s) for the copy: %w", pool, name, info.BackingPath, err)
		}
	}
	if _, err := copyVerified(ctx, src, pool, from, dst, pool, name); err != nil {
		if from != name {
			steady, cancel := bounded(ctx)
			defer cancel()
			if rerr := src.RemoveVolume(steady, pool, from); rerr != nil {
				return fmt.Errorf("%w (and deleting the flattened copy %s/%s on the source failed: %v)", err, pool, from, rerr)
			}
		}
		return err
	}
	if from != name {
		if err := src.RemoveVolume(ctx, pool, from); err != nil {
			return fmt.Errorf("deleting the flattened copy %s/%s on the source: %w", pool, from, err)
		}
	}
	return nil
}

// MovedVolumes are the volumes a move brings along, read from the
// domain's XML: the overlay (the state's, and what the domain's metadata
// records as owned), the data disks Kohaku made, and the seed, which is
// shared. A disk Kohaku did not make is refused: it is the user's, not
// Kohaku's to move.
func MovedVolumes(xml string, overlay *domain.VolumeRef) ([]MovedVolume, error) {
	obs, err := domain.Parse(xml)
	if err != nil {
		return nil, fmt.Errorf("parsing the domain's XML: %w", err)
	}
	var owned []domain.VolumeRef
	if overlay != nil {
		owned = append(owned, *overlay)
	}
	if obs.Metadata != nil {
		for _, v := range obs.Metadata.Owner.Volumes {
			if !ContainsVolume(owned, v) {
				owned = append(owned, v)
			}
		}
	}
	var out []MovedVolume
	var foreign []string
	need := func(what string, s domain.Source) {
		v := domain.VolumeRef{Pool: s.Pool, Volume: s.Volume}
		switch {
		case s.Volume != "" && ContainsVolume(owned, v):
			out = append(out, MovedVolume{Ref: v})
		case s.Volume != "":
			foreign = append(foreign, what+" "+s.Pool+"/"+s.Volume)
		case s.Path != "":
			foreign = append(foreign, what+" "+s.Path)
		}
	}
	if d := obs.Spec.Disk; d != nil {
		need("boot volume", d.Source)
	}
	for _, d := range obs.Spec.DataDisks {
		need("data volume", d.Source)
	}
	if len(foreign) > 0 {
		return nil, fmt.Errorf("the VM has disks Kohaku did not make (%s), which are not Kohaku's to move: copy them "+
			"to the target host yourself and point the VM at the copies, or replace the VM there "+
			"(host_change = \"replace\")", strings.Join(foreign, ", "))
	}
	if s := obs.Spec.Seed; s != nil && s.Volume != "" {
		v := domain.VolumeRef{Pool: s.Pool, Volume: s.Volume}
		out = append(out, MovedVolume{Ref: v, Shared: true, OwnCopy: ContainsVolume(owned, v)})
	}
	return out, nil
}

// checkMovable refuses a domain whose XML holds what a cold move cannot
// bring along: host devices (GPUs, mdevs) stay bound to the source host.
func checkMovable(xml string) error {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		return fmt.Errorf("parsing the domain's XML: %w", err)
	}
	if d.Devices != nil && len(d.Devices.Hostdevs) > 0 {
		return errors.New("the domain has host devices (GPUs or mdevs) passed through; a move with passthrough " +
			"devices is a later step of Kohaku. Detach them (remove gpus and mdevs from the VM) first, or " +
			"replace the VM on the new host (host_change = \"replace\")")
	}
	return nil
}
