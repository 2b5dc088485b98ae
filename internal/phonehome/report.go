package phonehome

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxBodyBytes is the largest report accepted, on any transport.
const MaxBodyBytes = 64 << 10

// Report kinds.
const (
	// KindForm is cloud-init's phone_home module POST
	// (application/x-www-form-urlencoded).
	KindForm = "form"
	// KindJSON is a JSON report from an in-guest reporter.
	KindJSON = "json"
)

var (
	// ErrMalformed means a report (or a cloud-init status in it) could not
	// be parsed.
	ErrMalformed = errors.New("malformed phone-home report")
	// ErrUnsupportedContentType means the content type is neither form
	// encoding nor JSON.
	ErrUnsupportedContentType = errors.New("unsupported content type")
	// ErrTooLarge means the body is over MaxBodyBytes.
	ErrTooLarge = errors.New("phone-home report too large")
)

// Report is what a guest said when it phoned home.
type Report struct {
	// Kind is KindForm or KindJSON.
	Kind string
	// InstanceID, Hostname and FQDN as the guest knows them.
	InstanceID string
	// DomainUUID is the guest's SMBIOS system UUID, which libvirt sets to
	// the domain's UUID, and BootID the guest kernel's random ID of the
	// boot that wrote the report (JSON reports of the first-boot reporter;
	// empty from older reporters). They make a report fresh: see
	// CheckFresh.
	DomainUUID string
	BootID     string
	Hostname   string
	FQDN       string
	// HostKeys maps an SSH key type ("ssh-ed25519", "ecdsa-sha2-nistp256",
	// "ssh-rsa") to "type base64", ready for a known_hosts line.
	HostKeys map[string]string
	// Addresses the guest reported (JSON reports only).
	Addresses []Address
	// CloudInit is cloud-init's status; nil for a plain phone_home form post
	// or a JSON report without "cloud_init".
	CloudInit *CloudInitStatus
	// GPUs the guest sees (JSON reports only).
	GPUs []GPU
	// Routes are the guest's routes of both families, and DNSServers the
	// nameservers it uses (JSON reports only).
	Routes     []Route
	DNSServers []string
	// Checks compare what the seed declared with what the guest has (JSON
	// reports of a reporter that was given the declaration).
	Checks []Check
	// Warnings name parts of the report that were left out because they did
	// not parse (a host key or an address); they never quote the body.
	Warnings []string
	// RemoteAddr is the "ip:port" the report came from over HTTP; empty for
	// other transports.
	RemoteAddr string
	// ReceivedAt is when the report was accepted (set by the receiver, not
	// by ParseReport).
	ReceivedAt time.Time
	// SentAt is the guest's clock when it wrote this copy of the report
	// (the JSON report's "sent_at", see SentAtField); zero when the
	// reporter did not say (an older reporter, a form post).
	SentAt time.Time
	// Via is how the report came ("channel", "phone_home", "guest_agent"),
	// set by the receiver like ReceivedAt.
	Via string
	// Token is the "token" field of a JSON report, for transports whose
	// channel does not already name the seed. It is secret. The HTTP
	// endpoint checks it against the URL's token and clears it.
	Token string
}

// Address is one interface address of the guest.
type Address struct {
	// Interface name in the guest ("enp1s0").
	Interface string
	// MAC in lower-case colon form; may be empty.
	MAC string
	// Address is an IP address or prefix ("10.0.2.15/24", "fe80::1%enp1s0").
	Address string
}

// Route is one route of the guest.
type Route struct {
	// Destination prefix; "0.0.0.0/0" or "::/0" for a default route.
	Destination string
	// Gateway; empty for a route to a directly connected network.
	Gateway string
	// Interface name in the guest.
	Interface string
}

// Default reports whether the route is a default route.
func (r Route) Default() bool {
	p, err := netip.ParsePrefix(r.Destination)
	return err == nil && p.Bits() == 0
}

// CheckResult is what one check of the declared configuration found.
type CheckResult string

