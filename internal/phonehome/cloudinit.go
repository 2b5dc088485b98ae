package phonehome

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// CloudInitStatus is cloud-init's own verdict on the boot, read from any of
// the documents a guest can send:
//
//   - the output of `cloud-init status --format json`, in the 22.4 field set
//     (status, detail, errors, datasource, boot_status_code, last_update,
//     _schema_version, schemas) or the 23.4+/25.x one (the same plus
//     extended_status, recoverable_errors and one object per boot stage:
//     init-local, init, modules-config, modules-final, each with errors and
//     recoverable_errors);
//   - /run/cloud-init/result.json ({"v1": {"datasource", "errors"}}), which
//     cloud-init writes only when the last stage has finished;
//   - /run/cloud-init/status.json ({"v1": {"datasource", "stage", <stage>: {...}}}).
type CloudInitStatus struct {
	// Status is cloud-init's "status" value as printed: "done", "error",
	// "running", "not run" (22.4) / "not started" (24.1+), "disabled".
	// Degradation is not part of it: 23.4+ prints status "done" together
	// with extended_status "degraded done".
	Status string
	// ExtendedStatus is "extended_status" (23.4+): "done", "degraded done",
	// "degraded running", "error" (23.4-24.2) or "error - done" /
	// "error - running" (24.3+). Equal to Status for older documents.
	ExtendedStatus string
	// Errors are unrecoverable errors: the top-level list plus any stage
	// error not already in it.
	Errors []string
	// RecoverableErrors are "LEVEL: message" (LEVEL being WARNING,
	// DEPRECATED, ERROR or CRITICAL), the most severe level first.
	RecoverableErrors []string
	// Degraded means cloud-init finished or runs without unrecoverable
	// errors but with recoverable ones (exit code 2 of `cloud-init status`).
	Degraded bool
	// Datasource is the short datasource name ("nocloud", "configdrive").
	Datasource string
	// Detail is the human description ("DataSourceNoCloud [seed=/dev/sr0]...").
	Detail string
	// BootStatusCode is "boot_status_code" ("enabled-by-generator", ...).
	BootStatusCode string
	// LastUpdate is "last_update" as printed by cloud-init.
	LastUpdate string
	// Source names the document: "status" (cloud-init status --format json),
	// "result.json" or "status.json".
	Source string
}

// Finished reports whether cloud-init has stopped running this boot, with or
// without errors.
func (c *CloudInitStatus) Finished() bool {
	switch c.Status {
	case "done":
		return true
	case "error":
		return !strings.HasSuffix(c.ExtendedStatus, "running")
	}
	return false
}

// Failed reports whether cloud-init recorded an unrecoverable error.
func (c *CloudInitStatus) Failed() bool {
	return c.Status == "error" || len(c.Errors) > 0
}

// Limits on what a status document may carry into a Report.
const (
	maxStatusMessages = 256
	maxStatusMessage  = 4096
	maxStatusWord     = 256
)

// recoverableLevels are cloud-init's log levels for recoverable errors, most
// severe first (its documentation lists them in increasing criticality).
var recoverableLevels = []string{"CRITICAL", "ERROR", "DEPRECATED", "WARNING"}

// stageOrder is cloud-init's run order of its boot stages.
var stageOrder = []string{"init-local", "init", "modules-config", "modules-final"}

// ParseCloudInitStatus parses `cloud-init status --format json` output (22.4
// through 25.x), /run/cloud-init/result.json or /run/cloud-init/status.json.
// The document may also arrive as a JSON string holding one of those (a
// reporter that embeds the file's text). Errors wrap ErrMalformed.
func ParseCloudInitStatus(data []byte) (*CloudInitStatus, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var inner string
		if err := json.Unmarshal(data, &inner); err != nil {
			return nil, fmt.Errorf("%w: cloud_init: %v", ErrMalformed, err)
		}
		data = bytes.TrimSpace([]byte(inner))
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%w: cloud_init: not a JSON object", ErrMalformed)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: cloud_init: %v", ErrMalformed, err)
	}
	_, hasStatus := top["status"]
	if v1, ok := top["v1"]; ok && !hasStatus {
		return parseV1(v1)
	}
	if !hasStatus {
		// Ubuntu keeps a copy of the 22.4 fields under schemas."1".
		if s, ok := top["schemas"]; ok {
			var schemas map[string]json.RawMessage
			if json.Unmarshal(s, &schemas) == nil && schemas["1"] != nil {
				return ParseCloudInitStatus(schemas["1"])
			}
		}
		return nil, fmt.Errorf("%w: cloud_init: neither cloud-init status output nor result.json/status.json", ErrMalformed)
	}
	return parseStatusOutput(top)
}

