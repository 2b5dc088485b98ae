package vmlife

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// powerFake is a domain whose guest answers power requests as told.
type powerFake struct {
	mu    sync.Mutex
	state string
	// agent: the guest agent answers; acpi: the guest handles the power
	// button. offAfter is how many state reads after a handled shutdown
	// request the guest is off.
	agent, acpi bool
	offAfter    int
	asked       int // state reads since a handled request; -1 none
	report      []string
	ops         []string
}

func (f *powerFake) log(op string) { f.ops = append(f.ops, op) }

func (f *powerFake) LookupDomain(_ context.Context, n string) (virt.DomainRef, error) {
	if n != "vm" {
		return virt.DomainRef{}, virt.ErrDomainNotFound
	}
	return virt.DomainRef{Name: "vm", UUID: "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"}, nil
}

func (f *powerFake) DomainState(context.Context, string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asked >= 0 {
		f.asked++
		if f.asked > f.offAfter {
			f.state, f.asked = "shut off", -1
		}
	}
	return f.state, nil
}

func (f *powerFake) StartDomain(context.Context, virt.DomainRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("start")
	f.state = "running"
	return nil
}

func (f *powerFake) handles(via virt.PowerVia) bool {
	return (via == virt.ViaGuestAgent && f.agent) || (via == virt.ViaACPI && f.acpi)
}

func (f *powerFake) AskShutdown(_ context.Context, _ virt.DomainRef, via virt.PowerVia) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("shutdown via " + string(via))
	if via == virt.ViaGuestAgent && !f.agent {
		return errors.New("QEMU guest agent is not connected")
	}
	if f.handles(via) && f.asked < 0 {
		f.asked = 0
	}
	return nil
}

func (f *powerFake) AskReboot(_ context.Context, _ virt.DomainRef, via virt.PowerVia) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("reboot via " + string(via))
	if via == virt.ViaGuestAgent && !f.agent {
		return errors.New("QEMU guest agent is not connected")
	}
	return nil
}

func (f *powerFake) ResetDomain(context.Context, virt.DomainRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("reset")
	return nil
}

func (f *powerFake) ForceOffDomain(context.Context, virt.DomainRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("force off")
	f.state = "shut off"
	return nil
}

