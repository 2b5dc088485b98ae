package seed

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

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
	os.WriteFile(filepath.Join(dir, "report.json"), cfg, 0o600)
	os.WriteFile(filepath.Join(dir, "instance-id"), []byte("iid-reporter-test\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "status.json"), []byte(statusJSON), 0o644)
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		bodies <- b
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
	if rep.Token != "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd" || rep.InstanceID != "iid-reporter-test" || rep.Hostname == "" {
		t.Errorf("report = %s", rep)
	}
	if rep.CloudInit == nil || !rep.CloudInit.Failed() || !strings.Contains(strings.Join(rep.CloudInit.Errors, " "), "scripts_user") {
		t.Errorf("cloud-init verdict lost: %+v", rep.CloudInit)
	}
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
	go func() {
		// The host opens the channel only after the guest started trying.
		time.Sleep(2500 * time.Millisecond)
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