// parseStatusOutput reads the `cloud-init status --format json` field sets.
func parseStatusOutput(top map[string]json.RawMessage) (*CloudInitStatus, error) {
	c := &CloudInitStatus{Source: "status"}
	var err error
	word := func(key string) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = optString(top[key], key, maxStatusWord)
		return cleanLine(s, maxStatusWord)
	}
	c.Status = word("status")
	c.ExtendedStatus = word("extended_status")
	c.Datasource = word("datasource")
	c.BootStatusCode = word("boot_status_code")
	c.LastUpdate = word("last_update")
	if err != nil {
		return nil, err
	}
	if c.Detail, err = optString(top["detail"], "detail", maxStatusMessage); err != nil {
		return nil, err
	}
	if c.Status == "" {
		return nil, fmt.Errorf("%w: cloud_init: empty status", ErrMalformed)
	}
	if c.ExtendedStatus == "" {
		c.ExtendedStatus = c.Status
	}
	if c.Errors, err = messageList(top["errors"], "errors"); err != nil {
		return nil, err
	}
	rec, err := recoverableMap(top["recoverable_errors"], "recoverable_errors")
	if err != nil {
		return nil, err
	}
	// 23.4+ also prints each stage with its own errors; they are normally
	// already aggregated at the top, so only add what is missing.
	for _, name := range stageNames(top) {
		st, ok, err := parseStage(top[name], name)
		if err != nil {
			return nil, err
		}
		if ok {
			c.Errors = appendMissing(c.Errors, st.errors...)
			mergeRecoverable(rec, st.recoverable)
		}
	}
	c.RecoverableErrors = flattenRecoverable(rec)
	c.Degraded = !c.Failed() && (strings.HasPrefix(c.ExtendedStatus, "degraded") || len(c.RecoverableErrors) > 0)
	return c, limitMessages(c)
}

// parseV1 reads result.json ({"v1": {"datasource", "errors"}}) or status.json
// ({"v1": {"datasource", "stage", <stage name>: {start, finished, errors,
// recoverable_errors}}}).
func parseV1(raw json.RawMessage) (*CloudInitStatus, error) {
	var v1 map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v1); err != nil || v1 == nil {
		return nil, fmt.Errorf("%w: cloud_init: v1 is not an object", ErrMalformed)
	}
	c := &CloudInitStatus{}
	var err error
	if c.Detail, err = optString(v1["datasource"], "v1.datasource", maxStatusMessage); err != nil {
		return nil, err
	}
	c.Datasource = shortDatasource(c.Detail)

	if errs, ok := v1["errors"]; ok {
		// result.json exists only once modules-final has run.
		c.Source = "result.json"
		if c.Errors, err = messageList(errs, "v1.errors"); err != nil {
			return nil, err
		}
		c.Status = "done"
		if len(c.Errors) > 0 {
			c.Status = "error"
		}
		c.ExtendedStatus = c.Status
		return c, limitMessages(c)
	}

	c.Source = "status.json"
	stage, err := optString(v1["stage"], "v1.stage", maxStatusWord)
	stage = cleanLine(stage, maxStatusWord)
	if err != nil {
		return nil, err
	}
	running := stage != ""
	started := false
	rec := map[string][]string{}
	for _, name := range stageNames(v1) {
		st, ok, err := parseStage(v1[name], "v1."+name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		c.Errors = appendMissing(c.Errors, st.errors...)
		mergeRecoverable(rec, st.recoverable)
		if st.start > 0 {
			started = true
			if st.finished <= 0 {
				running = true
			}
		}
	}
	c.RecoverableErrors = flattenRecoverable(rec)
	run := "not started"
	switch {
	case running:
		run = "running"
	case started:
		run = "done"
	}
	// The same precedence as cloud-init's status command: errors, then
	// degradation, then the running state.
	switch {
	case len(c.Errors) > 0:
		c.Status, c.ExtendedStatus = "error", "error - "+run
	case len(c.RecoverableErrors) > 0 && run != "not started":
		c.Status, c.ExtendedStatus, c.Degraded = run, "degraded "+run, true
	default:
		c.Status, c.ExtendedStatus = run, run
	}
	return c, limitMessages(c)
}

type stageInfo struct {
	errors      []string
	recoverable map[string][]string
	start       float64
	finished    float64
}

