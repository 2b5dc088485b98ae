package vmlife

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/health"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// PowerHost is what a power operation needs from a libvirt host.
// *virt.Client is one.
type PowerHost interface {
	LookupDomain(ctx context.Context, nameOrUUID string) (hostapi.DomainRef, error)
	DomainState(ctx context.Context, domain string) (string, error)
	StartDomain(ctx context.Context, ref hostapi.DomainRef) error
	AskShutdown(ctx context.Context, ref hostapi.DomainRef, via hostapi.PowerVia) error
	AskReboot(ctx context.Context, ref hostapi.DomainRef, via hostapi.PowerVia) error
	ResetDomain(ctx context.Context, ref hostapi.DomainRef) error
	ForceOffDomain(ctx context.Context, ref hostapi.DomainRef) error
	ReadChannel(ctx context.Context, domain, channel string, line func([]byte) bool) error
}

// PowerOp is a power operation on a VM.
type PowerOp string

// The operations, as the action's operation attribute names them.
const (
	PowerStart    PowerOp = "start"
	PowerShutdown PowerOp = "shutdown"
	PowerReboot   PowerOp = "reboot"
	PowerReset    PowerOp = "reset"
)

// PowerOps are the operations, in the order the docs list them.
func PowerOps() []string {
	return []string{string(PowerStart), string(PowerShutdown), string(PowerReboot), string(PowerReset)}
}

// PowerRequest is one power operation on a domain.
type PowerRequest struct {
	Domain string // name or UUID
	Op     PowerOp
	// Force forces a guest off when it has not powered off on request
	// before the deadline (shutdown only).
	Force bool
	// WaitForReport waits, after start, reboot or reset, until the guest
	// writes to its report channel (a report or a heartbeat).
	WaitForReport bool
	// Progress receives a line for each step and, while waiting, one per
	// ProgressEvery; nil discards them.
	Progress func(string)
}

// Power timing: how often the state is polled during a shutdown, how often
// a shutdown request is repeated (a guest still booting misses the first),
// how often a wait says it is still waiting, and how much of the deadline a
// forced stop keeps for itself.
var (
	PowerPoll     = time.Second
	PowerResend   = 10 * time.Second
	ProgressEvery = 10 * time.Second
	ForceReserve  = 10 * time.Second
)

// PowerResult says how an operation went.
type PowerResult struct {
	// Via is how the guest was asked (shutdown, reboot), "" otherwise.
	Via hostapi.PowerVia
	// Forced is set when a shutdown ended with the guest forced off.
	Forced bool
	// WasState is the domain's state before the operation.
	WasState string
	// Waited is how long the wait for the guest's report took.
	Waited time.Duration
}

// RunPower runs one power operation, bounded by ctx's deadline: shutdown asks
// the guest agent, then ACPI, and waits for the guest to power off, forcing
// it off only with Force; start starts a domain that is off; reboot asks
// the guest agent, then ACPI; reset resets at once. With WaitForReport,
// start, reboot and reset then wait until the guest writes to its report
// channel.
func RunPower(ctx context.Context, h PowerHost, req PowerRequest) (*PowerResult, error) {
	var mu sync.Mutex // the wait's ticker says things too
	say := func(line string) {
		if req.Progress != nil {
			mu.Lock()
			defer mu.Unlock()
			req.Progress(line)
		}
	}
	ref, err := h.LookupDomain(ctx, req.Domain)
	if err != nil {
		return nil, stepErr("find the domain", err)
	}
	state, err := h.DomainState(ctx, ref.Name)
	if err != nil {
		return nil, stepErr("read the domain's state", err)
	}
	out := &PowerResult{WasState: state}
	running := state == "running" || state == "paused" || state == "blocked"
	switch req.Op {
	case PowerStart:
		if running {
			say(fmt.Sprintf("%s is already %s", ref.Name, state))
			break
		}
		say("starting " + ref.Name)
		if err := h.StartDomain(ctx, ref); err != nil {
			return out, stepErr("start the domain", err)
		}
	case PowerShutdown:
		if !running {
			say(fmt.Sprintf("%s is already %s", ref.Name, state))
			return out, nil
		}
		return out, shutdown(ctx, h, ref, req.Force, out, say)
	case PowerReboot, PowerReset:
		if !running {
			return out, stepErr(string(req.Op), fmt.Errorf("the domain %s is %s; start it instead", ref.Name, state))
		}
		if req.Op == PowerReset {
			say("resetting " + ref.Name)
			if err := h.ResetDomain(ctx, ref); err != nil {
				return out, stepErr("reset the domain", err)
			}
			break
		}
		via, err := ask(ctx, func(via hostapi.PowerVia) error { return h.AskReboot(ctx, ref, via) })
		if err != nil {
			return out, stepErr("ask the guest to reboot", err)
		}
		out.Via = via
		say(fmt.Sprintf("asked %s to reboot through the %s", ref.Name, via))
	default:
		return out, fmt.Errorf("unknown power operation %q: want one of %v", req.Op, PowerOps())
	}
	if req.WaitForReport {
		start := time.Now()
		say(fmt.Sprintf("waiting for %s to report over its channel", ref.Name))
		if err := waitReport(ctx, h, ref.Name, say); err != nil {
			return out, stepErr("wait for the guest's report", err)
		}
		out.Waited = time.Since(start)
		say(fmt.Sprintf("%s reported after %s", ref.Name, out.Waited.Round(100*time.Millisecond)))
	}
	return out, nil
}

