package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

func request() Request {
	return Request{VM: uuid, Pool: "images", Name: "golden.qcow2", Seal: true, ShutdownTimeout: 5 * time.Second, SealTimeout: time.Minute}
}

func TestCaptureRunningVMSealsStopsFlattensAndRestarts(t *testing.T) {
	t.Parallel()
	h := newHost(domainXML(volDisk, agentChan), "running")
	res, err := Capture(context.Background(), h, request())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"seal", "shutdown via guest agent", "flatten vms/src-root.qcow2 -> images/golden.qcow2", "hash images/golden.qcow2", "start"}
	if !slices.Equal(h.calls, want) {
		t.Errorf("calls %q, want %q", h.calls, want)
	}
	if !res.Sealed || !res.WasRunning || len(res.Warnings) != 0 {
		t.Errorf("result %+v", res)
	}
	if res.Digest.String() != "sha256:"+strings.Repeat("ab", 32) || res.Volume.Path != "/images/golden.qcow2" {
		t.Errorf("digest %s, volume %+v", res.Digest, res.Volume)
	}
	if len(h.scripts) != 1 || !strings.HasPrefix(h.scripts[0], "/bin/sh -c "+SealScript) {
		t.Errorf("the seal ran %q", h.scripts)
	}
	if h.state != "running" {
		t.Errorf("the VM is %s after the capture, want running again", h.state)
	}
}

func TestCaptureStoppedVMWarnsItWasNotSealed(t *testing.T) {
	t.Parallel()
	h := newHost(domainXML(volDisk, agentChan), "shut off")
	res, err := Capture(context.Background(), h, request())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"flatten vms/src-root.qcow2 -> images/golden.qcow2", "hash images/golden.qcow2"}
	if !slices.Equal(h.calls, want) {
		t.Errorf("calls %q, want %q (no seal, no shutdown, no start)", h.calls, want)
	}
	if res.Sealed || res.WasRunning || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "not running") {
		t.Errorf("result %+v", res)
	}
}

func TestCaptureWithoutSealNeitherSealsNorWarns(t *testing.T) {
	t.Parallel()
	h := newHost(domainXML(volDisk, ""), "shut off")
	req := request()
	req.Seal = false
	res, err := Capture(context.Background(), h, req)
	if err != nil || res.Sealed || len(res.Warnings) != 0 {
		t.Errorf("result %+v, %v", res, err)
	}
}

func TestCaptureWithoutAgentWarns(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		xml   string
		agent error
		want  string
	}{
		"no channel":   {xml: domainXML(volDisk, ""), want: "no guest agent channel"},
		"agent silent": {xml: domainXML(volDisk, agentChan), agent: fmt.Errorf("ping: %w", virt.ErrAgentUnavailable), want: "did not answer"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHost(tc.xml, "running")
			h.agent = tc.agent
			res, err := Capture(context.Background(), h, request())
			if err != nil {
				t.Fatal(err)
			}
			if res.Sealed || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], tc.want) {
				t.Errorf("result %+v, want one warning with %q", res, tc.want)
			}
			if h.state != "running" || !slices.Contains(h.calls, "hash images/golden.qcow2") {
				t.Errorf("calls %q, state %s", h.calls, h.state)
			}
		})
	}
}

func TestCaptureFailingSealCapturesNothing(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		exit  int
		agent error
	}{
		"exit status":      {exit: 1},
		"guest-exec error": {agent: errors.New("command guest-exec has been disabled")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHost(domainXML(volDisk, agentChan), "running")
			h.exit, h.agent = tc.exit, tc.agent
			_, err := Capture(context.Background(), h, request())
			var se *StepError
			if !errors.As(err, &se) || !strings.Contains(se.Step, "seal") {
				t.Fatalf("err %v, want a seal StepError", err)
			}
			if !slices.Equal(h.calls, []string{"seal"}) || h.state != "running" {
				t.Errorf("calls %q, state %s: want nothing done after the seal and the VM running", h.calls, h.state)
			}
		})
	}
}

