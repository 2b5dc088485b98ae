package gpubind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// ResetPCIFunction records the reset, as the kernel would be asked for it.
func (h *fakeHost) ResetPCIFunction(_ context.Context, addr string) error {
	h.ops = append(h.ops, "reset "+addr)
	return h.fail["reset "+addr]
}

// ReadHostFiles serves the functions' reset_method files from methods.
func (h *fakeHost) ReadHostFiles(_ context.Context, paths []string, _ int64) (map[string][]byte, error) {
	if err := h.fail["files"]; err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, p := range paths {
		for addr, m := range h.methods {
			if p == "/sys/bus/pci/devices/"+addr+"/reset_method" && m != "" {
				out[p] = []byte(m + "\n")
			}
		}
	}
	return out, nil
}

// boundFakeHost is the stand-in GPU pair with both functions on vfio-pci,
// the VGA function with a bus reset and the audio function with none, as
// the nested test host's kernel shows them.
func boundFakeHost(t *testing.T) *fakeHost {
	h := newFakeHost(t)
	h.driver[gpu], h.driver[audio] = "vfio-pci", "vfio-pci"
	h.methods = map[string]string{"0000:03:00.0": "bus"}
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
	if got := strings.Join(h.ops, ","); got != "reset 0000:03:00.0" {
		t.Errorf("operations %s, want a reset of the one function with a reset method", got)
	}
	if vfio.JoinAddresses(done) != "0000:03:00.0" {
		t.Errorf("reset %v", done)
	}
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "Resetting 0000:03:00.0 (") || !strings.HasSuffix(lines[0], "by bus reset") ||
		!strings.Contains(lines[1], "0000:03:00.1") || !strings.Contains(lines[1], "no reset method of its own") || lines[2] != "Reset 0000:03:00.0" {
		t.Errorf("progress lines %q", lines)
	}
	// Asked by the audio function's address, the group is reset the same
	// way; with a method of its own, each function is reset.
	h.ops = nil
	h.methods["0000:03:00.1"] = "flr bus"
	if _, err := Reset(context.Background(), h, mustAddr("0000:03:00.1"), nil); err != nil || strings.Join(h.ops, ",") != "reset 0000:03:00.0,reset 0000:03:00.1" {
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

// Refusals before anything is reset: a function on a host driver (named
// with its driver), a function the host lacks, a group without any reset
// method, a connection that cannot reach the host's kernel.
func TestReset_refusals(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.driver[audio] = "snd_hda_intel"
	_, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil)
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "0000:03:00.1") || !strings.Contains(err.Error(), "driver snd_hda_intel") {
		t.Errorf("a function on its host driver: %v", err)
	}
	if _, err := Reset(context.Background(), h, mustAddr("0000:09:00.0"), nil); err == nil || !strings.Contains(err.Error(), "has no PCI function 0000:09:00.0") {
		t.Errorf("a function the host lacks: %v", err)
	}
	h = boundFakeHost(t)
	h.methods = nil
	if _, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil); !errors.Is(err, ErrNoResetMethod) {
		t.Errorf("no reset method: %v", err)
	}
	h = boundFakeHost(t)
	h.fail["files"] = virt.ErrHostFilesUnsupported
	if _, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil); !errors.Is(err, virt.ErrHostFilesUnsupported) || !strings.Contains(err.Error(), "qemu+ssh://") {
		t.Errorf("a tcp connection: %v", err)
	}
	if len(h.ops) != 0 {
		t.Errorf("operations %v after refusals", h.ops)
	}
}

// A reset the kernel refuses says what was reset before it; asking the
// host which domains use the functions failing resets nothing.
func TestReset_failures(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.methods["0000:03:00.1"] = "pm"
	h.fail["reset 0000:03:00.1"] = os.ErrPermission
	done, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil)
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "(reset before it: 0000:03:00.0)") || len(done) != 1 {
		t.Errorf("got %v, %v", done, err)
	}
	// The nested host's stand-in: a bus reset listed for the VGA function
	// that the kernel cannot use while the audio function shares the bus.
	h = boundFakeHost(t)
	h.fail["reset 0000:03:00.0"] = fmt.Errorf("0000:03:00.0: %w", virt.ErrResetUnusable)
	_, err = Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil)
	if !errors.Is(err, virt.ErrResetUnusable) || !strings.Contains(err.Error(), "could not reset 0000:03:00.0 by bus reset (nothing was reset)") ||
		!strings.Contains(err.Error(), "multi-function device") {
		t.Errorf("an unusable bus reset: %v", err)
	}
	h = boundFakeHost(t)
	h.fail["users"] = errors.New("connection lost")
	if _, err := Reset(context.Background(), h, mustAddr("0000:03:00.0"), nil); err == nil || !strings.Contains(err.Error(), "connection lost") || len(h.ops) != 0 {
		t.Errorf("got %v, operations %v", err, h.ops)
	}
}
