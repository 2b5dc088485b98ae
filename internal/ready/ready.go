// Package ready decides when a new VM is ready: it waits for the guest's
// phone-home report, or polls cloud-init's result through the QEMU guest
// agent, within the caller's deadline, and explains a wait that failed.
package ready

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/health"
	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// Mode is how Create learns that the guest is ready.
type Mode string

const (
	// ModeChannel reads the guest's report from its virtio-serial channel
	// through the libvirt connection: no network path to the provider and
	// no guest agent needed.
	ModeChannel Mode = "channel"
	// ModePhoneHome waits for the guest's HTTP call to the provider.
	ModePhoneHome Mode = "phone_home"
	// ModeGuestAgent asks the QEMU guest agent, through libvirt, until
	// cloud-init has written its result.
	ModeGuestAgent Mode = "guest_agent"
	// ModeNone returns as soon as the domain runs.
	ModeNone Mode = "none"
)

// ResultFile is where cloud-init records the end of its last stage.
const ResultFile = "/run/cloud-init/result.json"

// ReportFile is where the seed's first-boot reporter also leaves its report
// (readable by root only), for the guest agent to read.
const ReportFile = "/run/kohaku/report.json"

// reportGrace bounds the wait for ReportFile once cloud-init has finished.
var reportGrace = 3 * time.Minute

// Reporter is a registered phone-home waiter.
type Reporter interface {
	Wait(ctx context.Context) (*phonehome.Report, error)
}

// Agent reads files in the guest through the QEMU guest agent.
type Agent interface {
	AgentReadFile(ctx context.Context, domain, path string, limit int) ([]byte, error)
}

// ChannelReader reads a domain's channel through libvirt (virt.Client).
type ChannelReader interface {
	ReadChannel(ctx context.Context, domain, channel string, line func([]byte) bool) error
	DomainState(ctx context.Context, domain string) (string, error)
}

// channelRetry is the pause before reopening a channel whose stream ended
// while the domain still runs (libvirtd restarted, connection lost).
var channelRetry = 2 * time.Second

// WaitChannel reads the guest's report from the domain's report channel
// until a report carrying token arrives or ctx ends. Reports with another
// token (a guest booted from another seed), reports naming another domain
// than domainUUID (see phonehome.CheckFresh; empty: not checked) and lines
// that are not reports are ignored and kept for the error. A stream that breaks is reopened
// while the domain runs; a domain that stopped ends the wait at once.
func WaitChannel(ctx context.Context, r ChannelReader, domain, domainUUID, channel, token string) (*Outcome, error) {
	start := time.Now()
	var rep *phonehome.Report
	var last error
	for {
		err := r.ReadChannel(ctx, domain, channel, func(line []byte) bool {
			if health.IsHeartbeat(line) {
				return false // the guest's agent, already past its report
			}
			got, perr := phonehome.ParseReport("application/json", line)
			switch {
			case perr != nil:
				last = fmt.Errorf("the guest wrote a line that is not a report (%v)", perr)
			case subtle.ConstantTimeCompare([]byte(got.Token), []byte(token)) != 1:
				last = errors.New("the guest reported with another seed's token (was the disk booted from another seed?)")
			case domainUUID != "" && phonehome.CheckFresh(got, domainUUID, false) != nil:
				last = fmt.Errorf("the guest wrote a report refused as %w", phonehome.CheckFresh(got, domainUUID, false))
			default:
				got.ReceivedAt, got.Via = time.Now(), string(ModeChannel)
				rep = got
				return true
			}
			return false
		})
		if rep != nil {
			return &Outcome{Report: rep, Waited: time.Since(start)}, nil
		}
		if ctx.Err() != nil {
			return nil, &WaitError{Mode: ModeChannel, Waited: time.Since(start), Err: ctx.Err(), Last: last}
		}
		if err != nil {
			last = err
		}
		if st, serr := r.DomainState(ctx, domain); serr == nil && st != "running" && st != "paused" && st != "blocked" {
			return nil, &WaitError{Mode: ModeChannel, Waited: time.Since(start), Err: fmt.Errorf("the domain is %s: the guest can no longer report", st), Last: last}
		}
		select {
		case <-ctx.Done():
			return nil, &WaitError{Mode: ModeChannel, Waited: time.Since(start), Err: ctx.Err(), Last: last}
		case <-time.After(channelRetry):
		}
	}
}

