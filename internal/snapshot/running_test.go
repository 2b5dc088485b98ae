package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// runningHost is a running VM with the guest agent channel (agent true)
// or without; the guest writes v2 over both disks while the backup job
// copies.
func runningHost(agent bool) *fakeHost {
	h := newHost("running")
	if agent {
		h.xml = strings.Replace(h.xml, "</devices>", agentChan+"</devices>", 1)
	}
	h.duringBackup = func() {
		h.vols["vms/src-root.qcow2"], h.vols["vms/src-data.qcow2"] = "root-v2", "data-v2"
	}
	return h
}

// A running VM whose agent answers: frozen just before the job begins,
// thawed right after, every disk copied as it was then (not as the guest
// wrote on during the copy).
func TestTakeRunningFreezesAroundTheBackupsBeginning(t *testing.T) {
	h := runningHost(true)
	s, err := Take(context.Background(), h, TakeRequest{VM: "src", Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(h.calls, ","), "freeze,backup begin,thaw,backup wait,hash src-root.qcow2.snap-one,hash src-data.qcow2.snap-one"; got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	if s.Consistency != ConsistencyQuiesced || len(s.Warnings) != 0 || h.frozen {
		t.Errorf("consistency %s, warnings %q, still frozen %v", s.Consistency, s.Warnings, h.frozen)
	}
	if s.Copies[0].Digest.SHA256 != "sha-of-root-v1+frozen" || s.Copies[1].Digest.SHA256 != "sha-of-data-v1+frozen" {
		t.Errorf("copies %+v: want the disks as they were when frozen", s.Copies)
	}
	if h.state != "running" {
		t.Errorf("the VM is %s", h.state)
	}
}

func TestTakeRunningWithoutAnAgentIsCrashConsistentAndWarns(t *testing.T) {
	for name, h := range map[string]*fakeHost{
		"no agent channel": runningHost(false),
		"an agent that is not up": func() *fakeHost {
			h := runningHost(true)
			h.freezeErr = errors.New("Guest agent is not responding")
			return h
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Take(context.Background(), h, TakeRequest{VM: "src", Name: "one"})
			if err != nil {
				t.Fatal(err)
			}
			if s.Consistency != ConsistencyCrash || len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "crash-consistent") {
				t.Errorf("consistency %s, warnings %q", s.Consistency, s.Warnings)
			}
			if strings.Contains(strings.Join(h.calls, ","), "thaw") {
				t.Errorf("thawed what was not frozen: %v", h.calls)
			}
			if s.Copies[0].Digest.SHA256 != "sha-of-root-v1" {
				t.Errorf("copy %+v: want the disk as the job began", s.Copies[0])
			}
		})
	}
}

// A running snapshot failing or interrupted at any step leaves no volume
// and no frozen guest.
func TestTakeRunningFailingAtEachStepLeavesNothing(t *testing.T) {
	whole := runningHost(true)
	if _, err := Take(context.Background(), whole, TakeRequest{VM: "src", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	for _, interrupt := range []bool{false, true} {
		for step := 1; step <= whole.steps; step++ {
			h := runningHost(true)
			h.duringBackup = nil
			clean := h.contents()
			ctx, cancel := context.WithCancel(context.Background())
			if interrupt {
				h.interrupt, h.cancel = step, cancel
			} else {
				h.fault = step
			}
			_, err := Take(ctx, h, TakeRequest{VM: "src", Name: "one"})
			cancel()
			at := h.calls[step-1]
			// A failed freeze is a warning, a failed thaw is tried again.
			if got := h.contents(); err != nil && got != clean {
				t.Errorf("interrupt %v at step %d (%s): %v; volumes %s, want %s", interrupt, step, at, err, got, clean)
			}
			if h.frozen || h.backup != nil {
				t.Errorf("interrupt %v at step %d (%s): frozen %v, job %v", interrupt, step, at, h.frozen, h.backup)
			}
		}
	}
}