func (f *powerFake) ReadChannel(ctx context.Context, _, _ string, line func([]byte) bool) error {
	f.mu.Lock()
	lines := f.report
	f.mu.Unlock()
	for _, l := range lines {
		if line([]byte(l)) {
			return nil
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

func fastPower(t *testing.T) {
	t.Helper()
	poll, resend, every, reserve := PowerPoll, PowerResend, ProgressEvery, ForceReserve
	PowerPoll, PowerResend, ProgressEvery, ForceReserve = 5*time.Millisecond, 20*time.Millisecond, 30*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { PowerPoll, PowerResend, ProgressEvery, ForceReserve = poll, resend, every, reserve })
}

func runPower(t *testing.T, f *powerFake, req PowerRequest, timeout time.Duration) (*PowerResult, []string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var lines []string
	req.Domain = "vm"
	req.Progress = func(s string) { lines = append(lines, s) }
	res, err := RunPower(ctx, f, req)
	return res, lines, err
}

// Not run in parallel: the tests shorten the package's timing variables.

func TestPowerShutdownAgentThenACPI(t *testing.T) {
	fastPower(t)
	f := &powerFake{state: "running", acpi: true, offAfter: 3, asked: -1}
	res, lines, err := runPower(t, f, PowerRequest{Op: PowerShutdown}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Via != virt.ViaACPI || res.Forced || f.state != "shut off" {
		t.Errorf("result %+v, state %s; want ACPI, not forced, shut off", res, f.state)
	}
	if f.ops[0] != "shutdown via guest agent" || f.ops[1] != "shutdown via ACPI" {
		t.Errorf("ops %v: want the guest agent asked first, then ACPI", f.ops)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "powered off after") {
		t.Errorf("progress %q does not say the guest powered off", lines)
	}
}

func TestPowerShutdownDeafGuestNotForced(t *testing.T) {
	fastPower(t)
	f := &powerFake{state: "running", asked: -1}
	_, lines, err := runPower(t, f, PowerRequest{Op: PowerShutdown}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "force = true") {
		t.Fatalf("err = %v; want the shutdown to fail naming force = true", err)
	}
	if f.state != "running" || strings.Contains(strings.Join(f.ops, ","), "force off") {
		t.Errorf("a guest that ignored the request was forced off without force: state %s, ops %v", f.state, f.ops)
	}
	if n := strings.Count(strings.Join(f.ops, ","), "shutdown via ACPI"); n < 2 {
		t.Errorf("the request was sent %d times in 300ms; want it repeated every 20ms", n)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "still waiting") {
		t.Errorf("progress %q has no still-waiting line", lines)
	}
}

func TestPowerShutdownDeafGuestForced(t *testing.T) {
	fastPower(t)
	f := &powerFake{state: "running", asked: -1}
	start := time.Now()
	res, _, err := runPower(t, f, PowerRequest{Op: PowerShutdown, Force: true}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Forced || f.state != "shut off" {
		t.Errorf("result %+v, state %s; want forced off", res, f.state)
	}
	// Not before the grace (the deadline less ForceReserve); the upper bound
	// leaves room for a loaded machine.
	if took := time.Since(start); took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("forced after %s; want after the grace (deadline less ForceReserve)", took)
	}
}

func TestPowerStartWaitsForReport(t *testing.T) {
	fastPower(t)
	token, err := phonehome.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	f := &powerFake{state: "shut off", asked: -1, report: []string{"booting", `{"token":"` + token + `","instance_id":"i","hostname":"h"}`}}
	res, lines, err := runPower(t, f, PowerRequest{Op: PowerStart, WaitForReport: true}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.state != "running" || res.WasState != "shut off" {
		t.Errorf("state %s, was %s", f.state, res.WasState)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "reported after") {
		t.Errorf("progress %q does not say the guest reported", lines)
	}
	// A guest that never reports fails within the deadline.
	f = &powerFake{state: "shut off", asked: -1, report: []string{"not a report"}}
	start := time.Now()
	if _, _, err := runPower(t, f, PowerRequest{Op: PowerStart, WaitForReport: true}, 100*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "no report within the timeout") || time.Since(start) > 2*time.Second {
		t.Errorf("err = %v after %s; want no report within the timeout", err, time.Since(start))
	}
}

func TestPowerRebootAndReset(t *testing.T) {
	fastPower(t)
	f := &powerFake{state: "running", agent: true, asked: -1}
	res, _, err := runPower(t, f, PowerRequest{Op: PowerReboot}, time.Second)
	if err != nil || res.Via != virt.ViaGuestAgent || strings.Join(f.ops, ",") != "reboot via guest agent" {
		t.Errorf("reboot: %+v, %v, ops %v; want one request through the agent", res, err, f.ops)
	}
	f = &powerFake{state: "running", asked: -1}
	if _, _, err := runPower(t, f, PowerRequest{Op: PowerReset}, time.Second); err != nil || strings.Join(f.ops, ",") != "reset" {
		t.Errorf("reset: %v, ops %v", err, f.ops)
	}
	f = &powerFake{state: "shut off", asked: -1}
	if _, _, err := runPower(t, f, PowerRequest{Op: PowerReboot}, time.Second); err == nil || !strings.Contains(err.Error(), "start it instead") || len(f.ops) != 0 {
		t.Errorf("reboot of a stopped domain: %v, ops %v", err, f.ops)
	}
	f = &powerFake{state: "running", asked: -1}
	if _, _, err := runPower(t, f, PowerRequest{Op: PowerStart}, time.Second); err != nil || len(f.ops) != 0 {
		t.Errorf("start of a running domain: %v, ops %v; want nothing done", err, f.ops)
	}
}

// stoppingGuest is a domain whose guest writes nothing and powers off.
type stoppingGuest struct{ reads int }

func (g *stoppingGuest) ReadChannel(context.Context, string, string, func([]byte) bool) error {
	g.reads++
	return errors.New("stream closed")
}

func (g *stoppingGuest) DomainState(context.Context, string) (string, error) { return "shut off", nil }

// A guest that powers off during the wait ends it at once, saying so,
// instead of holding the apply until the timeout.
func TestWaitReportEndsWhenTheDomainStops(t *testing.T) {
	fastPower(t)
	g := &stoppingGuest{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := WaitReport(ctx, g, "vm", nil)
	if err == nil || !strings.Contains(err.Error(), "the domain is shut off") || time.Since(start) > 10*time.Second {
		t.Fatalf("err = %v after %s, want the domain is shut off, at once", err, time.Since(start))
	}
	if g.reads != 1 {
		t.Errorf("the channel was read %d times after the domain stopped", g.reads)
	}
}