// stageNames lists the keys of m that may be boot stages: cloud-init's four
// in run order, then any other key, sorted (later releases may add stages).
func stageNames(m map[string]json.RawMessage) []string {
	var names []string
	for _, n := range stageOrder {
		if _, ok := m[n]; ok {
			names = append(names, n)
		}
	}
	var other []string
	for k := range m {
		if !slices.Contains(stageOrder, k) {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	return append(names, other...)
}

// parseStage reads one stage object. ok is false when raw is not an object
// with any of the stage keys (so unrelated top-level keys are skipped).
func parseStage(raw json.RawMessage, name string) (st stageInfo, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return st, false, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return st, false, nil
	}
	_, e := m["errors"]
	_, r := m["recoverable_errors"]
	_, s := m["start"]
	_, f := m["finished"]
	if !e && !r && !s && !f {
		return st, false, nil
	}
	if st.errors, err = messageList(m["errors"], name+".errors"); err != nil {
		return st, false, err
	}
	if st.recoverable, err = recoverableMap(m["recoverable_errors"], name+".recoverable_errors"); err != nil {
		return st, false, err
	}
	if st.start, err = optNumber(m["start"], name+".start"); err != nil {
		return st, false, err
	}
	if st.finished, err = optNumber(m["finished"], name+".finished"); err != nil {
		return st, false, err
	}
	return st, true, nil
}

// shortDatasource turns "DataSourceNoCloud [seed=/dev/sr0]" into "nocloud",
// the way cloud-init's status command does.
func shortDatasource(detail string) string {
	ds, _, _ := strings.Cut(detail, " ")
	return strings.ReplaceAll(strings.ToLower(ds), "datasource", "")
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// optString reads an optional string field (absent or null means "").
func optString(raw json.RawMessage, field string, max int) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: cloud_init: %s is not a string", ErrMalformed, field)
	}
	return cleanMessage(s, max), nil
}

func optNumber(raw json.RawMessage, field string) (float64, error) {
	if isNull(raw) {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%w: cloud_init: %s is not a number", ErrMalformed, field)
	}
	return f, nil
}

// messageList reads a list of error messages. Items are normally strings;
// anything else is kept as its compact JSON text rather than refused, since
// cloud-init does not promise the format of its error entries.
func messageList(raw json.RawMessage, field string) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%w: cloud_init: %s is not a list", ErrMalformed, field)
	}
	var out []string
	for _, it := range items {
		var s string
		if json.Unmarshal(it, &s) != nil {
			var buf bytes.Buffer
			if json.Compact(&buf, it) != nil {
				continue
			}
			s = buf.String()
		}
		if s = cleanMessage(s, maxStatusMessage); s != "" {
			out = appendMissing(out, s)
		}
	}
	return out, nil
}

// recoverableMap reads {"WARNING": ["...", ...], "DEPRECATED": [...]}.
func recoverableMap(raw json.RawMessage, field string) (map[string][]string, error) {
	out := map[string][]string{}
	if isNull(raw) {
		return out, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: cloud_init: %s is not an object", ErrMalformed, field)
	}
	for level, list := range m {
		msgs, err := messageList(list, field+"."+level)
		if err != nil {
			return nil, err
		}
		level = levelName(level)
		if len(msgs) == 0 {
			continue
		}
		out[level] = appendMissing(out[level], msgs...)
	}
	return out, nil
}

// levelName reduces a log level key to [A-Z0-9_], at most 32 characters
// ("UNKNOWN" if nothing is left), so "LEVEL: message" stays unambiguous.
func levelName(s string) string {
	var b strings.Builder
	for _, c := range strings.ToUpper(s) {
		if b.Len() == 32 {
			break
		}
		if c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
			b.WriteRune(c)
		}
	}
	if b.Len() == 0 {
		return "UNKNOWN"
	}
	return b.String()
}

func mergeRecoverable(dst, src map[string][]string) {
	for level, msgs := range src {
		dst[level] = appendMissing(dst[level], msgs...)
	}
}

// flattenRecoverable orders levels most severe first, unknown levels after
// them alphabetically, keeping cloud-init's order within a level.
func flattenRecoverable(m map[string][]string) []string {
	var levels []string
	for _, l := range recoverableLevels {
		if len(m[l]) > 0 {
			levels = append(levels, l)
		}
	}
	var other []string
	for l := range m {
		if !slices.Contains(recoverableLevels, l) && len(m[l]) > 0 {
			other = append(other, l)
		}
	}
	sort.Strings(other)
	var out []string
	for _, l := range append(levels, other...) {
		for _, msg := range m[l] {
			out = append(out, l+": "+msg)
		}
	}
	return out
}

func appendMissing(dst []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(dst, it) {
			dst = append(dst, it)
		}
	}
	return dst
}

func limitMessages(c *CloudInitStatus) error {
	if len(c.Errors) > maxStatusMessages || len(c.RecoverableErrors) > maxStatusMessages {
		return fmt.Errorf("%w: cloud_init: more than %d messages", ErrMalformed, maxStatusMessages)
	}
	return nil
}
