package ready

import (
	"context"
	"errors"
	"time"
)

// DomainStater tells a domain's run state, as libvirt names it.
type DomainStater interface {
	DomainState(ctx context.Context, domain string) (string, error)
}

// storyTimeout bounds asking the host for the story of a failed wait, which
// runs after the wait's own deadline.
const storyTimeout = 30 * time.Second

// Story fills a failed wait (an error wrapping *WaitError; any other error
// is returned as it is) with the whole story: which VM, the URL the guest
// should have reached, whether the domain still runs (asked of h, within
// its own deadline), and, when the host is this machine (local), the last
// lines of the serial console log.
func Story(ctx context.Context, err error, h DomainStater, vm, url, serialLog string, local bool) error {
	var we *WaitError
	if !errors.As(err, &we) {
		return err
	}
	steady, cancel := context.WithTimeout(context.WithoutCancel(ctx), storyTimeout)
	defer cancel()
	we.VM, we.URL, we.SerialLog = vm, url, serialLog
	if st, serr := h.DomainState(steady, vm); serr == nil {
		we.DomainState = st
	}
	if local {
		we.SerialTail = Tail(serialLog, 15)
	}
	return err
}
