package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

func init() { vmlife.PowerPoll = time.Millisecond }

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "before-upgrade", "v1.2_3"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a/b", "a b", strings.Repeat("a", 64)} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
}

func TestTakeCopiesEveryDiskOfAStoppedVM(t *testing.T) {
	h := newHost("shut off")
	s, err := Take(context.Background(), h, TakeRequest{VM: "src", Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if s.VM.UUID != uuid || s.Consistency != ConsistencyPoweredOff || len(s.Copies) != 2 {
		t.Fatalf("snapshot = %+v", s)
	}
	for i, want := range []struct{ disk, vol, snap, digest string }{
		{"boot", "src-root.qcow2", "src-root.qcow2.snap-one", "sha-of-root-v1"},
		{"data", "src-data.qcow2", "src-data.qcow2.snap-one", "sha-of-data-v1"},
	} {
		c := s.Copies[i]
		if c.Disk.Disk != want.disk || c.Volume != want.vol || c.Snapshot != want.snap || c.Digest.SHA256 != want.digest {
			t.Errorf("copy %d = %+v, want %+v", i, c, want)
		}
	}
	if got := h.contents(); !strings.Contains(got, "vms/src-root.qcow2.snap-one=root-v1") || !strings.Contains(got, "vms/src-data.qcow2.snap-one=data-v1") {
		t.Errorf("volumes: %s", got)
	}
}

func TestFindRefusesDisksKohakuDidNotMake(t *testing.T) {
	h := newHost("shut off")
	h.xml = vmXML(bootDisk + dataDisk +
		`<disk type="volume" device="disk"><driver name="qemu" type="qcow2"/><source pool="vms" volume="users.qcow2"/><target dev="vdc" bus="virtio"/><serial>users</serial></disk>` +
		`<disk type="file" device="disk"><driver name="qemu" type="qcow2"/><source file="/srv/scratch.qcow2"/><target dev="vdd" bus="virtio"/><serial>scratch</serial></disk>`)
	_, err := Take(context.Background(), h, TakeRequest{VM: "src", Name: "one"})
	if !errors.Is(err, ErrNotSnapshottable) {
		t.Fatalf("err = %v, want ErrNotSnapshottable", err)
	}
	for _, want := range []string{"vms/users.qcow2", "/srv/scratch.qcow2", "data disk users", "data disk scratch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %q: %v", want, err)
		}
	}
	if len(h.calls) != 0 {
		t.Errorf("a refused snapshot changed something: %v", h.calls)
	}

	h.xml = vmXML("")
	if _, err := Find(context.Background(), h, "src"); !errors.Is(err, ErrNotSnapshottable) || !strings.Contains(err.Error(), "no disk") {
		t.Errorf("a VM without disks: %v", err)
	}
}

// A snapshot whose step fails, or is interrupted, at any step leaves no
// volume behind.
func TestTakeFailingAtEachStepLeavesNothing(t *testing.T) {
	clean := newHost("shut off").contents()
	for step := 1; ; step++ {
		h := newHost("shut off")
		h.fault = step
		_, err := Take(context.Background(), h, TakeRequest{VM: "src", Name: "one"})
		if err == nil {
			if step < 3 {
				t.Fatalf("only %d steps", step-1)
			}
			break
		}
		if got := h.contents(); got != clean {
			t.Errorf("fault at step %d (%v): volumes %s, want %s", step, err, got, clean)
		}
	}
}

func TestTakeNeverOverwrites(t *testing.T) {
	h := newHost("shut off")
	h.vols["vms/src-data.qcow2.snap-one"] = "someone's"
	_, err := Take(context.Background(), h, TakeRequest{VM: "src", Name: "one"})
	if err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("err = %v", err)
	}
	if h.vols["vms/src-data.qcow2.snap-one"] != "someone's" {
		t.Error("the existing volume was changed")
	}
	if _, ok := h.vols["vms/src-root.qcow2.snap-one"]; ok {
		t.Error("the boot disk's copy was left behind")
	}
}

