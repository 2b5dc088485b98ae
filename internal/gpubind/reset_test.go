package gpubind

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// ResetNodeDevice records the reset, as libvirt's would be asked for.
func (h *fakeHost) ResetNodeDevice(_ context.Context, name string) error {
	h.ops = append(h.ops, "reset "+name)
	return h.fail["reset "+name]
}

// boundFakeHost is the stand-in GPU pair with both functions on vfio-pci.
func boundFakeHost(t *testing.T) *fakeHost {
	h := newFakeHost(t)
	h.driver[gpu], h.driver[audio] = "vfio-pci", "vfio-pci"
	return h
}

func TestReset(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	var lines []string
	done, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.ops, ","); got != "reset "+gpu+",reset "+audio {
		t.Errorf("operations %s, want a reset of each function of the group", got)
	}
	if joinAddresses(done) != "0000:03:00.0, 0000:03:00.1" {
		t.Errorf("reset %v", done)
	}
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "Resetting 0000:03:00.0 (") || lines[2] != "Reset 0000:03:00.0, 0000:03:00.1" {
		t.Errorf("progress lines %q", lines)
	}
	// Asked by the audio function's address, the whole group is reset too.
	h.ops = nil
	if _, err := Reset(context.Background(), h, mustAddr("0000:03:00.1"), nil); err != nil || len(h.ops) != 2 {
		t.Errorf("reset by the audio function: %v, operations %v", err, h.ops)
	}
}

// A running domain holding either function refuses the reset, naming the
// domain, and nothing is reset.
func TestReset_inUse(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.users = map[string][]string{"0000:03:00.1": {"web-1"}}
	_, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil)
	var inUse *ResetInUseError
	if !errors.As(err, &inUse) || !strings.Contains(err.Error(), "0000:03:00.1 by web-1") || !strings.Contains(err.Error(), "Stop the domain first") {
		t.Errorf("got %v, want a refusal naming web-1", err)
	}
	if len(h.ops) != 0 {
		t.Errorf("operations %v after a refusal", h.ops)
	}
}

// A group with a function on a host driver is the host's: refused, naming
// the function and its driver.
func TestReset_notBound(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.driver[audio] = "snd_hda_intel"
	_, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil)
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "0000:03:00.1") || !strings.Contains(err.Error(), "driver snd_hda_intel") {
		t.Errorf("got %v", err)
	}
	if len(h.ops) != 0 {
		t.Errorf("operations %v after a refusal", h.ops)
	}
	if _, err := Reset(context.Background(), h, mustAddr("0000:09:00.0"), nil); err == nil || !strings.Contains(err.Error(), "has no PCI function 0000:09:00.0") {
		t.Errorf("a function the host lacks: %v", err)
	}
}

// A reset libvirt refuses says what was reset before it; asking the host
// which domains use the functions failing resets nothing.
func TestReset_failures(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.fail["reset "+audio] = errors.New("no reset method")
	done, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil)
	if err == nil || !strings.Contains(err.Error(), "resetting 0000:03:00.1: no reset method (reset before it: 0000:03:00.0)") || len(done) != 1 {
		t.Errorf("got %v, %v", done, err)
	}
	h = boundFakeHost(t)
	h.fail["users"] = errors.New("connection lost")
	if _, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil); err == nil || !strings.Contains(err.Error(), "connection lost") || len(h.ops) != 0 {
		t.Errorf("got %v, operations %v", err, h.ops)
	}
}
