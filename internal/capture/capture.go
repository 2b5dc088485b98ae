package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// Host is what a capture needs from a libvirt host. *virt.Client is one.
type Host interface {
	vmlife.PowerHost
	ReadDomain(ctx context.Context, ref hostapi.DomainRef) (*hostapi.DomainStatus, error)
	VolumeByPath(ctx context.Context, path string) (pool, name string, err error)
	VolumeInfo(ctx context.Context, pool, name string) (*hostapi.VolumeDetail, error)
	FlattenVolume(ctx context.Context, srcPool, srcName, pool, name string) (*hostapi.VolumeDetail, error)
	HashVolume(ctx context.Context, pool, name string) (hostapi.ImageDigest, error)
	RemoveVolume(ctx context.Context, pool, name string) error
	AgentExec(ctx context.Context, domain, path string, args []string, wait time.Duration) (*hostapi.AgentExecResult, error)
}

// ErrNotCapturable is wrapped by the errors of a VM whose boot disk a
// capture cannot read: no disk, a block device, or a file outside every
// storage pool.
var ErrNotCapturable = errors.New("the VM's boot disk cannot be captured")

// Disk is the boot disk of the VM to capture.
type Disk struct {
	VM         hostapi.DomainRef
	Pool, Name string
	Format     string
	// BackingPath is the base image of an overlay; empty for a standalone volume.
	BackingPath string
	// Agent is whether the domain has a guest agent channel.
	Agent bool
}

// BootDisk finds the volume behind the boot disk (vda) of the VM vm (name
// or UUID). A VM without one, or whose disk is a block device or a file
// that no storage pool holds, is refused with an error wrapping
// ErrNotCapturable: libvirt can only copy and stream volumes of its pools.
func BootDisk(ctx context.Context, h Host, vm string) (*Disk, error) {
	ref, err := h.LookupDomain(ctx, vm)
	if err != nil {
		return nil, fmt.Errorf("finding the VM %s: %w", vm, err)
	}
	st, err := h.ReadDomain(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("reading the VM %s: %w", ref, err)
	}
	obs, err := domain.Parse(st.XML)
	if err != nil {
		return nil, fmt.Errorf("reading the VM %s: %w", ref, err)
	}
	d := &Disk{VM: ref}
	for _, ch := range obs.Channels {
		if ch.Name == domain.GuestAgentChannel {
			d.Agent = true
		}
	}
	var src domain.Source
	if obs.Spec.Disk != nil {
		src = obs.Spec.Disk.Source
	}
	switch {
	case src.IsZero():
		return nil, fmt.Errorf("%w: %s has no boot disk (vda); a VM that boots a kernel alone has nothing to capture", ErrNotCapturable, ref.Name)
	case strings.HasPrefix(src.Path, "/dev/"):
		return nil, fmt.Errorf("%w: %s boots from the block device %s, which is not a volume of a storage pool; "+
			"Kohaku captures volumes only", ErrNotCapturable, ref.Name, src.Path)
	case src.Path != "":
		pool, name, err := h.VolumeByPath(ctx, src.Path)
		if errors.Is(err, hostapi.ErrVolumeNotFound) {
			return nil, fmt.Errorf("%w: %s boots from %s, which no storage pool of the host holds; libvirt can "+
				"copy and read only volumes of its pools (define a pool over its directory to capture it)", ErrNotCapturable, ref.Name, src.Path)
		}
		if err != nil {
			return nil, fmt.Errorf("finding the volume of %s's boot disk %s: %w", ref.Name, src.Path, err)
		}
		d.Pool, d.Name = pool, name
	default:
		d.Pool, d.Name = src.Pool, src.Volume
	}
	vol, err := h.VolumeInfo(ctx, d.Pool, d.Name)
	if err != nil {
		return nil, fmt.Errorf("reading %s's boot volume %s/%s: %w", ref.Name, d.Pool, d.Name, err)
	}
	d.Format, d.BackingPath = vol.Format, vol.BackingPath
	return d, nil
}

// Request is one capture.
type Request struct {
	VM         string // name or UUID
	Pool, Name string // the image volume to make
	// Seal cleans the guest's per-instance identity through the guest
	// agent before the shutdown (see SealScript).
	Seal bool
	// ShutdownTimeout bounds the clean shutdown of a running VM; a VM that
	// is still running then is left running and nothing is captured.
	ShutdownTimeout time.Duration
	// SealTimeout bounds the seal command in the guest.
	SealTimeout time.Duration
	// Progress receives a line per step; nil discards them.
	Progress func(string)
}

