package phonehome

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseCloudInitStatusFixtures(t *testing.T) {
	t.Parallel()
	runparts := "Runparts: 1 failures (runcmd) in 1 attempted commands"
	tests := []struct {
		file           string
		status, ext    string
		source         string
		datasource     string
		errors         int
		errorHas       string
		recoverable    []string // prefixes, in order
		degraded       bool
		failed         bool
		finished       bool
		bootStatusCode string
	}{
		{file: "22.4-status-done.json", status: "done", ext: "done", source: "status", datasource: "nocloud", finished: true, bootStatusCode: "enabled-by-generator"},
		{file: "22.4-status-error.json", status: "error", ext: "error", source: "status", datasource: "nocloud", errors: 1, errorHas: "('scripts-user', RuntimeError('" + runparts, failed: true, finished: true, bootStatusCode: "enabled-by-generator"},
		{file: "22.4-status-running.json", status: "running", ext: "running", source: "status", datasource: "nocloud", bootStatusCode: "enabled-by-generator"},
		{file: "22.4-result-done.json", status: "done", ext: "done", source: "result.json", datasource: "nocloud", finished: true},
		{file: "22.4-result-error.json", status: "error", ext: "error", source: "result.json", datasource: "configdrive", errors: 1, errorHas: runparts, failed: true, finished: true},
		{file: "22.4-status.json-running.json", status: "running", ext: "running", source: "status.json", datasource: "nocloud"},
		{file: "25.1-status-done.json", status: "done", ext: "done", source: "status", datasource: "nocloud", finished: true, bootStatusCode: "enabled-by-generator"},
		{file: "25.1-status-degraded.json", status: "done", ext: "degraded done", source: "status", datasource: "nocloud",
			recoverable: []string{"DEPRECATED: Deprecated cloud-config provided: chpasswd.list", "WARNING: No template found"}, degraded: true, finished: true, bootStatusCode: "enabled-by-generator"},
		{file: "25.1-status-error.json", status: "error", ext: "error - done", source: "status", datasource: "nocloud", errors: 1, errorHas: "('scripts_user', RuntimeError('" + runparts,
			recoverable: []string{"WARNING: Failed to run module scripts_user"}, failed: true, finished: true, bootStatusCode: "enabled-by-generator"},
		{file: "25.1-status-running.json", status: "running", ext: "running", source: "status", datasource: "nocloud", bootStatusCode: "enabled-by-generator"},
		{file: "25.1-result-done.json", status: "done", ext: "done", source: "result.json", datasource: "nocloud", finished: true},
		{file: "25.1-status.json-degraded.json", status: "done", ext: "degraded done", source: "status.json", datasource: "nocloud",
			recoverable: []string{"DEPRECATED: ", "WARNING: "}, degraded: true, finished: true},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			c, err := ParseCloudInitStatus(readFixture(t, "cloudinit/"+tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if c.Status != tc.status || c.ExtendedStatus != tc.ext || c.Source != tc.source || c.Datasource != tc.datasource {
				t.Errorf("status %q ext %q source %q datasource %q, want %q %q %q %q",
					c.Status, c.ExtendedStatus, c.Source, c.Datasource, tc.status, tc.ext, tc.source, tc.datasource)
			}
			if len(c.Errors) != tc.errors {
				t.Errorf("errors %q, want %d", c.Errors, tc.errors)
			} else if tc.errorHas != "" && !strings.Contains(c.Errors[0], tc.errorHas) {
				t.Errorf("error %q lacks %q", c.Errors[0], tc.errorHas)
			}
			if len(c.RecoverableErrors) != len(tc.recoverable) {
				t.Errorf("recoverable %q, want %d", c.RecoverableErrors, len(tc.recoverable))
			} else {
				for i, p := range tc.recoverable {
					if !strings.HasPrefix(c.RecoverableErrors[i], p) {
						t.Errorf("recoverable[%d] = %q, want prefix %q", i, c.RecoverableErrors[i], p)
					}
				}
			}
			if c.Degraded != tc.degraded || c.Failed() != tc.failed || c.Finished() != tc.finished {
				t.Errorf("degraded %v failed %v finished %v, want %v %v %v", c.Degraded, c.Failed(), c.Finished(), tc.degraded, tc.failed, tc.finished)
			}
			if c.BootStatusCode != tc.bootStatusCode {
				t.Errorf("boot_status_code %q, want %q", c.BootStatusCode, tc.bootStatusCode)
			}
		})
	}
}

func TestParseCloudInitStatusCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr bool
		check   func(t *testing.T, c *CloudInitStatus)
	}{
		{name: "embedded as a JSON string", in: `"{\"v1\": {\"datasource\": \"DataSourceNoCloud [seed=/dev/sr0]\", \"errors\": []}}\n"`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Status != "done" || c.Source != "result.json" || c.Detail != "DataSourceNoCloud [seed=/dev/sr0]" {
					t.Errorf("%+v", c)
				}
			}},
		{name: "error with an empty errors list (seen on 24.x)", in: `{"status": "error", "extended_status": "error", "errors": [], "recoverable_errors": {}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if !c.Failed() || c.Degraded || !c.Finished() {
					t.Errorf("failed %v degraded %v finished %v", c.Failed(), c.Degraded, c.Finished())
				}
			}},
		{name: "error while still running (24.3+)", in: `{"status": "error", "extended_status": "error - running", "errors": ["x"]}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if !c.Failed() || c.Finished() {
					t.Errorf("failed %v finished %v", c.Failed(), c.Finished())
				}
			}},
		{name: "stage errors missing from the top are added once", in: `{"status": "done", "errors": ["a"], "init": {"errors": ["a", "b"], "recoverable_errors": {"warning": ["w"]}}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if !slices.Equal(c.Errors, []string{"a", "b"}) || !slices.Equal(c.RecoverableErrors, []string{"WARNING: w"}) {
					t.Errorf("errors %q recoverable %q", c.Errors, c.RecoverableErrors)
				}
			}},
		{name: "levels most severe first, unknown last", in: `{"status": "done", "recoverable_errors": {"WARNING": ["w"], "NOTICE": ["n"], "CRITICAL": ["c"], "DEPRECATED": ["d"], "ERROR": ["e"]}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				want := []string{"CRITICAL: c", "ERROR: e", "DEPRECATED: d", "WARNING: w", "NOTICE: n"}
				if !slices.Equal(c.RecoverableErrors, want) || !c.Degraded {
					t.Errorf("%q degraded %v", c.RecoverableErrors, c.Degraded)
				}
			}},
		{name: "the gateway4/gateway6 deprecation Kohaku writes on purpose (25.1) is not degraded",
			in: "{\"status\": \"done\", \"extended_status\": \"degraded done\", \"recoverable_errors\": {\"DEPRECATED\": [\"The use of `gateway4` and `gateway6` is deprecated in 22.4 and scheduled to be removed in 27.4. For more info check out: https://docs.cloud-init.io/en/latest/topics/network-config-format-v2.html\"]}}",
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Degraded || c.Failed() || len(c.RecoverableErrors) != 1 {
					t.Errorf("degraded %v failed %v recoverable %q", c.Degraded, c.Failed(), c.RecoverableErrors)
				}
			}},
		{name: "status.json: a warning before any stage started is not degraded (as status output says of it)",
			in: `{"v1": {"datasource": "DataSourceNoCloud [seed=/dev/sr0]", "init": {"start": null, "finished": null, "errors": [], "recoverable_errors": {"WARNING": ["No template found in /etc/cloud/templates for template source.deb822"]}}}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Status != "not started" || c.Degraded || len(c.RecoverableErrors) != 1 {
					t.Errorf("%+v", c)
				}
			}},
		{name: "status output: not started with a warning is not degraded",
			in: `{"status": "not started", "recoverable_errors": {"WARNING": ["w"]}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Degraded {
					t.Errorf("%+v", c)
				}
			}},
		{name: "status.json: only the gateway4/gateway6 deprecation is not degraded, as in status output",
			in: "{\"v1\": {\"datasource\": \"DataSourceNoCloud\", \"init\": {\"start\": 1, \"finished\": 2, \"errors\": [], \"recoverable_errors\": {\"DEPRECATED\": [\"The use of `gateway4` and `gateway6` is deprecated in 22.4\"]}}}}",
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Degraded || c.ExtendedStatus != "degraded done" {
					t.Errorf("degraded %v extended %q", c.Degraded, c.ExtendedStatus)
				}
			}},
		{name: "that deprecation with any other recoverable error is degraded",
			in: "{\"status\": \"done\", \"extended_status\": \"degraded done\", \"recoverable_errors\": {\"DEPRECATED\": [\"The use of `gateway4` and `gateway6` is deprecated in 22.4\", \"Key 'x' is deprecated\"]}}",
			check: func(t *testing.T, c *CloudInitStatus) {
				if !c.Degraded {
					t.Errorf("not degraded: %q", c.RecoverableErrors)
				}
			}},
		{name: "a level named errors is not a stage", in: `{"status": "done", "recoverable_errors": {"errors": ["w"]}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if len(c.Errors) != 0 || !slices.Equal(c.RecoverableErrors, []string{"ERRORS: w"}) || !c.Degraded {
					t.Errorf("errors %q recoverable %q degraded %v", c.Errors, c.RecoverableErrors, c.Degraded)
				}
			}},
		{name: "levels that normalise alike merge in key order", in: `{"status": "done", "recoverable_errors": {"warning": ["a"], "WARNING": ["b"], "Warning!": ["c"]}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if want := []string{"WARNING: b", "WARNING: c", "WARNING: a"}; !slices.Equal(c.RecoverableErrors, want) {
					t.Errorf("%q, want %q", c.RecoverableErrors, want)
				}
			}},
		{name: "22.4 fields only under schemas", in: `{"_schema_version": "1", "schemas": {"1": {"status": "done", "errors": []}}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Status != "done" {
					t.Errorf("%+v", c)
				}
			}},
		{name: "status.json before any stage", in: `{"v1": {"datasource": null, "init": {"errors": [], "start": null, "finished": null}, "stage": null}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Status != "not started" || c.Finished() {
					t.Errorf("%+v", c)
				}
			}},
		{name: "status.json degraded while running", in: `{"v1": {"stage": "modules-config", "init": {"errors": [], "recoverable_errors": {"WARNING": ["w"]}, "start": 1, "finished": 2}}}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Status != "running" || c.ExtendedStatus != "degraded running" || !c.Degraded {
					t.Errorf("%+v", c)
				}
			}},
		{name: "control characters in messages are replaced", in: "{\"status\": \"error\", \"errors\": [\"bad\\u0000\\u202e thing\\nline 2\"]}",
			check: func(t *testing.T, c *CloudInitStatus) {
				if c.Errors[0] != "bad\uFFFD\uFFFD thing\nline 2" {
					t.Errorf("%q", c.Errors[0])
				}
			}},
		{name: "non-string error entries are kept as JSON", in: `{"status": "error", "errors": [{"module": "x"}, 3]}`,
			check: func(t *testing.T, c *CloudInitStatus) {
				if !slices.Equal(c.Errors, []string{`{"module":"x"}`, "3"}) {
					t.Errorf("%q", c.Errors)
				}
			}},
		{name: "not JSON", in: `status: done`, wantErr: true},
		{name: "a list", in: `["done"]`, wantErr: true},
		{name: "unknown object", in: `{"state": "done"}`, wantErr: true},
		{name: "empty status", in: `{"status": ""}`, wantErr: true},
		{name: "status not a string", in: `{"status": 1}`, wantErr: true},
		{name: "errors not a list", in: `{"status": "done", "errors": "none"}`, wantErr: true},
		{name: "recoverable not an object", in: `{"status": "done", "recoverable_errors": ["w"]}`, wantErr: true},
		{name: "v1 not an object", in: `{"v1": []}`, wantErr: true},
		{name: "stage start not a number", in: `{"v1": {"init": {"start": "soon"}}}`, wantErr: true},
		{name: "too many messages", in: `{"status": "error", "errors": [` + manyStrings(maxStatusMessages+1) + `]}`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseCloudInitStatus([]byte(tc.in))
			if tc.wantErr {
				if err == nil || !errors.Is(err, ErrMalformed) {
					t.Fatalf("got %+v, %v; want an ErrMalformed", c, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func manyStrings(n int) string {
	l := make([]string, n)
	for i := range l {
		b, _ := json.Marshal(strings.Repeat("e", i%7+1) + string(rune('a'+i%26)) + strings.Repeat("z", i/26))
		l[i] = string(b)
	}
	return strings.Join(l, ",")
}

// TestParseCloudInitStatusBoundedWork: a 64 KiB document cannot make the
// parser do quadratic work. Before the message sets were capped as they
// fill, 8,700 distinct one-line errors took about 0.9 s and 2,000 nested
// "schemas" about 3.9 s, over a thousand times a plain json.Unmarshal of the
// same bytes. The bound is relative to that, measured in the same run, so
// the race detector and a loaded machine slow both sides alike.
func TestParseCloudInitStatusBoundedWork(t *testing.T) {
	t.Parallel()
	var l []string
	for i, n := 0, 0; n < 60000; i++ {
		b, _ := json.Marshal(strconv.Itoa(i))
		l = append(l, string(b))
		n += len(b) + 1
	}
	stages := make([]string, 0, 200)
	for i := range 200 {
		stages = append(stages, fmt.Sprintf(`"stage-%d": {"errors": [%s]}`, i, strings.Join(l[i*40:i*40+40], ",")))
	}
	tests := []struct {
		name string
		doc  string
	}{
		{"many distinct errors", `{"status": "done", "errors": [` + strings.Join(l, ",") + `]}`},
		{"many distinct warnings", `{"status": "done", "recoverable_errors": {"WARNING": [` + strings.Join(l, ",") + `]}}`},
		{"many stages", `{"status": "done", ` + strings.Join(stages, ",") + `}`},
		{"nested schemas", strings.Repeat(`{"schemas": {"1": `, 2000) + `{"status": "done"}` + strings.Repeat(`}}`, 2000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(`{"cloud_init": ` + tc.doc + `}`)
			if len(body) > MaxBodyBytes {
				t.Fatalf("test body of %d bytes is over the limit", len(body))
			}
			if _, err := ParseReport(jsonType, body); !errors.Is(err, ErrMalformed) {
				t.Errorf("got %v, want ErrMalformed", err)
			}
			parse := fastest(3, func() { _, _ = ParseReport(jsonType, body) })
			plain := fastest(3, func() {
				var v any
				_ = json.Unmarshal(body, &v)
			})
			t.Logf("ParseReport %v, json.Unmarshal %v", parse, plain)
			if parse > 20*time.Millisecond && parse > 50*plain {
				t.Errorf("ParseReport took %v, over 50 times json.Unmarshal's %v", parse, plain)
			}
		})
	}
}

func fastest(n int, f func()) time.Duration {
	best := time.Duration(1<<63 - 1)
	for range n {
		start := time.Now()
		f()
		best = min(best, time.Since(start))
	}
	return best
}
