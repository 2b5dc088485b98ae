package seed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// writeReporterFile writes one of the files the reporter reads, failing
// the test if it cannot.
func writeReporterFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}

// runReporter runs the embedded first-boot reporter with python3 against
// files in dir, as the guest would run it.
func runReporter(t *testing.T, dir, url, statusJSON string, env ...string) ([]byte, error) {
	t.Helper()
	py := requireTool(t, "python3")
	script := filepath.Join(dir, "report.py")
	if err := os.WriteFile(script, reporterScript, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]string{"url": url, "token": "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"})
	writeReporterFile(t, filepath.Join(dir, "report.json"), cfg, 0o600)
	writeReporterFile(t, filepath.Join(dir, "instance-id"), []byte("iid-reporter-test\n"), 0o644)
	writeReporterFile(t, filepath.Join(dir, "status.json"), []byte(statusJSON), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script)
	cmd.Env = append(os.Environ(),
		"KOHAKU_REPORT_CONFIG="+filepath.Join(dir, "report.json"),
		"KOHAKU_REPORT_PORT="+filepath.Join(dir, "port"),
		"KOHAKU_REPORT_STATE="+filepath.Join(dir, "state"),
		"KOHAKU_REPORT_SAVE="+filepath.Join(dir, "run", "report.json"),
		"KOHAKU_REPORT_INSTANCE="+filepath.Join(dir, "instance-id"),
		"KOHAKU_REPORT_STATUS_CMD=cat "+filepath.Join(dir, "status.json"),
	)
	cmd.Env = append(cmd.Env, env...)
	return cmd.CombinedOutput()
}

// sameReportButStamp checks that two copies of a report (the one left for
// the guest agent and the one delivered) say the same but for their
// "sent_at", which each copy has and the delivered one no earlier.
func sameReportButStamp(saved, delivered []byte) error {
	var a, b map[string]any
	if err := json.Unmarshal(saved, &a); err != nil {
		return fmt.Errorf("saved: %v", err)
	}
	if err := json.Unmarshal(bytes.TrimSpace(delivered), &b); err != nil {
		return fmt.Errorf("delivered: %v", err)
	}
	var stamps [2]time.Time
	for i, m := range []map[string]any{a, b} {
		s, _ := m[phonehome.SentAtField].(string)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("%s %q: %v", phonehome.SentAtField, s, err)
		}
		stamps[i] = t
		delete(m, phonehome.SentAtField)
	}
	if stamps[1].Before(stamps[0]) {
		return fmt.Errorf("delivered copy stamped %s, before the saved one (%s)", stamps[1], stamps[0])
	}
	if !reflect.DeepEqual(a, b) {
		return errors.New("they differ beyond sent_at")
	}
	return nil
}

// checkSentAt: a report's sent_at is the reporter's clock (this machine's,
// in the test) at a try within [before, after], to the microsecond, in UTC.
func checkSentAt(t *testing.T, rep *phonehome.Report, raw []byte, before, after time.Time) {
	t.Helper()
	if !regexp.MustCompile(`"sent_at": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"`).Match(raw) {
		t.Errorf("sent_at is not RFC 3339 in UTC to the microsecond: %s", raw)
	}
	if rep.SentAt.IsZero() || rep.SentAt.Before(before.Truncate(time.Microsecond)) || rep.SentAt.After(after) {
		t.Errorf("sent_at %s is outside the run [%s, %s]", rep.SentAt, before, after)
	}
}