const (
	// CheckOK means the guest has what was declared.
	CheckOK CheckResult = "ok"
	// CheckMismatch means the guest lacks what was declared.
	CheckMismatch CheckResult = "mismatch"
	// CheckUnknown means the reporter could not tell (a source it needs was
	// unreadable); Found says why.
	CheckUnknown CheckResult = "unknown"
)

// Check is one comparison of the declared configuration with the guest.
type Check struct {
	// What was checked ("IPv4 default route", "nameserver", "hostname").
	What string
	// Expected is what was declared, with where ("via 10.0.2.2 on enp1s0
	// (52:54:00:12:34:56)").
	Expected string
	// Found is what the guest has instead.
	Found  string
	Result CheckResult
}

// Message names what is missing, e.g. "no IPv4 default route via 10.0.2.2
// on enp1s0 (52:54:00:12:34:56); found: none".
func (c Check) Message() string {
	what := strings.TrimSpace(c.What + " " + c.Expected)
	switch c.Result {
	case CheckOK:
		return what + ": ok"
	case CheckUnknown:
		return "could not check " + what + ": " + c.Found
	}
	return "no " + what + "; found: " + c.Found
}

// Mismatches are the checks the guest failed.
func (r *Report) Mismatches() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Result == CheckMismatch {
			out = append(out, c)
		}
	}
	return out
}

// GPU is one GPU the guest sees.
type GPU struct {
	Name          string
	DriverVersion string
	MemoryMiB     uint64
}

// String summarises the report without its token.
func (r *Report) String() string {
	if r == nil {
		return "<nil report>"
	}
	ci := "none"
	if r.CloudInit != nil {
		ci = r.CloudInit.ExtendedStatus
	}
	return fmt.Sprintf("%s report: instance %q hostname %q from %q, %d host keys, %d addresses, %d GPUs, cloud-init %s",
		r.Kind, r.InstanceID, r.Hostname, r.RemoteAddr, len(r.HostKeys), len(r.Addresses), len(r.GPUs), ci)
}

// Clone returns a deep copy.
func (r *Report) Clone() *Report {
	if r == nil {
		return nil
	}
	c := *r
	c.HostKeys = maps.Clone(r.HostKeys)
	c.Addresses = slices.Clone(r.Addresses)
	c.GPUs = slices.Clone(r.GPUs)
	c.Routes = slices.Clone(r.Routes)
	c.DNSServers = slices.Clone(r.DNSServers)
	c.Checks = slices.Clone(r.Checks)
	c.Warnings = slices.Clone(r.Warnings)
	if r.CloudInit != nil {
		ci := *r.CloudInit
		ci.Errors = slices.Clone(ci.Errors)
		ci.RecoverableErrors = slices.Clone(ci.RecoverableErrors)
		c.CloudInit = &ci
	}
	return &c
}

// Field limits.
const (
	maxIdentity   = 255 // instance id, hostname, fqdn, GPU name
	maxShortField = 64  // interface, driver version
	maxKeyType    = 64
	maxKeyBlob    = 16 << 10
	maxListItems  = 256
	maxCheckText  = 512 // a check's what, expected and found
)

// ParseReport parses a report body. contentType selects the format:
// application/x-www-form-urlencoded (cloud-init's phone_home), application/json
// (or any +json type), or, when empty, whichever the body looks like.
// Errors wrap ErrMalformed, ErrUnsupportedContentType or ErrTooLarge and never
// quote the body.
func ParseReport(contentType string, body []byte) (*Report, error) {
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), MaxBodyBytes)
	}
	kind, err := reportKind(contentType, body)
	if err != nil {
		return nil, err
	}
	if kind == KindForm {
		return parseForm(body)
	}
	return parseJSON(body)
}

func reportKind(contentType string, body []byte) (string, error) {
	if strings.TrimSpace(contentType) == "" {
		if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
			return KindJSON, nil
		}
		return KindForm, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", fmt.Errorf("%w: cannot parse the content type", ErrUnsupportedContentType)
	}
	switch {
	case mt == "application/x-www-form-urlencoded":
		return KindForm, nil
	case mt == "application/json", strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return KindJSON, nil
	}
	return "", fmt.Errorf("%w: %q (want application/x-www-form-urlencoded or application/json)", ErrUnsupportedContentType, mt)
}

