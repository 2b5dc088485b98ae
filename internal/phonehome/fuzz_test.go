package phonehome

import (
	"errors"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseReport: ParseReport never panics, fails only with its own errors,
// and a report it accepts is sane and survives a round trip through the JSON
// wire format unchanged. The seed corpus is testdata/fuzz/FuzzParseReport plus
// the fixtures.
func FuzzParseReport(f *testing.F) {
	forms, _ := filepath.Glob("testdata/form/*.txt")
	for _, p := range forms {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(formType, b)
	}
	statuses, _ := filepath.Glob("testdata/cloudinit/*.json")
	for _, p := range statuses {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(jsonType, jsonBody(f, b))
	}
	f.Add("", []byte(`{"hostname": "h", "host_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE7qOna0cn70QLjLCzPAW5KHLr79LrAP3nfZwMy10H68 c"]}`))
	f.Add(jsonType, []byte(`{"hostname": "h", "routes": [{"family": "inet", "destination": "0.0.0.0/0", "gateway": "10.0.2.2", "interface": "enp1s0"}, {"destination": "::/0", "gateway": "fe80::2", "interface": "enp1s0"}], "dns_servers": ["10.0.2.3", "fe80::1%enp1s0"], "checks": [{"what": "IPv4 default route", "expected": "via 10.0.2.2 on enp1s0 (52:54:00:12:34:56)", "found": "none", "ok": false}, {"what": "hostname", "expected": "h", "found": "h", "ok": true}, {"what": "nameserver", "expected": "10.0.2.3", "found": "x", "ok": null}]}`))

	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		r, err := ParseReport(ctype, body)
		if err != nil {
			if r != nil {
				t.Fatalf("report and error: %v", err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedContentType) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error of no known kind: %v", err)
			}
			return
		}
		checkSane(t, r)

		b, err := encodeJSONReport(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ParseReport(jsonType, b)
		if err != nil {
			t.Fatalf("an accepted report does not parse again: %v\n%s", err, b)
		}
		if r2.InstanceID != r.InstanceID || r2.Hostname != r.Hostname || r2.FQDN != r.FQDN || r2.Token != r.Token {
			t.Errorf("identity changed: %q %q %q -> %q %q %q", r.InstanceID, r.Hostname, r.FQDN, r2.InstanceID, r2.Hostname, r2.FQDN)
		}
		if !maps.Equal(r.HostKeys, r2.HostKeys) {
			t.Errorf("host keys changed: %v -> %v", r.HostKeys, r2.HostKeys)
		}
		if !slices.Equal(r.Addresses, r2.Addresses) {
			t.Errorf("addresses changed: %+v -> %+v", r.Addresses, r2.Addresses)
		}
		if !slices.Equal(r.Routes, r2.Routes) || !slices.Equal(r.DNSServers, r2.DNSServers) || !slices.Equal(r.Checks, r2.Checks) {
			t.Errorf("routes, DNS servers or checks changed: %+v %v %+v -> %+v %v %+v", r.Routes, r.DNSServers, r.Checks, r2.Routes, r2.DNSServers, r2.Checks)
		}
		if !slices.Equal(r.GPUs, r2.GPUs) {
			t.Errorf("GPUs changed: %+v -> %+v", r.GPUs, r2.GPUs)
		}
		if (r.CloudInit == nil) != (r2.CloudInit == nil) {
			t.Fatalf("cloud-init status appeared or vanished")
		}
		if c, c2 := r.CloudInit, r2.CloudInit; c != nil {
			if c.Status != c2.Status || c.ExtendedStatus != c2.ExtendedStatus || c.Degraded != c2.Degraded ||
				c.Datasource != c2.Datasource || c.Detail != c2.Detail || c.BootStatusCode != c2.BootStatusCode || c.LastUpdate != c2.LastUpdate ||
				!slices.Equal(c.Errors, c2.Errors) || !slices.Equal(c.RecoverableErrors, c2.RecoverableErrors) {
				t.Errorf("cloud-init status changed:\n%+v\n%+v", c, c2)
			}
		}
	})
}

var levelPrefix = regexp.MustCompile(`^[A-Z0-9_]{1,32}: `)