// Outcome is a wait that ended with a report from the guest.
type Outcome struct {
	Report *phonehome.Report
	Waited time.Duration
}

// WaitPhoneHome blocks until the guest posts its report or ctx ends.
func WaitPhoneHome(ctx context.Context, w Reporter) (*Outcome, error) {
	start := time.Now()
	rep, err := w.Wait(ctx)
	if err != nil {
		return nil, &WaitError{Mode: ModePhoneHome, Waited: time.Since(start), Err: err}
	}
	return &Outcome{Report: rep, Waited: time.Since(start)}, nil
}

// PollGuestAgent asks the guest agent for cloud-init's result file every
// interval until it exists and parses, or ctx ends. The agent is not up
// during early boot; that and a missing file are "not yet", and the last
// such answer is kept for the error.
func PollGuestAgent(ctx context.Context, a Agent, domain string, interval time.Duration) (*Outcome, error) {
	start := time.Now()
	var last error
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		b, err := a.AgentReadFile(ctx, domain, ResultFile, phonehome.MaxBodyBytes)
		if err == nil {
			st, perr := phonehome.ParseCloudInitStatus(b)
			if perr == nil && st.Finished() {
				return &Outcome{
					Report: &phonehome.Report{Kind: "guest_agent", CloudInit: st, ReceivedAt: time.Now(), Via: string(ModeGuestAgent)},
					Waited: time.Since(start),
				}, nil
			}
			err = perr
			if err == nil {
				err = fmt.Errorf("cloud-init status is %q", st.Status)
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, &WaitError{Mode: ModeGuestAgent, Waited: time.Since(start), Err: ctx.Err(), Last: last}
		case <-tick.C:
		}
	}
}

// PollGuestAgentReport is PollGuestAgent for a seed with the first-boot
// reporter (token is its report token; empty: no reporter). Once cloud-init
// has finished without errors it also reads the reporter's report from
// ReportFile, with its checks of the declared configuration, routes and DNS
// servers, for up to reportGrace; a report with another token, or naming
// another domain than domainUUID (empty: not checked), is ignored.
// When none comes, cloud-init's result stands, with a check that says the
// declared configuration could not be checked.
func PollGuestAgentReport(ctx context.Context, a Agent, domain, domainUUID string, interval time.Duration, token string) (*Outcome, error) {
	start := time.Now()
	out, err := PollGuestAgent(ctx, a, domain, interval)
	if err != nil || token == "" || out.Report.CloudInit.Failed() {
		return out, err
	}
	grace, cancel := context.WithTimeout(ctx, reportGrace)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	why := "it was not there"
	for {
		b, err := a.AgentReadFile(grace, domain, ReportFile, phonehome.MaxBodyBytes)
		if err == nil {
			rep, perr := phonehome.ParseReport("application/json", bytes.TrimSpace(b))
			switch {
			case perr != nil:
				why = fmt.Sprintf("it is not a report (%v)", perr)
			case subtle.ConstantTimeCompare([]byte(rep.Token), []byte(token)) != 1:
				why = "it carries another seed's token"
			case domainUUID != "" && phonehome.CheckFresh(rep, domainUUID, false) != nil:
				why = phonehome.CheckFresh(rep, domainUUID, false).Error()
			default:
				rep.Token, rep.ReceivedAt, rep.Via = "", time.Now(), string(ModeGuestAgent)
				if rep.CloudInit == nil {
					rep.CloudInit = out.Report.CloudInit
				}
				return &Outcome{Report: rep, Waited: time.Since(start)}, nil
			}
		}
		select {
		case <-grace.Done():
			out.Report.Checks = append(out.Report.Checks, phonehome.Check{
				What: "declared configuration", Result: phonehome.CheckUnknown,
				Found: fmt.Sprintf("the first-boot reporter's %s, read through the guest agent for %s after cloud-init finished: %s", ReportFile, time.Since(start).Round(time.Second), why),
			})
			out.Waited = time.Since(start)
			return out, nil
		case <-tick.C:
		}
	}
}

