package phonehome

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
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
	// errors but with recoverable ones (exit code 2 of `cloud-init status`),
	// other than the gateway4/gateway6 deprecation Kohaku's own network
	// config causes on cloud-init 24.x+ (see OwnDeprecation).
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
			return nil, fmt.Errorf("%w: cloud_init: %s", ErrMalformed, jsonErrorText(err))
		}
		data = bytes.TrimSpace([]byte(inner))
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%w: cloud_init: not a JSON object", ErrMalformed)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: cloud_init: %s", ErrMalformed, jsonErrorText(err))
	}
	_, hasStatus := top["status"]
	if v1, ok := top["v1"]; ok && !hasStatus {
		return parseV1(v1)
	}
	if !hasStatus {
		// Ubuntu keeps a copy of the 22.4 fields under schemas."1".
		// Only that one level is looked at (no recursion into schemas).
		var schemas map[string]map[string]json.RawMessage
		if json.Unmarshal(top["schemas"], &schemas) == nil && schemas["1"]["status"] != nil {
			return parseStatusOutput(schemas["1"])
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
	var errs messages
	var rec recoverable
	if err := errs.addList(top["errors"], "errors"); err != nil {
		return nil, err
	}
	if err := rec.addMap(top["recoverable_errors"], "recoverable_errors"); err != nil {
		return nil, err
	}
	// 23.4+ also prints each stage with its own errors; they are normally
	// already aggregated at the top, so only what is missing is added.
	for _, name := range stageNames(top) {
		if _, err := parseStage(top[name], name, &errs, &rec); err != nil {
			return nil, err
		}
	}
	c.Errors, c.RecoverableErrors = errs.list, rec.flatten()
	c.Degraded = degraded(c)
	return c, nil
}

// degraded reports recoverable errors, except the one deprecation Kohaku's
// own network config causes on purpose: cloud-init 22.4's ENI renderer
// applies a default gateway without net-tools only when it is written as
// gateway4/gateway6 (a route becomes `route add`, upstream issue 6250),
// and 24.x+ logs those keys as DEPRECATED, which Debian and Ubuntu count as
// "degraded done". The message stays in RecoverableErrors.
//
// Nothing that has not started is degraded: cloud-init's status.json can
// hold a stage's warning before any stage has a start time, and both of its
// documents must say the same of one boot.
func degraded(c *CloudInitStatus) bool {
	if c.Failed() || c.Status == "not started" {
		return false
	}
	own := 0
	for _, m := range c.RecoverableErrors {
		if OwnDeprecation(m) {
			own++
		}
	}
	if own > 0 && own == len(c.RecoverableErrors) {
		return false
	}
	return strings.HasPrefix(c.ExtendedStatus, "degraded") || len(c.RecoverableErrors) > 0
}

// OwnDeprecation says a recoverable error is cloud-init's deprecation of
// the gateway4/gateway6 keys Kohaku's network config writes.
func OwnDeprecation(msg string) bool {
	return strings.HasPrefix(msg, "DEPRECATED: ") && strings.Contains(msg, "`gateway4` and `gateway6`")
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
	c.Datasource = cleanLine(shortDatasource(c.Detail), maxStatusWord)

	var errs messages
	var rec recoverable
	if raw, ok := v1["errors"]; ok {
		// result.json exists only once modules-final has run.
		c.Source = "result.json"
		if err := errs.addList(raw, "v1.errors"); err != nil {
			return nil, err
		}
		c.Errors = errs.list
		c.Status = "done"
		if len(c.Errors) > 0 {
			c.Status = "error"
		}
		c.ExtendedStatus = c.Status
		return c, nil
	}

	c.Source = "status.json"
	stage, err := optString(v1["stage"], "v1.stage", maxStatusWord)
	if err != nil {
		return nil, err
	}
	running := cleanLine(stage, maxStatusWord) != ""
	started := false
	for _, name := range stageNames(v1) {
		t, err := parseStage(v1[name], "v1."+name, &errs, &rec)
		if err != nil {
			return nil, err
		}
		if t.start > 0 {
			started = true
			if t.finished <= 0 {
				running = true
			}
		}
	}
	c.Errors, c.RecoverableErrors = errs.list, rec.flatten()
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
		c.Status, c.ExtendedStatus = run, "degraded "+run
	default:
		c.Status, c.ExtendedStatus = run, run
	}
	c.Degraded = degraded(c)
	return c, nil
}