// checkSane holds what the provider relies on for any accepted report.
func checkSane(t *testing.T, r *Report) {
	t.Helper()
	if r.Kind != KindForm && r.Kind != KindJSON {
		t.Errorf("kind %q", r.Kind)
	}
	for _, s := range []string{r.InstanceID, r.Hostname, r.FQDN} {
		if got, err := text(s, "field", maxIdentity); err != nil || got != s {
			t.Errorf("identity field %q is not clean text: %v", s, err)
		}
	}
	if r.Token != "" && !validToken(r.Token) {
		t.Errorf("token of the wrong shape")
	}
	for typ, line := range r.HostKeys {
		f := strings.Fields(line)
		if len(f) != 2 || f[0] != typ {
			t.Errorf("host key %q for %q is not \"type base64\"", line, typ)
		}
		if gotTyp, gotLine, ok := normalizeHostKey(typ, line); !ok || gotTyp != typ || gotLine != line {
			t.Errorf("host key %q does not normalise to itself", line)
		}
	}
	for _, a := range r.Addresses {
		if a.MAC != "" {
			if hw, err := net.ParseMAC(a.MAC); err != nil || hw.String() != a.MAC {
				t.Errorf("MAC %q", a.MAC)
			}
		}
		_, perr := netip.ParsePrefix(a.Address)
		_, aerr := netip.ParseAddr(a.Address)
		if perr != nil && aerr != nil {
			t.Errorf("address %q", a.Address)
		}
		if _, err := text(a.Interface, "interface", maxShortField); err != nil {
			t.Errorf("interface %q: %v", a.Interface, err)
		}
	}
	for _, rt := range r.Routes {
		dst, err := netip.ParsePrefix(rt.Destination)
		if err != nil || dst.String() != rt.Destination {
			t.Errorf("route destination %q", rt.Destination)
		}
		if rt.Gateway != "" {
			if gw, err := netip.ParseAddr(rt.Gateway); err != nil || gw.String() != rt.Gateway || gw.Is4() != dst.Addr().Is4() {
				t.Errorf("route gateway %q for %q", rt.Gateway, rt.Destination)
			}
		}
		if _, err := text(rt.Interface, "interface", maxShortField); err != nil {
			t.Errorf("route interface %q: %v", rt.Interface, err)
		}
	}
	for _, d := range r.DNSServers {
		if ip, err := netip.ParseAddr(d); err != nil || ip.String() != d {
			t.Errorf("DNS server %q", d)
		}
	}
	for _, c := range r.Checks {
		for _, s := range []string{c.What, c.Expected, c.Found} {
			if cleanLine(s, maxCheckText) != s {
				t.Errorf("check text %q is not one clean line", s)
			}
		}
		if c.Result != CheckOK && c.Result != CheckMismatch && c.Result != CheckUnknown {
			t.Errorf("check result %q", c.Result)
		}
	}
	for _, g := range r.GPUs {
		if _, err := text(g.Name, "name", maxIdentity); err != nil {
			t.Errorf("GPU name %q: %v", g.Name, err)
		}
	}
	if c := r.CloudInit; c != nil {
		if c.Status == "" || c.ExtendedStatus == "" {
			t.Errorf("empty status: %+v", c)
		}
		if c.Degraded && c.Failed() {
			t.Errorf("both degraded and failed: %+v", c)
		}
		for _, s := range []string{c.Status, c.ExtendedStatus, c.Datasource, c.BootStatusCode, c.LastUpdate} {
			if cleanLine(s, maxStatusWord) != s {
				t.Errorf("status word %q is not one clean line", s)
			}
		}
		for _, m := range append(append([]string{c.Detail}, c.Errors...), c.RecoverableErrors...) {
			if !utf8.ValidString(m) || cleanMessage(m, maxStatusMessage+40) != m {
				t.Errorf("message %q is not clean", m)
			}
		}
		for _, m := range c.RecoverableErrors {
			if !levelPrefix.MatchString(m) {
				t.Errorf("recoverable error %q lacks a LEVEL: prefix", m)
			}
		}
		if len(c.Errors) > maxStatusMessages || len(c.RecoverableErrors) > maxStatusMessages {
			t.Errorf("too many messages")
		}
	}
}
