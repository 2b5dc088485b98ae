package phonehome

import (
	"errors"
	"fmt"
	"strings"
)

// ErrStale means a report is not the current VM's: it names another domain
// (a report captured from a VM this one replaced), names none where it
// must, or comes from a boot whose report was already taken.
var ErrStale = errors.New("stale phone-home report")

// CheckFresh checks that r was written by the domain whose UUID is
// domainUUID. A report naming another domain is refused. A report naming
// none (an older reporter, cloud-init's own phone_home post) is refused
// when required: a signed HTTP report can be replayed from anywhere, while
// a channel or the guest agent reads the domain itself.
func CheckFresh(r *Report, domainUUID string, required bool) error {
	want := strings.ToLower(strings.TrimSpace(domainUUID))
	switch {
	case r.DomainUUID == "" && required:
		return fmt.Errorf("%w: it names no domain (a reporter older than replay protection); "+
			"re-create the seed so its reporter names the VM", ErrStale)
	case r.DomainUUID != "" && r.DomainUUID != want:
		return fmt.Errorf("%w: it was written by domain %s, not this VM's domain %s "+
			"(a report replayed from a VM this one replaced?)", ErrStale, r.DomainUUID, want)
	}
	return nil
}

// bootKey names a report's boot for the once-only check; empty when the
// report does not say.
func bootKey(r *Report) string {
	if r.DomainUUID == "" || r.BootID == "" {
		return ""
	}
	return r.DomainUUID + "/" + r.BootID
}
