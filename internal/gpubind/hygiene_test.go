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
	done, cleared, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.1"), nil, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if vfio.JoinAddresses(done) != "0000:03:00.0" || !slices.Equal(cleared, []vfio.Address{mustAddr("0000:03:00.0")}) {
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
	if _, cleared, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.0"), nil, func(l string) { lines = append(lines, l) }); err != nil || len(cleared) != 0 ||
		strings.Contains(strings.Join(lines, "\n"), "quarantine") {
		t.Errorf("second reset: cleared %v, %v, lines %q", cleared, err, lines)
	}
}

func TestResetAndReturn_aFailedResetClearsNothing(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.fail["reset 0000:03:00.0"] = fmt.Errorf("0000:03:00.0: %w", virt.ErrResetUnusable)
	q := &fakeQuarantines{marked: map[vfio.Address]bool{mustAddr("0000:03:00.0"): true}}
	if _, cleared, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.0"), nil, nil); !errors.Is(err, virt.ErrResetUnusable) || len(cleared) != 0 || !q.marked[mustAddr("0000:03:00.0")] {
		t.Errorf("cleared %v, %v, markers %v", cleared, err, q.marked)
	}
	h = boundFakeHost(t)
	q.fail = errors.New("pool gone")
	if _, _, err := ResetAndReturn(context.Background(), h, q, mustAddr("0000:03:00.0"), nil, nil); err == nil || !strings.Contains(err.Error(), "the reset succeeded, but returning 0000:03:00.0 to placement failed: pool gone") {
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

// The operator's health check runs after a reset that succeeded: a failing
// check keeps a quarantined GPU's marker (and fails the destroy's reset, so
// the GPU is quarantined), a passing one lets the marker be cleared.
func TestHealthCheck_gatesTheReturn(t *testing.T) {
	t.Parallel()
	gpu := mustAddr("0000:03:00.0")
	var checked []vfio.Address
	sick := HealthCheck(func(_ context.Context, a vfio.Address) error {
		checked = append(checked, a)
		return errors.New("ECC errors pending (exit status 1)")
	})
	q := &fakeQuarantines{marked: map[vfio.Address]bool{gpu: true}}
	_, cleared, err := ResetAndReturn(context.Background(), boundFakeHost(t), q, gpu, sick, nil)
	var he *HealthError
	if !errors.As(err, &he) || he.GPU != gpu || len(cleared) != 0 || !q.marked[gpu] || len(checked) != 1 {
		t.Errorf("failing check: %v, cleared %v, markers %v, checked %v", err, cleared, q.marked, checked)
	}
	if err := (GroupResetter{Host: boundFakeHost(t), Health: sick}).ResetGPU(context.Background(), gpu); !errors.As(err, &he) ||
		!strings.Contains(err.Error(), "health check failed for 0000:03:00.0 after its reset: ECC errors pending") {
		t.Errorf("destroy's reset with a failing check: %v", err)
	}
	var lines []string
	well := HealthCheck(func(context.Context, vfio.Address) error { return nil })
	if _, cleared, err := ResetAndReturn(context.Background(), boundFakeHost(t), q, gpu, well, func(l string) { lines = append(lines, l) }); err != nil || len(cleared) != 1 ||
		!strings.Contains(strings.Join(lines, "\n"), "health check passed for 0000:03:00.0") {
		t.Errorf("passing check: %v, cleared %v, lines %q", err, cleared, lines)
	}
	h := boundFakeHost(t)
	h.methods = nil
	checked = nil
	if err := (GroupResetter{Host: h, Health: sick}).ResetGPU(context.Background(), gpu); !errors.Is(err, ErrNoResetMethod) || len(checked) != 0 {
		t.Errorf("no reset: %v, checked %v (the check runs only after a reset)", err, checked)
	}
}