// WaitError is a wait that ended without a report. The caller fills in what
// it knows about the VM so the message tells the whole story.
type WaitError struct {
	Mode   Mode
	Waited time.Duration
	Err    error
	// Last is the last "not yet" answer while polling.
	Last error

	VM          string
	URL         string // the phone-home URL the guest should have reached
	DomainState string // libvirt's state of the domain when the wait ended
	SerialLog   string // path of the serial console log on the host
	SerialTail  []string
	Left        string // what was left behind on the host
}

func (e *WaitError) Unwrap() error { return e.Err }

// TimedOut reports whether the deadline ended the wait (not a cancel).
func (e *WaitError) TimedOut() bool { return errors.Is(e.Err, context.DeadlineExceeded) }

func (e *WaitError) Error() string {
	var b strings.Builder
	what := "ended"
	if e.TimedOut() {
		what = "timed out"
	} else if errors.Is(e.Err, context.Canceled) {
		what = "was cancelled"
	}
	fmt.Fprintf(&b, "VM %s did not report ready: the wait %s after %s", e.VM, what, e.Waited.Round(time.Second))
	switch e.Mode {
	case ModePhoneHome:
		fmt.Fprintf(&b, " (waiting for the guest to phone home to %s)", phonehome.Redact(e.URL))
	case ModeGuestAgent:
		fmt.Fprintf(&b, " (asking the QEMU guest agent for %s)", ResultFile)
	case ModeChannel:
		fmt.Fprintf(&b, " (reading the guest's report from its %s channel through libvirt)", phonehome.ReportChannel)
	}
	b.WriteString(".")
	if e.DomainState != "" {
		fmt.Fprintf(&b, "\nThe domain is %s.", e.DomainState)
	}
	if e.Last != nil {
		if e.Mode == ModeChannel {
			fmt.Fprintf(&b, "\nLast thing seen on the channel: %v.", e.Last)
		} else {
			fmt.Fprintf(&b, "\nLast answer from the guest agent: %v.", e.Last)
		}
	}
	if !e.TimedOut() && !errors.Is(e.Err, context.Canceled) && e.Err != nil {
		fmt.Fprintf(&b, "\nCause: %v.", e.Err)
	}
	switch e.Mode {
	case ModePhoneHome:
		b.WriteString("\nCheck that the guest can reach that URL (phone_home.base_url and listen_address of the " +
			"provider, the VM's network) and that cloud-init ran; with no network path to the provider use " +
			"wait_for = \"guest_agent\".")
	case ModeGuestAgent:
		b.WriteString("\nCheck that the image runs qemu-guest-agent (the seed's guest_agent) and that the VM has the guest agent channel.")
	case ModeChannel:
		b.WriteString("\nCheck that cloud-init ran with the seed (the serial console shows it) and that the " +
			"image has python3 and systemd for the seed's first-boot reporter (kohaku-report.service); " +
			"`journalctl -u kohaku-report` in the guest says what it tried.")
	}
	if len(e.SerialTail) > 0 {
		fmt.Fprintf(&b, "\nLast lines of the serial console (%s):\n  %s", e.SerialLog, strings.Join(e.SerialTail, "\n  "))
	} else if e.SerialLog != "" {
		fmt.Fprintf(&b, "\nThe serial console log is %s on the host.", e.SerialLog)
	}
	if e.Left != "" {
		fmt.Fprintf(&b, "\n%s", e.Left)
	}
	return b.String()
}

// CloudInitError says cloud-init finished with unrecoverable errors.
type CloudInitError struct {
	VM     string
	Status *phonehome.CloudInitStatus
	// Via, SentAt and ReceivedAt are the report's (see phonehome.Report):
	// how it came, the guest's clock when it wrote it, the host's when it
	// arrived. Zero values are left out of the message.
	Via                string
	SentAt, ReceivedAt time.Time
}