// stageTimes are a stage's start and finish (0 when null or absent).
type stageTimes struct{ start, finished float64 }

// notStages are the keys of status output and status.json that are not boot
// stages.
var notStages = []string{"status", "extended_status", "errors", "recoverable_errors", "detail", "datasource",
	"boot_status_code", "last_update", "schemas", "_schema_version", "stage"}

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
		if !slices.Contains(stageOrder, k) && !slices.Contains(notStages, k) {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	return append(names, other...)
}

// parseStage reads one stage object into errs and rec. Values that are not
// objects with any of the stage keys are skipped (zero times, no error).
func parseStage(raw json.RawMessage, name string, errs *messages, rec *recoverable) (stageTimes, error) {
	var t stageTimes
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return t, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return t, nil //nolint:nilerr // a value that is not an object is skipped, as documented
	}
	_, e := m["errors"]
	_, r := m["recoverable_errors"]
	_, s := m["start"]
	_, f := m["finished"]
	if !e && !r && !s && !f {
		return t, nil
	}
	if err := errs.addList(m["errors"], name+".errors"); err != nil {
		return t, err
	}
	if err := rec.addMap(m["recoverable_errors"], name+".recoverable_errors"); err != nil {
		return t, err
	}
	var err error
	if t.start, err = optNumber(m["start"], name+".start"); err != nil {
		return t, err
	}
	if t.finished, err = optNumber(m["finished"], name+".finished"); err != nil {
		return t, err
	}
	return t, nil
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
func optString(raw json.RawMessage, field string, limit int) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: cloud_init: %s is not a string", ErrMalformed, field)
	}
	return cleanMessage(s, limit), nil
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

// errTooManyMessages caps what a status document may carry.
var errTooManyMessages = fmt.Errorf("%w: cloud_init: more than %d distinct messages", ErrMalformed, maxStatusMessages)

// messages collects distinct messages in order of arrival, at most
// maxStatusMessages of them, in linear time.
type messages struct {
	list []string
	seen map[string]struct{}
}

func (m *messages) add(s string) error {
	if _, dup := m.seen[s]; dup {
		return nil
	}
	if len(m.list) >= maxStatusMessages {
		return errTooManyMessages
	}
	if m.seen == nil {
		m.seen = map[string]struct{}{}
	}
	m.seen[s] = struct{}{}
	m.list = append(m.list, s)
	return nil
}

// addList adds a JSON list of messages. Items are normally strings;
// anything else is kept as its compact JSON text rather than refused, since
// cloud-init does not promise the format of its error entries.
func (m *messages) addList(raw json.RawMessage, field string) error {
	if isNull(raw) {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return fmt.Errorf("%w: cloud_init: %s is not a list", ErrMalformed, field)
	}
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
			if err := m.add(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// recoverable collects recoverable errors by level, at most
// maxStatusMessages distinct (level, message) pairs in all.
type recoverable struct {
	levels map[string]*messages
	total  int
}

// addMap adds {"WARNING": ["...", ...], "DEPRECATED": [...]}.
func (r *recoverable) addMap(raw json.RawMessage, field string) error {
	if isNull(raw) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%w: cloud_init: %s is not an object", ErrMalformed, field)
	}
	// Sorted, so levels that normalise to one name merge in a fixed order.
	for _, key := range slices.Sorted(maps.Keys(m)) {
		level := levelName(key)
		if r.levels == nil {
			r.levels = map[string]*messages{}
		}
		l := r.levels[level]
		if l == nil {
			l = &messages{}
			r.levels[level] = l
		}
		before := len(l.list)
		if err := l.addList(m[key], field+"."+key); err != nil {
			return err
		}
		if r.total += len(l.list) - before; r.total > maxStatusMessages {
			return errTooManyMessages
		}
	}
	return nil
}

// flatten orders levels most severe first, unknown levels after them
// alphabetically, keeping cloud-init's order within a level.
func (r *recoverable) flatten() []string {
	var levels []string
	for _, l := range recoverableLevels {
		if r.levels[l] != nil {
			levels = append(levels, l)
		}
	}
	var other []string
	for l := range r.levels {
		if !slices.Contains(recoverableLevels, l) {
			other = append(other, l)
		}
	}
	sort.Strings(other)
	var out []string
	for _, l := range append(levels, other...) {
		for _, msg := range r.levels[l].list {
			out = append(out, l+": "+msg)
		}
	}
	return out
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