func TestCaptureNeverForcesAVMThatWillNotStop(t *testing.T) {
	t.Parallel()
	h := newHost(domainXML(volDisk, agentChan), "running")
	h.stops = false
	req := request()
	req.ShutdownTimeout = 2500 * time.Millisecond
	_, err := Capture(context.Background(), h, req)
	var ns *NotStoppedError
	if !errors.As(err, &ns) || !strings.Contains(err.Error(), "still running and nothing was captured") || !strings.Contains(err.Error(), "sealed already") {
		t.Fatalf("err %v", err)
	}
	if strings.Contains(err.Error(), "force = true") {
		t.Errorf("err %v: tells the user of the power action's force, which capture has not", err)
	}
	for _, c := range h.calls {
		if c == "force off" || strings.HasPrefix(c, "flatten") {
			t.Errorf("calls %q: a VM that did not stop was forced off or captured", h.calls)
		}
	}
	if h.state != "running" {
		t.Errorf("state %s", h.state)
	}
}

func TestCaptureFailuresRestartTheVM(t *testing.T) {
	t.Parallel()
	boom := errors.New("injected")
	for name, tc := range map[string]struct {
		fail    string
		deleted bool
	}{
		"flatten": {fail: "flatten"},
		"hash":    {fail: "hash", deleted: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHost(domainXML(volDisk, agentChan), "running")
			h.fail[tc.fail] = boom
			_, err := Capture(context.Background(), h, request())
			if !errors.Is(err, boom) {
				t.Fatalf("err %v, want the injected failure", err)
			}
			if h.state != "running" || h.calls[len(h.calls)-1] != "start" {
				t.Errorf("calls %q, state %s: want the VM started again", h.calls, h.state)
			}
			if _, left := h.vols["images/golden.qcow2"]; left || slices.Contains(h.calls, "delete images/golden.qcow2") != tc.deleted {
				t.Errorf("calls %q: image volume left %v, want none left and a delete %v", h.calls, left, tc.deleted)
			}
		})
	}
}

func TestCaptureRestartFailureIsAWarning(t *testing.T) {
	t.Parallel()
	h := newHost(domainXML(volDisk, agentChan), "running")
	h.fail["start"] = errors.New("no memory")
	res, err := Capture(context.Background(), h, request())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "did not start again: no memory") {
		t.Errorf("warnings %q", res.Warnings)
	}
}

func TestBootDisk(t *testing.T) {
	t.Parallel()
	fileDisk := func(p string) string {
		return `<disk type="file" device="disk"><driver name="qemu" type="qcow2"/><source file="` + p + `"/><target dev="vda" bus="virtio"/></disk>`
	}
	for name, tc := range map[string]struct {
		xml       string
		want      string // pool/name
		refused   string
		wantAgent bool
	}{
		"pool volume":     {xml: domainXML(volDisk, agentChan), want: "vms/src-root.qcow2", wantAgent: true},
		"file in a pool":  {xml: domainXML(fileDisk("/vms/src-root.qcow2"), ""), want: "vms/src-root.qcow2"},
		"file in no pool": {xml: domainXML(fileDisk("/srv/loose.qcow2"), ""), refused: "no storage pool"},
		"block device":    {xml: domainXML(`<disk type="block" device="disk"><driver name="qemu" type="raw"/><source dev="/dev/sdb"/><target dev="vda" bus="virtio"/></disk>`, ""), refused: "block device"},
		"no boot disk":    {xml: domainXML("", ""), refused: "no boot disk"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHost(tc.xml, "shut off")
			d, err := BootDisk(context.Background(), h, "src")
			if tc.refused != "" {
				if !errors.Is(err, ErrNotCapturable) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err %v, want ErrNotCapturable saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Pool+"/"+d.Name != tc.want || d.Agent != tc.wantAgent || d.BackingPath != "/images/debian.qcow2" {
				t.Errorf("disk %+v", d)
			}
		})
	}
}

// Ctrl-C mid-flatten: the capture ends with the context's error, leaves no
// image and starts the VM again, though its context is done.
func TestCaptureInterruptedRestartsTheVM(t *testing.T) {
	t.Parallel()
	h := newHost(domainXML(volDisk, agentChan), "running")
	ctx, cancel := context.WithCancel(context.Background())
	h.fail["flatten"] = context.Canceled
	h.onFlatten = cancel
	_, err := Capture(ctx, h, request())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if h.state != "running" || h.calls[len(h.calls)-1] != "start" || h.startCtxErr != nil {
		t.Errorf("calls %q, state %s, start's context %v: want the VM started on a live context", h.calls, h.state, h.startCtxErr)
	}
	if _, left := h.vols["images/golden.qcow2"]; left {
		t.Error("an image volume was left")
	}
}