// Result is a capture that made its image.
type Result struct {
	Disk   *Disk
	Volume *hostapi.VolumeDetail
	Digest hostapi.ImageDigest
	// Sealed is whether the seal ran in the guest and succeeded.
	Sealed bool
	// SealOutput is what the seal command printed.
	SealOutput string
	// WasRunning is whether the VM ran before the capture; it is started
	// again afterwards.
	WasRunning bool
	// Warnings are for the user: a seal that could not run, a VM that did
	// not start again.
	Warnings []string
}

// StepError is a capture step that failed. The VM is as it was before the
// capture (started again when it was running), unless the error says not.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// NotStoppedError is a running VM that did not power off when asked: it
// was not forced off, and nothing was captured.
type NotStoppedError struct {
	VM      string
	Timeout time.Duration
	Sealed  bool
	Err     error // what the shutdown said
}

func (e *NotStoppedError) Error() string {
	msg := fmt.Sprintf("%s did not power off within %s of being asked, and was not forced off: the VM is still running "+
		"and nothing was captured. Raise shutdown_timeout, or stop the VM yourself (kohaku_vm's running = false) and "+
		"capture it stopped", e.VM, e.Timeout)
	if e.Sealed {
		msg += ". It was sealed already, so its next boot runs cloud-init as a new instance"
	}
	var se *vmlife.StepError
	if errors.As(e.Err, &se) && se.Step == "wait for the guest to power off" {
		return msg
	}
	return msg + " (" + e.Err.Error() + ")"
}

func (e *NotStoppedError) Unwrap() error { return e.Err }

// SealScript is what the seal runs in the guest, as root through the guest
// agent: cloud-init's per-instance state and logs cleaned (`cloud-init
// clean --logs`, with `--seed` and `--machine-id` where the installed
// cloud-init's help lists them: `--machine-id` is in Debian 13's 25.1, not
// in Debian 12's 22.4, where /etc/machine-id is emptied instead), and the
// SSH host keys removed. Both
// come back new on the next boot: systemd makes a machine-id for an empty
// file, and cloud-init, running as for a new instance, makes host keys.
// A guest without cloud-init gets the machine-id and host keys reset only,
// and says so in its output.
const SealScript = `set -u
if command -v cloud-init >/dev/null 2>&1; then
  help=$(cloud-init clean --help 2>&1)
  flags=--logs mid=
  case $help in *--seed*) flags="$flags --seed" ;; esac
  case $help in *--machine-id*) flags="$flags --machine-id" mid=1 ;; esac
  # shellcheck disable=SC2086 # flags are words
  cloud-init clean $flags || exit 1
  echo "kohaku-seal: cloud-init clean $flags"
  if [ -z "$mid" ]; then
    : > /etc/machine-id || exit 1
    echo "kohaku-seal: /etc/machine-id emptied"
  fi
else
  : > /etc/machine-id || exit 1
  echo "kohaku-seal: no cloud-init in the guest; /etc/machine-id emptied"
fi
rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub || exit 1
echo "kohaku-seal: SSH host keys removed"
sync
`

