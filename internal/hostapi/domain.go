package hostapi

import (
	"fmt"
	"time"
)

// DomainRef names a domain by UUID; Name is used in messages only. libvirt
// finds a domain by the UUID of the handle, so calls through a DomainRef need
// no lookup round trip.
type DomainRef struct {
	UUID string
	Name string
}

func (r DomainRef) String() string {
	if r.Name == "" {
		return r.UUID
	}
	return fmt.Sprintf("%s (%s)", r.Name, r.UUID)
}

// DomainStatus is a domain as Read needs it.
type DomainStatus struct {
	DomainRef
	// XML is the persistent (inactive) definition: what was defined, with what
	// libvirt filled in (MACs, addresses, controllers).
	XML string
	// State is libvirt's run state; Active is true for every state but shut off.
	State     DomainState
	Active    bool
	Autostart bool
}

// DomainState is libvirt's run state of a domain (virDomainState: 1 running,
// 5 shut off, ...), as internal/virt reads it.
type DomainState int32

// DomainSummary is one entry of ListDomains.
type DomainSummary struct {
	DomainRef
	Active bool
}

// StopResult says how a domain stopped.
type StopResult int

const (
	// StopNotRunning means the domain was already shut off.
	StopNotRunning StopResult = iota
	// StopGraceful means the guest powered off after the ACPI request.
	StopGraceful
	// StopForced means the grace period ran out and the domain was forced off.
	StopForced
)

// StopForceMargin is what StopDomain keeps of its context's time for the
// forced stop: the wait for the guest ends that long before the deadline.
const StopForceMargin = 10 * time.Second

// PowerVia is how a guest is asked to shut down or reboot.
type PowerVia string

const (
	// ViaGuestAgent asks the QEMU guest agent in the guest; it fails at
	// once when the domain has no agent channel or the agent does not
	// answer.
	ViaGuestAgent PowerVia = "guest agent"
	// ViaACPI presses the virtual power button; a guest with nothing that
	// handles the button ignores it.
	ViaACPI PowerVia = "ACPI"
)