// formKeyFields are cloud-init's phone_home host key fields and the key type
// each must hold (pub_key_dsa: cloud-init before 22.1 could post it).
var formKeyFields = []struct{ field, alias string }{
	{"pub_key_rsa", "rsa"},
	{"pub_key_ecdsa", "ecdsa"},
	{"pub_key_ed25519", "ed25519"},
	{"pub_key_dsa", "dsa"},
}

// parseForm reads cloud-init's phone_home POST: instance_id, hostname, fqdn
// and pub_key_* fields; a field cloud-init could not fill is "N/A".
func parseForm(body []byte) (*Report, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		// url's error quotes the offending bytes; keep them out.
		return nil, fmt.Errorf("%w: form encoding: a bad %%-escape or a ';' separator", ErrMalformed)
	}
	known := 0
	get := func(k string) string {
		v, ok := vals[k]
		if !ok || len(v) == 0 {
			return ""
		}
		known++
		if s := strings.TrimSpace(v[0]); s != "N/A" {
			return s
		}
		return ""
	}
	r := &Report{Kind: KindForm}
	if r.InstanceID, err = identity(get("instance_id"), "instance_id"); err != nil {
		return nil, err
	}
	if r.Hostname, err = identity(get("hostname"), "hostname"); err != nil {
		return nil, err
	}
	if r.FQDN, err = identity(get("fqdn"), "fqdn"); err != nil {
		return nil, err
	}
	for _, f := range formKeyFields {
		v := get(f.field)
		if v == "" {
			continue
		}
		r.addHostKey(f.alias, v, f.field)
	}
	if known == 0 {
		msg := "no phone_home fields (instance_id, hostname, fqdn, pub_key_*)"
		if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
			msg += "; the body looks like JSON, send it as application/json"
		}
		return nil, fmt.Errorf("%w: %s", ErrMalformed, msg)
	}
	return r, nil
}

// wireReport is the JSON report of an in-guest reporter.
type wireReport struct {
	Token      string          `json:"token"`
	InstanceID string          `json:"instance_id"`
	Hostname   string          `json:"hostname"`
	FQDN       string          `json:"fqdn"`
	HostKeys   json.RawMessage `json:"host_keys"`
	Addresses  []wireAddress   `json:"addresses"`
	CloudInit  json.RawMessage `json:"cloud_init"`
	GPUs       []wireGPU       `json:"gpus"`
	Routes     []wireRoute     `json:"routes"`
	DNSServers []string        `json:"dns_servers"`
	Checks     []wireCheck     `json:"checks"`
	SentAt     json.RawMessage `json:"sent_at"`
	DomainUUID string          `json:"domain_uuid"`
	BootID     string          `json:"boot_id"`
}

type wireRoute struct {
	Family      string `json:"family"`
	Destination string `json:"destination"`
	Gateway     string `json:"gateway"`
	Interface   string `json:"interface"`
}

type wireCheck struct {
	What     string `json:"what"`
	Expected string `json:"expected"`
	Found    string `json:"found"`
	OK       *bool  `json:"ok"`
}

type wireAddress struct {
	Interface string `json:"interface"`
	MAC       string `json:"mac"`
	Address   string `json:"address"`
}

type wireGPU struct {
	Name          string `json:"name"`
	DriverVersion string `json:"driver_version"`
	MemoryMiB     uint64 `json:"memory_mib"`
}

