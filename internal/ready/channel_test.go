package ready

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeChannel plays a domain channel: each ReadChannel call delivers the next
// batch of lines, then ends with the batch's error (or blocks until ctx ends
// when the batch says so).
type fakeChannel struct {
	mu      sync.Mutex
	batches []batch
	opens   int
	state   string
}

type batch struct {
	lines [][]byte
	err   error
	block bool
}

func (f *fakeChannel) ReadChannel(ctx context.Context, domain, channel string, line func([]byte) bool) error {
	f.mu.Lock()
	f.opens++
	if len(f.batches) == 0 {
		f.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	f.mu.Unlock()
	for _, l := range b.lines {
		if line(l) {
			return nil
		}
	}
	if b.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return b.err
}

func (f *fakeChannel) DomainState(ctx context.Context, domain string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == "" {
		return "running", nil
	}
	return f.state, nil
}

const testToken = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"

func report(token string) []byte {
	return []byte(`{"token":"` + token + `","instance_id":"i-1","hostname":"web-1","cloud_init":{"status":"done","errors":[]}}`)
}

// Noise and another seed's report are skipped; the stream breaking once is
// survived by reopening; the right report ends the wait.
func TestWaitChannelSkipsNoiseAndSurvivesABrokenStream(t *testing.T) {
	defer func(d time.Duration) { channelRetry = d }(channelRetry)
	channelRetry = 10 * time.Millisecond
	f := &fakeChannel{batches: []batch{
		{lines: [][]byte{[]byte("garbage"), report("ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ")}, err: errors.New("connection lost")},
		{lines: [][]byte{report(testToken)}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := WaitChannel(ctx, f, "web-1", "", "org.kohaku.report.0", testToken)
	if err != nil {
		t.Fatal(err)
	}
	if out.Report.Hostname != "web-1" || out.Report.CloudInit == nil || !out.Report.CloudInit.Finished() || out.Report.ReceivedAt.IsZero() {
		t.Errorf("report = %+v", out.Report)
	}
	if f.opens != 2 {
		t.Errorf("channel opened %d times, want 2 (once more after the broken stream)", f.opens)
	}
}

// A guest that never writes: the wait ends at the deadline and says what it
// saw last.
func TestWaitChannelTimeoutExplainsItself(t *testing.T) {
	f := &fakeChannel{batches: []batch{{lines: [][]byte{report("ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ")}, block: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := WaitChannel(ctx, f, "web-1", "", "org.kohaku.report.0", testToken)
	var we *WaitError
	if !errors.As(err, &we) || !we.TimedOut() || we.Mode != ModeChannel {
		t.Fatalf("err = %v, want a timed-out channel WaitError", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("wait overran its deadline: %s", time.Since(start))
	}
	we.VM = "web-1"
	msg := we.Error()
	for _, want := range []string{"VM web-1 did not report ready: the wait timed out", "org.kohaku.report.0", "another seed's token", "kohaku-report"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, testToken) {
		t.Errorf("message leaks the token:\n%s", msg)
	}
}

// A domain that stopped cannot report: the wait ends at once, not at the
// deadline.
func TestWaitChannelEndsWhenTheDomainStops(t *testing.T) {
	f := &fakeChannel{batches: []batch{{err: errors.New("domain is not running")}}, state: "shut off"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := WaitChannel(ctx, f, "web-1", "", "org.kohaku.report.0", testToken)
	var we *WaitError
	if !errors.As(err, &we) || we.TimedOut() || !strings.Contains(we.Error(), "shut off") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s to notice the stopped domain", time.Since(start))
	}
}

// Heartbeats of a guest's agent (a VM whose report was read before, or a
// restarted agent) are neither the report nor noise to blame.
func TestWaitChannelIgnoresHeartbeats(t *testing.T) {
	hb := []byte(`{"kind":"heartbeat","seq":1,"time":1700000000,"interval":10,"load":[0,0,0],"cpus":1,"memory":{"total_kib":1}}`)
	f := &fakeChannel{batches: []batch{{lines: [][]byte{hb, report(testToken)}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := WaitChannel(ctx, f, "web-1", "", "org.kohaku.report.0", testToken); err != nil {
		t.Fatal(err)
	}
	f = &fakeChannel{batches: []batch{{lines: [][]byte{hb, hb}, block: true}}}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := WaitChannel(ctx, f, "web-1", "", "org.kohaku.report.0", testToken)
	var we *WaitError
	if !errors.As(err, &we) || we.Last != nil {
		t.Fatalf("err = %v; a heartbeat must not be the last thing blamed", err)
	}
}

// A report of cloud-init errors over the channel ends the wait at once (it
// is a report like any other), and Check fails it naming the module, how
// the report came and both clocks: the guest's when it wrote it, the
// host's when it arrived.
func TestWaitChannelErrorReportFailsNamingTheModuleAndTheClocks(t *testing.T) {
	t.Parallel()
	line := []byte(`{"token":"` + testToken + `","hostname":"web-1","sent_at":"2026-11-25T12:00:01.123456Z","cloud_init":{"status":"error","errors":["('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))"]}}`)
	f := &fakeChannel{batches: []batch{{lines: [][]byte{line}, block: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := time.Now()
	out, err := WaitChannel(ctx, f, "web-1", "", "org.kohaku.report.0", testToken)
	if err != nil {
		t.Fatal(err)
	}
	rep := out.Report
	if rep.Via != "channel" || rep.ReceivedAt.Before(before) || !rep.SentAt.Equal(time.Date(2026, 11, 25, 12, 0, 1, 123456000, time.UTC)) {
		t.Errorf("via %q, received %v, sent %v", rep.Via, rep.ReceivedAt, rep.SentAt)
	}
	_, err = Check("web-1", rep)
	var ce *CloudInitError
	if !errors.As(err, &ce) {
		t.Fatalf("Check = %v, want a CloudInitError", err)
	}
	want := "cloud-init in VM web-1 finished with status \"error\":\n" +
		"  - ('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))\n" +
		"Reported through the channel: written by the guest at 2026-11-25T12:00:01.123456Z (guest clock), received at " + rep.ReceivedAt.UTC().Format(time.RFC3339Nano) + " (host clock)."
	if err.Error() != want {
		t.Errorf("message:\n%s\nwant:\n%s", err, want)
	}
}

// The timing line says what it knows: a report from an older reporter
// (no sent_at) gives only the host's clock; a report with neither gives no
// line.
func TestReportTimingWithWhatIsKnown(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 12, 0, 2, 500000000, time.UTC)
	if got := reportTiming("phone_home", time.Time{}, at); got != "Reported through phone home: received at 2026-11-25T12:00:02.5Z (host clock)." {
		t.Errorf("without sent_at: %q", got)
	}
	if got := reportTiming("", time.Time{}, time.Time{}); got != "" {
		t.Errorf("knowing nothing: %q", got)
	}
}

// A report on the channel that names another domain (a disk or report
// carried over from the VM this one replaced) is skipped; the one naming
// this domain ends the wait.
func TestWaitChannelSkipsAnotherDomainsReport(t *testing.T) {
	const mine, other = "7b1f0d44-2c9e-4e1a-8f3d-6a5b4c3d2e1f", "0e3a9c52-5d7a-4c35-9a0b-1f2e3d4c5b6a"
	withDomain := func(uuid, host string) []byte {
		return []byte(`{"token":"` + testToken + `","instance_id":"i-1","hostname":"` + host + `","domain_uuid":"` + uuid + `"}`)
	}
	f := &fakeChannel{batches: []batch{{lines: [][]byte{withDomain(other, "old-vm"), withDomain(mine, "new-vm")}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := WaitChannel(ctx, f, "web-1", strings.ToUpper(mine), "org.kohaku.report.0", testToken)
	if err != nil {
		t.Fatal(err)
	}
	if out.Report.Hostname != "new-vm" {
		t.Errorf("took %s's report", out.Report.Hostname)
	}

	f = &fakeChannel{batches: []batch{{lines: [][]byte{withDomain(other, "old-vm")}, block: true}}}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, err = WaitChannel(ctx2, f, "web-1", mine, "org.kohaku.report.0", testToken)
	var we *WaitError
	if !errors.As(err, &we) || we.Last == nil || !strings.Contains(we.Last.Error(), "stale") {
		t.Fatalf("err = %v, want a timeout whose last sight is the stale report", err)
	}
}
