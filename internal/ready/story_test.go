package ready

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type stater struct {
	state string
	err   error
	asked int
}

func (s *stater) DomainState(context.Context, string) (string, error) {
	s.asked++
	return s.state, s.err
}

func TestStoryTellsTheWholeStory(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "vm-serial.log")
	if err := os.WriteFile(log, []byte("boot\ncloud-init: running modules\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the wait's own deadline is over; the story is still told
	h := &stater{state: "running"}
	err := Story(ctx, &WaitError{Mode: ModePhoneHome, Err: context.DeadlineExceeded}, h, "web-1",
		"http://10.0.2.2:8787/v1/phone-home/secret-token", log, true)
	msg := err.Error()
	for _, want := range []string{"VM web-1 did not report ready", "phone-home/<token>", "The domain is running.", "cloud-init: running modules"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the story does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "secret-token") {
		t.Errorf("the story leaks the token:\n%s", msg)
	}
	// A remote host's log is not on this machine: it is named, not read.
	err = Story(context.Background(), &WaitError{Mode: ModeChannel, Err: context.DeadlineExceeded}, &stater{err: errors.New("gone")}, "web-1", "", log, false)
	if msg := err.Error(); strings.Contains(msg, "running modules") || !strings.Contains(msg, "The serial console log is "+log) || strings.Contains(msg, "The domain is") {
		t.Errorf("remote story:\n%s", msg)
	}
	// Other errors pass through untouched, without asking the host.
	h = &stater{}
	plain := errors.New("cloud-init failed")
	if got := Story(context.Background(), plain, h, "web-1", "", log, true); got != plain || h.asked != 0 { //nolint:errorlint // untouched means the very value, not one that wraps it
		t.Errorf("got %v, host asked %d times", got, h.asked)
	}
}