func parseJSON(body []byte) (*Report, error) {
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%w: JSON report is not an object", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var w wireReport
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, jsonErrorText(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrMalformed)
	}
	if len(w.Addresses) > maxListItems || len(w.GPUs) > maxListItems || len(w.Routes) > maxListItems ||
		len(w.DNSServers) > maxListItems || len(w.Checks) > maxListItems {
		return nil, fmt.Errorf("%w: more than %d addresses, GPUs, routes, DNS servers or checks", ErrMalformed, maxListItems)
	}

	r := &Report{Kind: KindJSON}
	var err error
	if w.Token != "" {
		if !validToken(w.Token) {
			return nil, fmt.Errorf("%w: token is not a phone-home token", ErrMalformed)
		}
		r.Token = w.Token
	}
	if r.InstanceID, err = identity(w.InstanceID, "instance_id"); err != nil {
		return nil, err
	}
	if r.Hostname, err = identity(w.Hostname, "hostname"); err != nil {
		return nil, err
	}
	if r.FQDN, err = identity(w.FQDN, "fqdn"); err != nil {
		return nil, err
	}
	if r.DomainUUID, err = uuidField(w.DomainUUID, "domain_uuid"); err != nil {
		return nil, err
	}
	if r.BootID, err = uuidField(w.BootID, "boot_id"); err != nil {
		return nil, err
	}
	if err := r.parseHostKeys(w.HostKeys); err != nil {
		return nil, err
	}
	for i, a := range w.Addresses {
		addr, err := parseAddress(a, i)
		if err != nil {
			return nil, err
		}
		if addr == nil {
			r.Warnings = append(r.Warnings, fmt.Sprintf("addresses[%d]: not an IP address or prefix, or a bad MAC; left out", i))
			continue
		}
		r.Addresses = append(r.Addresses, *addr)
	}
	for i, g := range w.GPUs {
		var gpu GPU
		if gpu.Name, err = text(g.Name, fmt.Sprintf("gpus[%d].name", i), maxIdentity); err != nil {
			return nil, err
		}
		if gpu.DriverVersion, err = text(g.DriverVersion, fmt.Sprintf("gpus[%d].driver_version", i), maxShortField); err != nil {
			return nil, err
		}
		gpu.MemoryMiB = g.MemoryMiB
		r.GPUs = append(r.GPUs, gpu)
	}
	for i, rt := range w.Routes {
		route, err := parseRoute(rt, i)
		if err != nil {
			return nil, err
		}
		if route == nil {
			r.Warnings = append(r.Warnings, fmt.Sprintf("routes[%d]: not a prefix and gateway address; left out", i))
			continue
		}
		r.Routes = append(r.Routes, *route)
	}
	for i, d := range w.DNSServers {
		ip, err := netip.ParseAddr(strings.TrimSpace(d))
		if err != nil {
			r.Warnings = append(r.Warnings, fmt.Sprintf("dns_servers[%d]: not an IP address; left out", i))
			continue
		}
		r.DNSServers = append(r.DNSServers, ip.String())
	}
	for _, c := range w.Checks {
		r.Checks = append(r.Checks, parseCheck(c))
	}
	if !isNull(w.SentAt) {
		if r.SentAt, err = parseSentAt(w.SentAt); err != nil {
			r.Warnings = append(r.Warnings, SentAtField+": not an RFC 3339 time; left out")
		}
	}
	if !isNull(w.CloudInit) {
		if r.CloudInit, err = ParseCloudInitStatus(w.CloudInit); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// parseSentAt reads "sent_at": an RFC 3339 time as a JSON string.
func parseSentAt(raw json.RawMessage) (time.Time, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, err
	}
	if len(s) > 64 {
		return time.Time{}, errors.New("too long")
	}
	return time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
}

// Transit is how long the report took from the guest writing it to the
// provider accepting it, as ReceivedAt (host clock) minus SentAt (guest
// clock): it includes the offset between the two clocks. ok is false when
// either time is missing.
func (r *Report) Transit() (d time.Duration, ok bool) {
	if r == nil || r.SentAt.IsZero() || r.ReceivedAt.IsZero() {
		return 0, false
	}
	return r.ReceivedAt.Sub(r.SentAt), true
}

// jsonErrorText describes a decoding error without quoting the input (a
// SyntaxError's message includes the offending character).
func jsonErrorText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("want %s, got JSON %s", te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "truncated JSON"
	}
	return "invalid JSON"
}