// ask tries the guest agent, then ACPI.
func ask(ctx context.Context, do func(hostapi.PowerVia) error) (hostapi.PowerVia, error) {
	agentErr := do(hostapi.ViaGuestAgent)
	if agentErr == nil {
		return hostapi.ViaGuestAgent, nil
	}
	if ctx.Err() != nil {
		return "", agentErr
	}
	if err := do(hostapi.ViaACPI); err != nil {
		return "", fmt.Errorf("the guest agent: %v; ACPI: %w", agentErr, err)
	}
	return hostapi.ViaACPI, nil
}

func shutdown(ctx context.Context, h PowerHost, ref hostapi.DomainRef, force bool, out *PowerResult, say func(string)) error {
	end := time.Time{}
	if dl, ok := ctx.Deadline(); ok {
		// Stop waiting a little before the deadline: to force the guest
		// off in time, or to say why it is still running.
		end = dl.Add(-2 * PowerPoll)
		if force {
			end = dl.Add(-ForceReserve)
		}
	}
	via, err := ask(ctx, func(via hostapi.PowerVia) error { return h.AskShutdown(ctx, ref, via) })
	if err != nil && !force {
		return stepErr("ask the guest to shut down", err)
	}
	out.Via = via
	if err == nil {
		say(fmt.Sprintf("asked %s to shut down through the %s", ref.Name, via))
		start, asked, told := time.Now(), time.Now(), time.Now()
		for end.IsZero() || time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return stepErr("wait for the guest to power off", ctx.Err())
			case <-time.After(PowerPoll):
			}
			st, err := h.DomainState(ctx, ref.Name)
			if err == nil && st == "shut off" {
				say(fmt.Sprintf("%s powered off after %s", ref.Name, time.Since(start).Round(100*time.Millisecond)))
				return nil
			}
			if time.Since(asked) >= PowerResend {
				_ = h.AskShutdown(ctx, ref, via) // a guest still booting misses the first request
				asked = time.Now()
			}
			if time.Since(told) >= ProgressEvery {
				say(fmt.Sprintf("still waiting for %s to power off (%s)", ref.Name, time.Since(start).Round(time.Second)))
				told = time.Now()
			}
		}
		if !force {
			return stepErr("wait for the guest to power off", fmt.Errorf(
				"%s did not power off within the action's timeout of being asked through the %s; it is still running. "+
					"Set force = true to force it off when it does not, or raise the timeout", ref.Name, via))
		}
	}
	say("forcing " + ref.Name + " off")
	if err := h.ForceOffDomain(ctx, ref); err != nil {
		return stepErr("force the domain off", err)
	}
	out.Forced = true
	return nil
}

// ReportReader reads a domain's report channel and its state.
type ReportReader interface {
	ReadChannel(ctx context.Context, domain, channel string, line func([]byte) bool) error
	DomainState(ctx context.Context, domain string) (string, error)
}

// WaitReport reads the report channel of a domain just started until the
// guest writes a report or a heartbeat, saying every ProgressEvery that it
// still waits (say may be nil). A domain that stops ends the wait at once:
// its guest can no longer write. Any line counts, so it is for a domain
// whose QEMU process started after the wait was asked for (a start, a
// reset, the start after a move): nothing of an earlier boot can be in its
// channel.
func WaitReport(ctx context.Context, h ReportReader, name string, say func(string)) error {
	if say == nil {
		say = func(string) {}
	}
	return waitReport(ctx, h, name, say)
}

// waitReport is WaitReport.
func waitReport(ctx context.Context, h ReportReader, name string, say func(string)) error {
	start := time.Now()
	stop, stopped := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-stopped }()
	go func() {
		defer close(stopped)
		t := time.NewTicker(ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				say(fmt.Sprintf("still waiting for %s to report (%s)", name, time.Since(start).Round(time.Second)))
			}
		}
	}()
	var last error
	for {
		got := false
		err := h.ReadChannel(ctx, name, phonehome.ReportChannel, func(line []byte) bool {
			if health.IsHeartbeat(line) {
				got = true
				return true
			}
			if _, perr := phonehome.ParseReport("application/json", line); perr == nil {
				got = true
				return true
			}
			return false
		})
		if got {
			return nil
		}
		if err != nil {
			last = err
		}
		if ctx.Err() != nil {
			if last != nil && !errors.Is(last, ctx.Err()) {
				return fmt.Errorf("no report within the timeout (%w); the last read: %v", ctx.Err(), last)
			}
			return fmt.Errorf("no report within the timeout: %w", ctx.Err())
		}
		if st, err := h.DomainState(ctx, name); err == nil && st != "running" && st != "paused" && st != "blocked" {
			return fmt.Errorf("the domain is %s: its guest can no longer report", st)
		}
		select {
		case <-ctx.Done():
		case <-time.After(PowerPoll):
		}
	}
}
