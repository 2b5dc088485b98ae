package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// Doomed is a VM to delete.
type Doomed struct {
	Ref hostapi.DomainRef
	// Overlay is the overlay volume the state records, if any.
	Overlay *domain.VolumeRef
	// Protected are volumes never to delete whatever the domain's metadata
	// says: the base image, an existing boot volume.
	Protected []domain.VolumeRef
	// Seed is the kohaku_seed's volume the VM boots with: never deleted,
	// unless the domain's metadata records it as the VM's own copy, which
	// only a move that brought it to this host writes.
	Seed *domain.VolumeRef
	// Mode and ShutdownTimeout decide how long a running guest gets to
	// power off before it is forced (see DestroyGrace).
	Mode            DestroyMode
	ShutdownTimeout time.Duration
}

// Deleted says how a delete went, beyond success.
type Deleted struct {
	// Forced is set when the guest did not power off within Grace.
	Forced bool
	// Grace is how long the guest was given to power off cleanly, and Why
	// says why (0 when the domain was not there to stop).
	Grace time.Duration
	Why   string
	// Waited is how long the stop could wait: Grace, or less when the
	// operation's timeout left less (StopGrace).
	Waited time.Duration
	// Spared are owned volumes left alone because they are protected.
	Spared []domain.VolumeRef
}

// Delete stops the domain (at once, or ACPI first and forced off after the
// grace DestroyGrace gives for what outlives it), undefines it with its
// NVRAM and deletes the volumes it owns, never a protected one. A domain
// already gone leaves only its volumes to delete. Failures are *StepError.
func Delete(ctx context.Context, h Host, d Doomed) (*Deleted, error) {
	out := &Deleted{}
	// Undefine and volume deletes are not abandoned on interrupt, but no
	// call outlives the delete timeout.
	steady, cancel := bounded(ctx)
	defer cancel()
	var owned []domain.VolumeRef
	protected := d.Protected
	if d.Seed != nil {
		protected = append(slices.Clone(protected), *d.Seed)
	}
	if d.Overlay != nil {
		owned = append(owned, *d.Overlay)
	}
	if d.Ref.UUID != "" {
		view, err := Read(ctx, h, d.Ref, d.Overlay, false)
		switch {
		case errors.Is(err, hostapi.ErrDomainNotFound):
			// Already gone: only its volumes may be left.
		case err != nil:
			return out, stepErr("read the domain", err)
		default:
			for _, v := range view.Owned {
				if !ContainsVolume(owned, v) {
					owned = append(owned, v)
				}
			}
			if d.Seed != nil && view.Observed.Metadata != nil && ContainsVolume(view.Observed.Metadata.Owner.Volumes, *d.Seed) {
				protected = d.Protected // the seed's copy a move brought: the VM's own
			}
			out.Grace, out.Why = DestroyGrace(d.Mode, d.ShutdownTimeout, Survivors(view.Observed.Spec, owned))
			out.Waited = StopGrace(ctx, out.Grace)
			how, err := h.StopDomain(ctx, d.Ref, out.Grace)
			if err != nil {
				return out, stepErr("shut down", err)
			}
			out.Forced = how == hostapi.StopForced && out.Grace > 0
			if err := h.UndefineDomain(steady, d.Ref); err != nil {
				return out, stepErr("undefine", err)
			}
		}
	}
	for _, v := range owned {
		if ContainsVolume(protected, v) {
			out.Spared = append(out.Spared, v)
			continue
		}
		if err := h.RemoveVolume(steady, v.Pool, v.Volume); err != nil {
			return out, stepErr("delete the overlay volume", fmt.Errorf("%w. The domain is gone; delete the volume by hand (virsh vol-delete --pool %s %s)", err, v.Pool, v.Volume))
		}
	}
	return out, nil
}

// StopGrace is how long a stop (virt.StopDomain) will wait for the guest
// under ctx: grace, or less when ctx ends sooner.
func StopGrace(ctx context.Context, grace time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - hostapi.StopForceMargin; left < grace {
			return max(left, 0)
		}
	}
	return grace
}

// ForcedOffNote tells the user that a guest was forced off because it did
// not power off within grace of the shutdown request (Deleted.Forced,
// Change.ForcedOff), and what that means.
func ForcedOffNote(grace, waited time.Duration) string {
	if waited < grace {
		return fmt.Sprintf("The guest did not power off within %s of the shutdown request (ACPI power button, or "+
			"the guest agent when it answers): what was left of this operation's timeout, which is shorter than "+
			"shutdown_timeout (%s). So it was forced off like a pulled plug: whatever it had not written to disk "+
			"is lost. To give the guest its whole shutdown_timeout, raise the VM's timeouts (update, delete) above it.",
			waited.Round(time.Second), grace)
	}
	return fmt.Sprintf("The guest did not power off within shutdown_timeout (%s) of the shutdown request "+
		"(ACPI power button, or the guest agent when it answers), so it was forced off like a pulled plug: "+
		"whatever it had not written to disk is lost. A guest powers off on the request when something in it "+
		"handles the power button (systemd-logind, which needs dbus, as in Debian's cloud images; or acpid); "+
		"a guest that is still booting misses it. If the guest needs longer, raise shutdown_timeout.", grace)
}

// Survivors names what a domain's guest writes that outlives the domain:
// a boot disk or data disk it does not own (an existing or kept volume, or
// a file) and every writable shared folder. The seed is read-only and the base image sits
// under an overlay the guest never writes through, so neither counts.
func Survivors(spec domain.Spec, owned []domain.VolumeRef) []string {
	var out []string
	if d := spec.Disk; d != nil {
		switch {
		case d.Volume != "" && !ContainsVolume(owned, domain.VolumeRef{Pool: d.Pool, Volume: d.Volume}):
			out = append(out, "boot volume "+d.Pool+"/"+d.Volume)
		case d.Volume == "" && d.Path != "":
			out = append(out, "boot disk "+d.Path)
		}
	}
	for _, d := range spec.DataDisks {
		switch {
		case d.Volume != "" && !ContainsVolume(owned, domain.VolumeRef{Pool: d.Pool, Volume: d.Volume}):
			out = append(out, "data volume "+d.Pool+"/"+d.Volume)
		case d.Volume == "" && d.Path != "":
			out = append(out, "data disk "+d.Path)
		}
	}
	for _, f := range spec.SharedFolders {
		if !f.ReadOnly {
			out = append(out, "shared folder "+f.Source)
		}
	}
	return out
}