// parseHostKeys reads "host_keys": either {"ssh-ed25519": "AAAA..."} (the
// value may also be a whole "type base64 comment" line, and the key may be
// "rsa", "ecdsa", "ed25519") or ["ssh-ed25519 AAAA... comment", ...].
func (r *Report) parseHostKeys(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil
	}
	switch raw[0] {
	case '{':
		var m map[string]string
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("%w: host_keys: want an object of strings", ErrMalformed)
		}
		if len(m) > maxListItems {
			return fmt.Errorf("%w: host_keys: more than %d keys", ErrMalformed, maxListItems)
		}
		for _, typ := range slices.Sorted(maps.Keys(m)) {
			r.addHostKey(typ, m[typ], "host_keys")
		}
	case '[':
		var l []string
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("%w: host_keys: want a list of strings", ErrMalformed)
		}
		if len(l) > maxListItems {
			return fmt.Errorf("%w: host_keys: more than %d keys", ErrMalformed, maxListItems)
		}
		for i, line := range l {
			r.addHostKey("", line, fmt.Sprintf("host_keys[%d]", i))
		}
	default:
		return fmt.Errorf("%w: host_keys: want an object or a list", ErrMalformed)
	}
	return nil
}

// addHostKey normalises one key and adds it, or records a warning.
func (r *Report) addHostKey(declared, value, where string) {
	typ, line, ok := normalizeHostKey(declared, value)
	if !ok {
		r.Warnings = append(r.Warnings, where+": not an SSH public key of the declared type; left out")
		return
	}
	if r.HostKeys == nil {
		r.HostKeys = map[string]string{}
	}
	if old, dup := r.HostKeys[typ]; dup {
		if old != line {
			r.Warnings = append(r.Warnings, where+": a second, different "+typ+" key; the first is kept")
		}
		return
	}
	r.HostKeys[typ] = line
}

// keyAliases are the short type names accepted as host_keys map keys and
// used for cloud-init's pub_key_* fields.
var keyAliases = map[string]string{
	"rsa":     "ssh-rsa",
	"ed25519": "ssh-ed25519",
	"dsa":     "ssh-dss",
}

// normalizeHostKey checks an OpenSSH public key ("type base64 [comment]" or,
// with declared set, just "base64") and returns its type (read from inside
// the key blob) and "type base64".
func normalizeHostKey(declared, value string) (typ, line string, ok bool) {
	fields := strings.Fields(value)
	var b64 string
	switch {
	case len(fields) == 1 && declared != "":
		b64 = fields[0]
	case len(fields) >= 2:
		if declared == "" {
			declared = fields[0]
		} else if !typeMatches(declared, fields[0]) {
			return "", "", false
		}
		b64 = fields[1]
	default:
		return "", "", false
	}
	if len(b64) > base64.StdEncoding.EncodedLen(maxKeyBlob) {
		return "", "", false
	}
	blob, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		if blob, err = base64.RawStdEncoding.DecodeString(b64); err != nil {
			return "", "", false
		}
	}
	if len(blob) < 4 {
		return "", "", false
	}
	n := binary.BigEndian.Uint32(blob)
	if n == 0 || n > maxKeyType || uint64(len(blob)) <= 4+uint64(n) {
		return "", "", false
	}
	typ = string(blob[4 : 4+n])
	if !validKeyType(typ) || !typeMatches(declared, typ) {
		return "", "", false
	}
	return typ, typ + " " + base64.StdEncoding.EncodeToString(blob), true
}

// typeMatches reports whether a declared type (full or alias) names typ.
func typeMatches(declared, typ string) bool {
	switch declared {
	case typ:
		return true
	case "ecdsa":
		return strings.HasPrefix(typ, "ecdsa-sha2-")
	}
	return keyAliases[declared] == typ
}

func validKeyType(t string) bool {
	if t == "" || len(t) > maxKeyType {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '@' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// parseAddress returns nil (and no error) for an address that does not
// parse, so one odd interface does not lose the whole report; bad text in
// the interface name is an error like any other text field.
func parseAddress(a wireAddress, i int) (*Address, error) {
	iface, err := text(a.Interface, fmt.Sprintf("addresses[%d].interface", i), maxShortField)
	if err != nil {
		return nil, err
	}
	out := &Address{Interface: iface}
	if m := strings.TrimSpace(a.MAC); m != "" {
		hw, err := net.ParseMAC(m)
		if err != nil {
			return nil, nil //nolint:nilerr // an address that does not parse is skipped, as documented
		}
		out.MAC = hw.String()
	}
	s := strings.TrimSpace(a.Address)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, nil //nolint:nilerr // an address that does not parse is skipped, as documented
		}
		out.Address = p.String()
	} else {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, nil //nolint:nilerr // an address that does not parse is skipped, as documented
		}
		out.Address = ip.String()
	}
	return out, nil
}

