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