// Capture makes the image req.Pool/req.Name from the boot disk of req.VM:
// seal (when asked and the agent answers), clean shutdown of a running VM
// (never forced: one that does not stop in time is left running and
// nothing is made), flatten, digest read back, and the VM started again
// when it was running, also after a failed step. A failure after the image
// volume was made deletes it.
func Capture(ctx context.Context, h Host, req Request) (*Result, error) {
	say := func(s string) {
		if req.Progress != nil {
			req.Progress(s)
		}
	}
	disk, err := BootDisk(ctx, h, req.VM)
	if err != nil {
		return nil, &StepError{Step: "find the boot disk", Err: err}
	}
	res := &Result{Disk: disk}
	state, err := h.DomainState(ctx, disk.VM.Name)
	if err != nil {
		return nil, &StepError{Step: "read the VM's state", Err: err}
	}
	res.WasRunning = state != "shut off" && state != "crashed"
	if req.Seal {
		if err := seal(ctx, h, req, res, say); err != nil {
			return nil, err
		}
	}
	if res.WasRunning {
		sctx, cancel := context.WithTimeout(ctx, req.ShutdownTimeout)
		_, err := vmlife.RunPower(sctx, h, vmlife.PowerRequest{Domain: disk.VM.UUID, Op: vmlife.PowerShutdown, Progress: say})
		cancel()
		if err != nil {
			return nil, &StepError{Step: "shut the VM down cleanly", Err: &NotStoppedError{VM: disk.VM.Name, Timeout: req.ShutdownTimeout, Sealed: res.Sealed, Err: err}}
		}
	}
	err = flatten(ctx, h, req, res, say)
	if res.WasRunning {
		say("starting " + disk.VM.Name + " again")
		if serr := h.StartDomain(context.WithoutCancel(ctx), disk.VM); serr != nil {
			w := fmt.Sprintf("%s was running before the capture and did not start again: %v. Start it "+
				"(terraform apply, since kohaku_vm's running is true, or virsh start %s).", disk.VM.Name, serr, disk.VM.Name)
			if err != nil {
				return nil, fmt.Errorf("%w; also, %s", err, w)
			}
			res.Warnings = append(res.Warnings, w)
		}
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func seal(ctx context.Context, h Host, req Request, res *Result, say func(string)) error {
	name := res.Disk.VM.Name
	switch {
	case !res.WasRunning:
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s is not running, so it was not sealed through its guest agent: "+
			"clones of this image boot with its machine-id and SSH host keys, and cloud-init may skip their "+
			"first-boot setup. Capture it running with qemu-guest-agent installed, or seal it yourself "+
			"before it stops (cloud-init clean --logs --seed; truncate -s 0 /etc/machine-id; rm -f /etc/ssh/ssh_host_*).", name))
		return nil
	case !res.Disk.Agent:
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s has no guest agent channel, so it was not sealed: clones "+
			"boot with its machine-id and SSH host keys. Give the VM the agent (kohaku_vm's guest agent channel "+
			"and qemu-guest-agent in the guest) or seal it yourself before the capture "+
			"(cloud-init clean --logs --seed; truncate -s 0 /etc/machine-id; rm -f /etc/ssh/ssh_host_*).", name))
		return nil
	}
	say("sealing " + name + " through its guest agent")
	out, err := h.AgentExec(ctx, name, "/bin/sh", []string{"-c", SealScript}, req.SealTimeout)
	if errors.Is(err, hostapi.ErrAgentUnavailable) {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s's guest agent did not answer (%v), so it was not sealed: "+
			"clones boot with its machine-id and SSH host keys. Install and start qemu-guest-agent in the guest, "+
			"or seal it yourself before the capture (cloud-init clean --logs --seed; truncate -s 0 /etc/machine-id; "+
			"rm -f /etc/ssh/ssh_host_*).", name, err))
		return nil
	}
	if err != nil {
		return &StepError{Step: "seal the guest through its agent", Err: fmt.Errorf("%w (nothing was captured; "+
			"an agent that refuses guest-exec needs it allowed, or set seal = false and seal the guest yourself)", err)}
	}
	res.SealOutput = strings.TrimSpace(out.Output)
	if out.ExitCode != 0 {
		return &StepError{Step: "seal the guest through its agent", Err: fmt.Errorf("the seal exited with %d: %s "+
			"(nothing was captured; the VM is still running)", out.ExitCode, res.SealOutput)}
	}
	res.Sealed = true
	say("sealed: " + strings.ReplaceAll(res.SealOutput, "\n", "; "))
	return nil
}

func flatten(ctx context.Context, h Host, req Request, res *Result, say func(string)) error {
	d := res.Disk
	say(fmt.Sprintf("flattening %s/%s into %s/%s", d.Pool, d.Name, req.Pool, req.Name))
	vol, err := h.FlattenVolume(ctx, d.Pool, d.Name, req.Pool, req.Name)
	if err != nil {
		return &StepError{Step: "flatten the boot disk into the image", Err: err}
	}
	say("reading the image back for its digest")
	dg, err := h.HashVolume(ctx, req.Pool, req.Name)
	if err != nil {
		err = fmt.Errorf("%w (nothing was kept)", err)
		if derr := h.RemoveVolume(context.WithoutCancel(ctx), req.Pool, req.Name); derr != nil {
			err = fmt.Errorf("%w; deleting the image volume failed too: %v; delete %s/%s by hand", err, derr, req.Pool, req.Name)
		}
		return &StepError{Step: "read the image back for its digest", Err: err}
	}
	res.Volume, res.Digest = vol, dg
	return nil
}