// parseRoute returns nil (and no error) for a route whose destination or
// gateway does not parse, like parseAddress.
func parseRoute(w wireRoute, i int) (*Route, error) {
	iface, err := text(w.Interface, fmt.Sprintf("routes[%d].interface", i), maxShortField)
	if err != nil {
		return nil, err
	}
	dst, err := netip.ParsePrefix(strings.TrimSpace(w.Destination))
	if err != nil {
		return nil, nil //nolint:nilerr // a route that does not parse is skipped, as documented
	}
	out := &Route{Destination: dst.String(), Interface: iface}
	if g := strings.TrimSpace(w.Gateway); g != "" {
		gw, err := netip.ParseAddr(g)
		if err != nil || gw.Is4() != dst.Addr().Is4() {
			return nil, nil //nolint:nilerr // a route that does not parse is skipped, as documented
		}
		out.Gateway = gw.String()
	}
	return out, nil
}

// parseCheck keeps a check's texts clean and short; ok true, false or
// null (could not tell) becomes its result.
func parseCheck(w wireCheck) Check {
	c := Check{
		What:     cleanLine(w.What, maxCheckText),
		Expected: cleanLine(w.Expected, maxCheckText),
		Found:    cleanLine(w.Found, maxCheckText),
		Result:   CheckUnknown,
	}
	if w.OK != nil && *w.OK {
		c.Result = CheckOK
	} else if w.OK != nil {
		c.Result = CheckMismatch
	}
	return c
}

// identity checks an identity field (instance id, hostname, fqdn).
// uuidField checks an optional UUID field and returns it in lower case.
func uuidField(s, field string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", nil
	}
	if !isUUID(s) {
		return "", fmt.Errorf("%w: %s: not a UUID", ErrMalformed, field)
	}
	return s, nil
}

// isUUID reports whether s is a UUID in lower-case 8-4-4-4-12 hex form.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

func identity(s, field string) (string, error) {
	return text(s, field, maxIdentity)
}

// text checks a one-line text field: valid UTF-8, no control or format
// characters, at most limit bytes. These values end up in Terraform state and
// diagnostics.
func text(s, field string, limit int) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) > limit {
		return "", fmt.Errorf("%w: %s: longer than %d bytes", ErrMalformed, field, limit)
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: %s: not valid UTF-8", ErrMalformed, field)
	}
	for _, c := range s {
		if unsafeRune(c) || c == utf8.RuneError {
			return "", fmt.Errorf("%w: %s: control or format character", ErrMalformed, field)
		}
	}
	return s, nil
}

// cleanMessage makes a free-text message (a cloud-init error) safe to carry:
// valid UTF-8, no control or format characters other than newline and tab,
// at most limit bytes (cut on a character boundary). It is idempotent.
func cleanMessage(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(c rune) rune {
		if c == '\n' || c == '\t' || !unsafeRune(c) {
			return c
		}
		return '\uFFFD'
	}, s)
	return strings.TrimSpace(truncate(strings.TrimSpace(s), limit))
}

// cleanLine is cleanMessage without newlines or tabs.
func cleanLine(s string, limit int) string {
	s = strings.Map(func(c rune) rune {
		if c == '\n' || c == '\t' {
			return ' '
		}
		return c
	}, cleanMessage(s, limit))
	return strings.TrimSpace(s)
}

// unsafeRune is a character that has no place in a value shown to a user:
// control characters and invisible format characters (bidi overrides).
func unsafeRune(c rune) bool {
	return unicode.IsControl(c) || unicode.Is(unicode.Cf, c)
}

func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
