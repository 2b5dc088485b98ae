package gpubind

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeQuarantines holds quarantine markers by device.
type fakeQuarantines struct {
	marked map[vfio.Address]bool
	fail   error
}

func (q *fakeQuarantines) ClearQuarantine(_ context.Context, a vfio.Address) (bool, error) {
	if q.fail != nil {
		return false, q.fail
	}
	had := q.marked[a]
	delete(q.marked, a)
	return had, nil
}

// Asked by the audio function's address, a reset that succeeds clears the
// marker the GPU's lead function carries, and says so.
func TestResetAndReturn_clearsTheGroupsQuarantineAfterTheReset(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	q := &fakeQuarantines{marked: map[vfio.Address]bool{mustAddr("0000:03:00.0"): true, mustAddr("0000:09:00.0"): true}}
	var lines []string
	done, cleared, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.1"), func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if joinAddresses(done) != "0000:03:00.0" || !slices.Equal(cleared, []vfio.Address{mustAddr("0000:03:00.0")}) {
		t.Errorf("reset %v, cleared %v", done, cleared)
	}
	if !q.marked[mustAddr("0000:09:00.0")] || len(q.marked) != 1 {
		t.Errorf("markers left %v, want only another group's", q.marked)
	}
	if last := lines[len(lines)-1]; last != "Cleared the quarantine of 0000:03:00.0: placement may hand it out again" {
		t.Errorf("progress %q", lines)
	}
	// nothing quarantined: the reset alone, nothing said about quarantine
	lines = nil
	if _, cleared, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.0"), func(l string) { lines = append(lines, l) }); err != nil || len(cleared) != 0 ||
		strings.Contains(strings.Join(lines, "\n"), "quarantine") {
		t.Errorf("second reset: cleared %v, %v, lines %q", cleared, err, lines)
	}
}

func TestResetAndReturn_aFailedResetClearsNothing(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.fail["reset 0000:03:00.0"] = fmt.Errorf("0000:03:00.0: %w", virt.ErrResetUnusable)
	q := &fakeQuarantines{marked: map[vfio.Address]bool{mustAddr("0000:03:00.0"): true}}
	if _, cleared, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.0"), nil); !errors.Is(err, virt.ErrResetUnusable) || len(cleared) != 0 || !q.marked[mustAddr("0000:03:00.0")] {
		t.Errorf("cleared %v, %v, markers %v", cleared, err, q.marked)
	}
	h = boundFakeHost(t)
	q.fail = errors.New("pool gone")
	if _, _, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.0"), nil); err == nil || !strings.Contains(err.Error(), "the reset succeeded, but returning 0000:03:00.0 to placement failed: pool gone") {
		t.Errorf("a marker that cannot be cleared: %v", err)
	}
}

func TestGroupResetter_namesTheGPU(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.methods = nil
	err := GroupResetter{Host: h}.ResetGPU(context.Background(), mustAddr("0000:03:00.0"))
	if !errors.Is(err, ErrNoResetMethod) || !strings.HasPrefix(err.Error(), "resetting 0000:03:00.0: ") {
		t.Errorf("got %v", err)
	}
	if err := (GroupResetter{Host: boundFakeHost(t)}).ResetGPU(context.Background(), mustAddr("0000:03:00.0")); err != nil {
		t.Error(err)
	}
}
