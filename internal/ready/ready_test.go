package ready

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

func newServer(t *testing.T) *phonehome.Server {
	t.Helper()
	s := phonehome.NewServer(phonehome.Config{ListenAddr: "127.0.0.1:0"})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestWaitPhoneHomeWakesOnThePost(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	token, _ := phonehome.NewToken()
	w, err := s.Register(token)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	u, err := s.URL(token)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		resp, err := http.PostForm(u, url.Values{"instance_id": {"i-1"}, "hostname": {"web-1"}, "pub_key_ed25519": {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ1c2VkZm9ydGVzdGluZ29ubHkwMDAwMDAwMDAwMDAw root@web-1"}})
		if err == nil {
			resp.Body.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := WaitPhoneHome(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if out.Report.Hostname != "web-1" || out.Report.InstanceID != "i-1" || out.Report.HostKeys["ssh-ed25519"] == "" {
		t.Errorf("report = %+v", out.Report)
	}
	if out.Waited < 40*time.Millisecond || out.Waited > 4*time.Second {
		t.Errorf("waited %s for a post sent after 50ms", out.Waited)
	}
}

func TestWaitPhoneHomeTimeoutExplainsItself(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	token, _ := phonehome.NewToken()
	w, err := s.Register(token)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = WaitPhoneHome(ctx, w)
	var we *WaitError
	if !errors.As(err, &we) || !we.TimedOut() {
		t.Fatalf("error = %v, want a timed-out WaitError", err)
	}
	we.VM, we.URL, we.DomainState = "web-1", "http://10.0.2.2:8787/v1/phone-home/"+token, "running"
	we.SerialLog, we.SerialTail = "/var/log/web-1.log", []string{"[  OK  ] Reached target Cloud-init target.", "web-1 login:"}
	msg := we.Error()
	for _, want := range []string{"VM web-1", "timed out after", "http://10.0.2.2:8787/v1/phone-home/<token>", "The domain is running", "web-1 login:", "/var/log/web-1.log", "guest_agent"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, token) {
		t.Errorf("message leaks the token:\n%s", msg)
	}
}

// fakeAgent answers from a script of replies, one per call, then repeats the last.
type fakeAgent struct {
	replies []func() ([]byte, error)
	calls   atomic.Int32
}

func (f *fakeAgent) AgentReadFile(_ context.Context, domain, path string, _ int) ([]byte, error) {
	if domain != "web-1" || path != ResultFile {
		return nil, fmt.Errorf("unexpected read of %s in %s", path, domain)
	}
	i := int(f.calls.Add(1)) - 1
	if i >= len(f.replies) {
		i = len(f.replies) - 1
	}
	return f.replies[i]()
}

func reply(b string, err error) func() ([]byte, error) {
	return func() ([]byte, error) { return []byte(b), err }
}

func TestPollGuestAgentUntilCloudInitFinished(t *testing.T) {
	t.Parallel()
	failing := `{"v1": {"datasource": "DataSourceNoCloud [seed=/dev/sr0][dsmode=net]", "errors": ["('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))"]}}`
	a := &fakeAgent{replies: []func() ([]byte, error){
		reply("", errors.New("Guest agent is not responding: QEMU guest agent is not connected")),
		reply("", errors.New("file not found in the guest: No such file or directory")),
		reply(failing, nil),
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := PollGuestAgent(ctx, a, "web-1", 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if a.calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", a.calls.Load())
	}
	_, err = Check("web-1", out.Report)
	var ce *CloudInitError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "scripts_user") || !strings.Contains(err.Error(), "VM web-1") {
		t.Errorf("Check error = %v, want the failing module named", err)
	}
}

func TestPollGuestAgentTimeoutKeepsLastAnswer(t *testing.T) {
	t.Parallel()
	a := &fakeAgent{replies: []func() ([]byte, error){reply("", errors.New("QEMU guest agent is not connected"))}}
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	_, err := PollGuestAgent(ctx, a, "web-1", 10*time.Millisecond)
	var we *WaitError
	if !errors.As(err, &we) || !we.TimedOut() || we.Last == nil {
		t.Fatalf("error = %#v", err)
	}
	if !strings.Contains(we.Error(), "guest agent is not connected") {
		t.Errorf("message lacks the last answer: %s", we.Error())
	}
}

func TestCheckDegradedIsAWarning(t *testing.T) {
	t.Parallel()
	st, err := phonehome.ParseCloudInitStatus([]byte(`{"status": "done", "extended_status": "degraded done", "errors": [], "recoverable_errors": {"WARNING": ["Failed at merging in cloud config part from part-001"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	warns, err := Check("web-1", &phonehome.Report{CloudInit: st})
	if err != nil || len(warns) < 2 || !strings.Contains(strings.Join(warns, "\n"), "merging") {
		t.Errorf("warnings=%v err=%v", warns, err)
	}
	if w, err := Check("web-1", &phonehome.Report{Kind: phonehome.KindForm}); w != nil || err != nil {
		t.Errorf("a plain phone_home post must pass: %v %v", w, err)
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "serial.log")
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\x1b[0m\r\n", i)
	}
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := Tail(f, 3)
	if strings.Join(got, "|") != "line 98[0m|line 99[0m|line 100[0m" {
		t.Errorf("Tail = %q", got)
	}
	if Tail(filepath.Join(t.TempDir(), "missing"), 3) != nil {
		t.Error("missing file gave lines")
	}
}

// A guest that lacks what its seed declared is a degraded readiness: a
// warning naming what is missing (and how to make it fail instead), while
// CheckDeclared gives the same as the error of on_config_mismatch =
// "fail". Checks that passed are silent; checks that could not run are
// warnings but never an error.
func TestCheckDeclaredMismatch(t *testing.T) {
	t.Parallel()
	rep, err := phonehome.ParseReport("application/json", []byte(`{"hostname": "web-1", "cloud_init": {"status": "done", "errors": []}, "checks": [
		{"what": "IPv4 address", "expected": "10.0.2.15/24 on enp1s0 (52:54:00:12:34:56)", "found": "10.0.2.15/24", "ok": true},
		{"what": "IPv4 default route", "expected": "via 10.0.2.2 on enp1s0 (52:54:00:12:34:56)", "found": "none", "ok": false},
		{"what": "nameserver", "expected": "192.0.2.53", "found": "10.0.2.3 (/etc/resolv.conf)", "ok": false},
		{"what": "search domain", "expected": "example.com", "found": "resolv.conf unreadable", "ok": null}]}`))
	if err != nil {
		t.Fatal(err)
	}
	warns, err := Check("web-1", rep)
	if err != nil {
		t.Fatalf("a mismatch must not fail Check: %v", err)
	}
	want := "VM web-1 is not configured as its seed declared:\n" +
		"  - no IPv4 default route via 10.0.2.2 on enp1s0 (52:54:00:12:34:56); found: none\n" +
		"  - no nameserver 192.0.2.53; found: 10.0.2.3 (/etc/resolv.conf)\n" +
		"Set on_config_mismatch = \"fail\" on the kohaku_vm to fail the create instead."
	if len(warns) != 2 || warns[0] != want || warns[1] != "VM web-1: could not check search domain example.com: resolv.conf unreadable" {
		t.Errorf("warnings:\n%s", strings.Join(warns, "\n---\n"))
	}
	err = CheckDeclared("web-1", rep)
	var me *MismatchError
	if !errors.As(err, &me) || len(me.Mismatches) != 2 || !strings.HasPrefix(err.Error(), "VM web-1 is not configured as its seed declared:\n  - no IPv4 default route via 10.0.2.2") {
		t.Errorf("CheckDeclared = %v", err)
	}

	// A guest configured as declared: no warning, no error.
	good, _ := phonehome.ParseReport("application/json", []byte(`{"hostname": "web-1", "checks": [{"what": "hostname", "expected": "web-1", "found": "web-1", "ok": true}]}`))
	if w, err := Check("web-1", good); w != nil || err != nil || CheckDeclared("web-1", good) != nil {
		t.Errorf("a guest configured as declared: %v %v", w, err)
	}
	// cloud-init's own failure wins over a mismatch.
	failed, _ := phonehome.ParseReport("application/json", []byte(`{"hostname": "web-1", "cloud_init": {"status": "error", "errors": ["boom"]}, "checks": [{"what": "hostname", "expected": "web-1", "found": "x", "ok": false}]}`))
	var ce *CloudInitError
	if _, err := Check("web-1", failed); !errors.As(err, &ce) {
		t.Errorf("cloud-init error lost: %v", err)
	}
}

// pathAgent answers AgentReadFile per path: each path's replies in turn,
// the last one repeated.
type pathAgent struct {
	replies map[string][]func() ([]byte, error)
	calls   map[string]int
}

func (a *pathAgent) AgentReadFile(_ context.Context, _, path string, _ int) ([]byte, error) {
	r := a.replies[path]
	if len(r) == 0 {
		return nil, errors.New("file not found in the guest")
	}
	i := a.calls[path]
	a.calls[path]++
	if i >= len(r) {
		i = len(r) - 1
	}
	return r[i]()
}

// Through the guest agent a seed with the first-boot reporter gives the
// same checks as the channel: once cloud-init finished, the reporter's
// report is read from ReportFile (another seed's is ignored); without one
// within the grace, cloud-init's result stands with a check saying the
// declaration could not be checked.
func TestPollGuestAgentReadsTheReporterReport(t *testing.T) {
	done := `{"v1": {"datasource": "DataSourceNoCloud", "errors": []}}`
	report := func(token string) string {
		return `{"token": "` + token + `", "hostname": "web-1", "cloud_init": {"status": "done", "errors": []}, "routes": [{"destination": "10.0.2.0/24", "gateway": "", "interface": "enp1s0"}], "dns_servers": ["10.0.2.3"], "checks": [{"what": "IPv4 default route", "expected": "via 10.0.2.2 on enp1s0 (52:54:00:12:34:56)", "found": "none", "ok": false}]}`
	}
	token, other := "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd", "ZZCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"
	a := &pathAgent{calls: map[string]int{}, replies: map[string][]func() ([]byte, error){
		ResultFile: {reply(done, nil)},
		ReportFile: {reply("", errors.New("file not found in the guest")), reply(report(other), nil), reply(report(token), nil)},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := PollGuestAgentReport(ctx, a, "web-1", "", 10*time.Millisecond, token)
	if err != nil {
		t.Fatal(err)
	}
	if a.calls[ReportFile] != 3 || out.Report.Token != "" || len(out.Report.Routes) != 1 || len(out.Report.DNSServers) != 1 {
		t.Errorf("calls %v, report %+v", a.calls, out.Report)
	}
	if err := CheckDeclared("web-1", out.Report); err == nil || !strings.Contains(err.Error(), "no IPv4 default route via 10.0.2.2") {
		t.Errorf("CheckDeclared = %v", err)
	}

	// No reporter report within the grace.
	old := reportGrace
	reportGrace = 100 * time.Millisecond
	defer func() { reportGrace = old }()
	a = &pathAgent{calls: map[string]int{}, replies: map[string][]func() ([]byte, error){ResultFile: {reply(done, nil)}}}
	out, err = PollGuestAgentReport(ctx, a, "web-1", "", 10*time.Millisecond, token)
	if err != nil {
		t.Fatal(err)
	}
	warns, err := Check("web-1", out.Report)
	if err != nil || len(warns) != 1 || !strings.Contains(warns[0], "could not check declared configuration: the first-boot reporter's /run/kohaku/report.json") {
		t.Errorf("warnings %q, err %v", warns, err)
	}
	// No reporter in the seed: cloud-init's result at once, nothing checked.
	a = &pathAgent{calls: map[string]int{}, replies: map[string][]func() ([]byte, error){ResultFile: {reply(done, nil)}}}
	if out, err = PollGuestAgentReport(ctx, a, "web-1", "", 10*time.Millisecond, ""); err != nil || a.calls[ReportFile] != 0 || len(out.Report.Checks) != 0 {
		t.Errorf("without a reporter: %v %v %+v", err, a.calls, out)
	}
}