// snapshotted is a host whose VM has the snapshot "one" of v1 disks and
// now runs on v2 disks.
func snapshotted(t *testing.T) *fakeHost {
	t.Helper()
	h := newHost("shut off")
	if _, err := Take(context.Background(), h, TakeRequest{VM: "src", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	h.vols["vms/src-root.qcow2"], h.vols["vms/src-data.qcow2"] = "root-v2", "data-v2"
	h.state, h.calls, h.steps = "running", nil, 0
	return h
}

func revertReq() RevertRequest {
	return RevertRequest{VM: "src", SnapshotOf: uuid, Name: "one", ShutdownTimeout: time.Second}
}

const reverted = "vms/other=x vms/src-data.qcow2.snap-one=data-v1 vms/src-data.qcow2=data-v1 vms/src-root.qcow2.snap-one=root-v1 vms/src-root.qcow2=root-v1"

func TestRevertReturnsEveryDiskAndStartsTheVMAgain(t *testing.T) {
	h := snapshotted(t)
	res, err := Revert(context.Background(), h, revertReq())
	if err != nil {
		t.Fatal(err)
	}
	if !res.WasRunning || !res.Started || res.Resumed {
		t.Errorf("result = %+v", res)
	}
	if got := h.contents(); got != reverted {
		t.Errorf("volumes:\n %s\nwant\n %s", got, reverted)
	}
	if h.state != "running" || len(h.starts) != 1 || h.starts[0] != "root-v1,data-v1" {
		t.Errorf("state %s, starts %v", h.state, h.starts)
	}
	want := []string{"shutdown via guest agent", "delete src-root.qcow2.kohaku-revert", "copy src-root.qcow2.snap-one -> src-root.qcow2.kohaku-revert",
		"delete src-data.qcow2.kohaku-revert", "copy src-data.qcow2.snap-one -> src-data.qcow2.kohaku-revert",
		"delete src-root.qcow2", "delete src-data.qcow2",
		"copy src-root.qcow2.kohaku-revert -> src-root.qcow2", "copy src-data.qcow2.kohaku-revert -> src-data.qcow2",
		"delete src-root.qcow2.kohaku-revert", "delete src-data.qcow2.kohaku-revert", "start"}
	if strings.Join(h.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant\n%s", strings.Join(h.calls, "\n"), strings.Join(want, "\n"))
	}
}

func TestRevertRefusesBeforeChangingAnything(t *testing.T) {
	for name, c := range map[string]struct {
		mod  func(*fakeHost, *RevertRequest)
		want string
	}{
		"another VM's snapshot": {func(_ *fakeHost, r *RevertRequest) { r.SnapshotOf = otherUUID }, "taken of the VM with UUID " + otherUUID},
		"no such snapshot":      {func(_ *fakeHost, r *RevertRequest) { r.Name = "two" }, "has no copy of src's boot disk"},
		"a disk added since": {func(h *fakeHost, _ *RevertRequest) {
			delete(h.vols, "vms/src-data.qcow2.snap-one")
		}, "has no copy of src's data disk"},
		"a disk Kohaku did not make": {func(h *fakeHost, _ *RevertRequest) {
			h.xml = strings.Replace(h.xml, `<owned-volume pool="vms" volume="src-data.qcow2"/>`, "", 1)
		}, "Kohaku did not make"},
	} {
		t.Run(name, func(t *testing.T) {
			h := snapshotted(t)
			before := h.contents()
			req := revertReq()
			c.mod(h, &req)
			_, err := Revert(context.Background(), h, req)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to say %q", err, c.want)
			}
			if len(h.calls) != 0 || h.state != "running" {
				t.Errorf("calls %v, state %s: the refusal changed something", h.calls, h.state)
			}
			if name != "a disk added since" && h.contents() != before {
				t.Errorf("volumes changed")
			}
		})
	}
}

// stepsOf counts the steps of an uninterrupted revert.
func stepsOf(t *testing.T) int {
	t.Helper()
	h := snapshotted(t)
	if _, err := Revert(context.Background(), h, revertReq()); err != nil {
		t.Fatal(err)
	}
	return h.steps
}

// checkStarts fails when the VM was ever started on a mix of old and
// reverted disks.
func checkStarts(t *testing.T, h *fakeHost, at string) {
	t.Helper()
	for _, s := range h.starts {
		if s != "root-v1,data-v1" && s != "root-v2,data-v2" {
			t.Errorf("%s: the VM was started on %s", at, s)
		}
	}
}

// A revert whose step fails once, at any step, ends, after the revert is
// run again, exactly as one that never failed; the VM never starts on a
// mix of disks in between, and a failure after the commit leaves it
// unable to start.
func TestRevertFailingAtEachStepConverges(t *testing.T) {
	n := stepsOf(t)
	on := true
	for step := 1; step <= n; step++ {
		h := snapshotted(t)
		h.fault = step
		res, err := Revert(context.Background(), h, revertReq())
		if err == nil { // a step with a fallback (the guest agent's shutdown: ACPI), or a staged copy's deletion (a warning)
			if got := h.contents(); (got != reverted) != (len(res.Warnings) > 0) || h.state != "running" {
				t.Errorf("fault at step %d (%s) passed over: %s, volumes %s, warnings %q", step, h.calls[step-1], h.state, got, res.Warnings)
			}
		}
		var re *RevertError
		switch {
		case err == nil:
		case errors.As(err, &re) && re.Committed:
			if h.state != "shut off" {
				t.Errorf("step %d: a committed revert failed and left the VM %s", step, h.state)
			}
			if serr := h.StartDomain(context.Background(), virtRef()); serr == nil {
				t.Errorf("step %d: the VM could start after a committed revert failed: %s", step, h.contents())
			}
		case h.state != "running" && !strings.HasPrefix(err.Error(), "start the VM"):
			t.Errorf("step %d: a revert that failed before its commit left the VM %s (%v)", step, h.state, err)
		}
		req := revertReq()
		req.Start = &on
		if _, err := Revert(context.Background(), h, req); err != nil {
			t.Fatalf("fault at step %d (%s): the rerun failed: %v", step, h.calls[step-1], err)
		}
		if got := h.contents(); got != reverted || h.state != "running" {
			t.Errorf("fault at step %d (%s): after the rerun %s, volumes\n %s\nwant\n %s", step, h.calls[step-1], h.state, got, reverted)
		}
		checkStarts(t, h, "fault at "+h.calls[step-1])
	}
}

// A revert interrupted (Ctrl-C) at any step leaves a VM that runs on one
// whole set of disks, and a rerun ends exactly like an uninterrupted
// revert. Once committed, the interruption no longer stops it.
func TestRevertInterruptedAtEachStepConverges(t *testing.T) {
	n := stepsOf(t)
	for step := 1; step <= n; step++ {
		h := snapshotted(t)
		ctx, cancel := context.WithCancel(context.Background())
		h.interrupt, h.cancel = step, cancel
		_, err := Revert(ctx, h, revertReq())
		cancel()
		at := h.calls[step-1]
		if h.state != "running" {
			t.Errorf("interrupted at step %d (%s): the VM is %s (err %v)", step, at, h.state, err)
		}
		checkStarts(t, h, "interrupted at "+at)
		if _, err := Revert(context.Background(), h, revertReq()); err != nil {
			t.Fatalf("interrupted at step %d (%s): the rerun failed: %v", step, at, err)
		}
		if got := h.contents(); got != reverted || h.state != "running" {
			t.Errorf("interrupted at step %d (%s): after the rerun %s, volumes\n %s\nwant\n %s", step, at, h.state, got, reverted)
		}
		checkStarts(t, h, "rerun after "+at)
	}
}

func TestIsCopyVolume(t *testing.T) {
	for name, want := range map[string]bool{
		"web-root.qcow2.snap-before":   true,
		"web-data.qcow2.snap-v1.2_x":   true,
		"web-root.qcow2.kohaku-revert": true,
		"web-root.qcow2":               false,
		"debian-12.qcow2":              false,
		"web.snap-":                    false,
	} {
		if got := IsCopyVolume(name); got != want {
			t.Errorf("IsCopyVolume(%q) = %v", name, got)
		}
	}
}

// A snapshot is listed when every disk of the VM has its copy.
func TestListFindsWholeSnapshots(t *testing.T) {
	h := snapshotted(t)
	h.vols["vms/src-root.qcow2.snap-half"] = "x" // no copy of the data disk
	h.vols["vms/src-root.qcow2.snap-two"], h.vols["vms/src-data.qcow2.snap-two"] = "y", "z"
	tg, names, err := List(context.Background(), h, "src")
	if err != nil {
		t.Fatal(err)
	}
	if tg.VM.UUID != uuid || strings.Join(names, ",") != "one,two" {
		t.Errorf("List = %v, %v", tg.VM, names)
	}
}

// A VM started by someone else while the revert stages its copies keeps
// its disks: the revert fails before its commit and leaves nothing staged.
func TestRevertNeverCommitsOnAVMThatWasStarted(t *testing.T) {
	h := snapshotted(t)
	h.state = "shut off"
	h.interrupt, h.cancel = 4, func() { h.state = "running" } // as the second copy is staged
	_, err := Revert(context.Background(), h, revertReq())
	if err == nil || !strings.Contains(err.Error(), "was started (it is running) while the snapshot was staged") {
		t.Fatalf("err = %v", err)
	}
	if got := h.contents(); got != "vms/other=x vms/src-data.qcow2.snap-one=data-v1 vms/src-data.qcow2=data-v2 vms/src-root.qcow2.snap-one=root-v1 vms/src-root.qcow2=root-v2" {
		t.Errorf("volumes %s", got)
	}
}