func (e *CloudInitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cloud-init in VM %s finished with status %q", e.VM, e.Status.ExtendedStatus)
	if len(e.Status.Errors) > 0 {
		b.WriteString(":")
		for _, m := range e.Status.Errors {
			fmt.Fprintf(&b, "\n  - %s", m)
		}
	}
	if line := reportTiming(e.Via, e.SentAt, e.ReceivedAt); line != "" {
		b.WriteString("\n" + line)
	}
	return b.String()
}

// reportTiming says how and when a report came, e.g. "Reported through the
// channel: written by the guest at 2026-11-25T12:00:01.123456Z (guest
// clock), received at 2026-11-25T12:00:01.131002Z (host clock)."; empty
// when it knows neither.
func reportTiming(via string, sent, received time.Time) string {
	if via == "" && received.IsZero() {
		return ""
	}
	s := "Reported"
	switch via {
	case string(ModeChannel):
		s += " through the channel"
	case string(ModePhoneHome):
		s += " through phone home"
	case string(ModeGuestAgent):
		s += " through the guest agent"
	}
	var parts []string
	if !sent.IsZero() {
		parts = append(parts, "written by the guest at "+sent.UTC().Format(time.RFC3339Nano)+" (guest clock)")
	}
	if !received.IsZero() {
		parts = append(parts, "received at "+received.UTC().Format(time.RFC3339Nano)+" (host clock)")
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s + "."
}

// MismatchError says the guest is not configured as its seed declared: the
// first-boot reporter found declared addresses, default routes,
// nameservers, the hostname or shares missing.
type MismatchError struct {
	VM         string
	Mismatches []phonehome.Check
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "VM %s is not configured as its seed declared:", e.VM)
	for _, c := range e.Mismatches {
		fmt.Fprintf(&b, "\n  - %s", c.Message())
	}
	return b.String()
}

// CheckDeclared is the report's comparison of the declared configuration
// with the guest as an error: nil when nothing declared is missing (checks
// that could not run are not mismatches).
func CheckDeclared(vm string, rep *phonehome.Report) error {
	if rep == nil {
		return nil
	}
	if m := rep.Mismatches(); len(m) > 0 {
		return &MismatchError{VM: vm, Mismatches: m}
	}
	return nil
}

// Check turns a report into an error (cloud-init's unrecoverable errors) or
// warnings: a degraded but finished boot, a guest that lacks something its
// seed declared (readiness degraded: each warning names what is missing),
// a declared setting the reporter could not check. A report without a
// status or checks (cloud-init's plain phone_home post) passes.
func Check(vm string, rep *phonehome.Report) (warnings []string, err error) {
	if rep == nil {
		return nil, nil
	}
	if st := rep.CloudInit; st != nil {
		if st.Failed() {
			return nil, &CloudInitError{VM: vm, Status: st, Via: rep.Via, SentAt: rep.SentAt, ReceivedAt: rep.ReceivedAt}
		}
		if st.Degraded {
			warnings = append(append(warnings, fmt.Sprintf("cloud-init in VM %s finished degraded (%s)", vm, st.ExtendedStatus)), st.RecoverableErrors...)
		}
	}
	if err := CheckDeclared(vm, rep); err != nil {
		warnings = append(warnings, err.Error()+"\nSet on_config_mismatch = \"fail\" on the kohaku_vm to fail the create instead.")
	}
	for _, c := range rep.Checks {
		if c.Result == phonehome.CheckUnknown {
			warnings = append(warnings, fmt.Sprintf("VM %s: %s", vm, c.Message()))
		}
	}
	return warnings, nil
}

// Tail returns up to n last lines of a local file, reading at most the last
// 64 KiB. A file that cannot be read gives nil.
func Tail(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	const window = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		if _, err := f.Seek(st.Size()-window, io.SeekStart); err != nil {
			return nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, window))
	if err != nil {
		return nil
	}
	b = bytes.TrimRight(b, "\r\n")
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(l, "\r")
		l = strings.Map(func(r rune) rune {
			if r < 0x20 && r != '\t' {
				return -1
			}
			return r
		}, l)
		lines = append(lines, l)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
