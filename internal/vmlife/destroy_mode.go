package vmlife

import (
	"fmt"
	"strings"
	"time"
)

// DestroyMode says how destroy stops a running guest.
type DestroyMode string

const (
	// DestroyAuto asks for a clean shutdown only when something the guest
	// writes outlives the VM, and powers it off at once otherwise.
	DestroyAuto DestroyMode = "auto"
	// DestroyGraceful always asks for a clean shutdown first.
	DestroyGraceful DestroyMode = "graceful"
	// DestroyForce always powers the guest off at once.
	DestroyForce DestroyMode = "force"
)

// DestroyModes lists the modes, the default first.
var DestroyModes = []DestroyMode{DestroyAuto, DestroyGraceful, DestroyForce}

// DestroyGrace is how long a guest being destroyed gets to power off
// cleanly (ACPI) before it is forced off, and why. survivors names what
// outlives the VM and holds data the guest writes (an existing boot volume,
// a writable shared folder): with none, a clean shutdown protects nothing,
// because every disk goes with the VM, so DestroyAuto forces the guest off
// at once instead of waiting up to shutdownTimeout for a guest that may
// ignore the request.
func DestroyGrace(mode DestroyMode, shutdownTimeout time.Duration, survivors []string) (time.Duration, string) {
	switch mode {
	case DestroyForce:
		return 0, "destroy_shutdown is force"
	case DestroyGraceful:
		return shutdownTimeout, "destroy_shutdown is graceful"
	}
	if len(survivors) == 0 {
		return 0, "every disk goes with the VM"
	}
	return shutdownTimeout, fmt.Sprintf("data outlives the VM (%s)", strings.Join(survivors, ", "))
}