// The reporter posts a report the provider's parser accepts, with the
// seed's token and cloud-init's verdict, once per instance; a channel with
// no reader on the host does not hold it up.
func TestReporterScriptPostsAParsableReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A FIFO nobody reads: like a virtio-serial port the host has not opened.
	if err := syscall.Mkfifo(filepath.Join(dir, "port"), 0o600); err != nil {
		t.Fatal(err)
	}
	bodies := make(chan []byte, 4)
	sigs := make(chan string, 4)
	var tries atomic.Int32
	var refused, posted atomic.Int64 // unix nanoseconds
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if tries.Add(1) == 1 {
			// The first try fails: the reporter tries again later.
			refused.Store(time.Now().UnixNano())
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		posted.Store(time.Now().UnixNano())
		bodies <- b
		sigs <- r.Header.Get(phonehome.SignatureHeader)
	}))
	defer srv.Close()
	status := `{"status": "error", "errors": ["('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))"], "detail": "x", "datasource": "nocloud", "boot_status_code": "enabled-by-generator", "last_update": "Thu, 01 Jan 1970 00:02:20 +0000", "_schema_version": "1", "schemas": {"1": {}}}`
	start := time.Now()
	out, err := runReporter(t, dir, srv.URL+"/v1/phone-home/x", status)
	if err != nil {
		t.Fatalf("reporter failed: %v\n%s", err, out)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("reporter took %s: the unread channel held it up", time.Since(start))
	}
	var body []byte
	select {
	case body = <-bodies:
	default:
		t.Fatalf("nothing was posted; reporter said:\n%s", out)
	}
	rep, err := phonehome.ParseReport("application/json", body)
	if err != nil {
		t.Fatalf("the provider would reject the report: %v\n%s", err, body)
	}
	// The post does not carry the token; it is signed with it.
	if rep.Token != "" || rep.InstanceID != "iid-reporter-test" || rep.Hostname == "" {
		t.Errorf("report = %s", rep)
	}
	if sig := <-sigs; sig != phonehome.Sign("AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd", body) {
		t.Errorf("signature %q does not match the body under the token", sig)
	}
	if rep.CloudInit == nil || !rep.CloudInit.Failed() || !strings.Contains(strings.Join(rep.CloudInit.Errors, " "), "scripts_user") {
		t.Errorf("cloud-init verdict lost: %+v", rep.CloudInit)
	}
	// Stamped when the post that got through was made, not when the first
	// one (answered 503) was.
	checkSentAt(t, rep, body, time.Unix(0, refused.Load()), time.Unix(0, posted.Load()))
	// Once per instance: a second run posts nothing.
	if out, err := runReporter(t, dir, srv.URL+"/v1/phone-home/x", status); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	select {
	case <-bodies:
		t.Error("the reporter posted twice for one instance")
	default:
	}
}

// With no URL the reporter waits for the host to open the channel and then
// writes one parsable JSON line; nobody on the host holds it open at first.
func TestReporterScriptWritesTheChannel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := filepath.Join(dir, "port")
	if err := syscall.Mkfifo(port, 0o600); err != nil {
		t.Fatal(err)
	}
	lines := make(chan []byte, 1)
	var opened atomic.Int64 // unix nanoseconds
	go func() {
		// The host opens the channel only after the guest started trying.
		time.Sleep(2500 * time.Millisecond)
		opened.Store(time.Now().UnixNano())
		f, err := os.Open(port)
		if err != nil {
			lines <- nil
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		lines <- b
	}()
	status := `{"status": "done", "errors": [], "recoverable_errors": {}, "datasource": "nocloud", "_schema_version": "1", "schemas": {"1": {}}}`
	out, err := runReporter(t, dir, "", status)
	if err != nil {
		t.Fatalf("reporter failed: %v\n%s", err, out)
	}
	var got []byte
	select {
	case got = <-lines:
	case <-time.After(10 * time.Second):
		t.Fatal("the reporter returned, but nothing reached the channel")
	}
	var reports int
	for _, line := range strings.Split(string(got), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		reports++
		rep, err := phonehome.ParseReport("application/json", []byte(line))
		if err != nil {
			t.Fatalf("the provider would reject the line: %v\n%q", err, line)
		}
		if rep.Token != "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd" || rep.InstanceID != "iid-reporter-test" || rep.CloudInit == nil || !rep.CloudInit.Finished() {
			t.Errorf("report = %s", rep)
		}
		// Stamped at the try that got through, after the host opened the
		// channel, not when the first try found nobody reading.
		checkSentAt(t, rep, []byte(line), time.Unix(0, opened.Load()), time.Now())
	}
	if reports != 1 {
		t.Errorf("%d reports on the channel, want 1: %q", reports, got)
	}
}

// A reporter with nowhere to report gives up at its deadline instead of
// blocking on a channel nobody reads.
func TestReporterScriptGivesUpAtItsDeadline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "port"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runReporter(t, dir, "", `{"status": "done", "errors": []}`, "KOHAKU_REPORT_DEADLINE=2")
	if err == nil {
		t.Fatalf("the reporter says it reported, with nobody reading:\n%s", out)
	}
	if _, serr := os.Stat(filepath.Join(dir, "state")); serr == nil {
		t.Error("the reporter stamped the instance as reported")
	}
}
