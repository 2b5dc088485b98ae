package hostapi

import (
	"errors"
	"fmt"
)

// ErrNotFound is wrapped by errors about a pool or volume that does not exist.
var ErrNotFound = errors.New("not found")

// Sentinel errors of the domain and overlay-volume operations. Errors that
// wrap them also say which object and what to do.
var (
	ErrDomainNotFound = errors.New("domain not found")
	ErrPoolNotFound   = fmt.Errorf("storage pool %w", ErrNotFound)
	ErrVolumeNotFound = fmt.Errorf("volume %w", ErrNotFound)
)

// OverlayExistsError refuses to reuse a volume the caller did not create.
type OverlayExistsError struct{ Pool, Name string }

func (e *OverlayExistsError) Error() string {
	return fmt.Sprintf("pool %q already has a volume named %q, which this resource did not create; Kohaku never "+
		"reuses or overwrites it. Delete it if it is stale (virsh vol-delete --pool %s %s) or choose another VM "+
		"name", e.Pool, e.Name, e.Pool, e.Name)
}

// ErrAgentUnavailable says the guest agent did not answer (no agent
// channel, the agent not running, or the guest not running).
var ErrAgentUnavailable = errors.New("the guest agent does not answer")

// ErrHostFilesUnsupported is returned by ReadHostFile over transports that
// offer no way to read the host's files (tcp, tls).
var ErrHostFilesUnsupported = errors.New("host files can be read only over local (unix) and SSH connections")

// ErrResetUnusable is wrapped by ResetPCIFunction's error when the kernel
// lists reset methods for a function but none works on it (ENOTTY).
var ErrResetUnusable = errors.New("the kernel found none of its reset methods usable")

// ErrUnsupported is matched (errors.Is) by an error from a host that
// refused a call as not supported by its driver, rather than failing it:
// internal/virt's errors match it where libvirt said so.
var ErrUnsupported = errors.New("not supported by the host's libvirt driver")

// Unsupported reports whether the host refused a call as not supported by
// its driver (an older libvirt, or a driver without the call).
func Unsupported(err error) bool { return errors.Is(err, ErrUnsupported) }
