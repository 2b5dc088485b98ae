package phonehome

import (
	"slices"
	"strings"
	"testing"
)

// A reporter's routes, DNS servers and checks are read, normalised and kept
// clean; entries that do not parse are left out with a warning, and a
// check's ok true, false or null becomes ok, mismatch or unknown.
func TestParseReportChecksRoutesDNS(t *testing.T) {
	t.Parallel()
	body := `{"hostname": "h", "instance_id": "i",
	"routes": [
		{"family": "inet", "destination": "0.0.0.0/0", "gateway": "10.0.2.2", "interface": "enp1s0"},
		{"family": "inet6", "destination": "2001:0db8::/64", "gateway": "", "interface": "enp1s0"},
		{"destination": "::/0", "gateway": "10.0.2.2", "interface": "enp1s0"},
		{"destination": "default", "gateway": "10.0.2.2", "interface": "enp1s0"}],
	"dns_servers": ["10.0.2.3", "2001:DB8::53", "not an address"],
	"checks": [
		{"what": "IPv4 default route", "expected": "via 10.0.2.2 on enp1s0 (52:54:00:12:34:56)", "found": "none", "ok": false},
		{"what": "hostname", "expected": "h", "found": "h", "ok": true},
		{"what": "nameserver", "expected": "10.0.2.3", "found": "cannot read\u202e it\nat all", "ok": null},
		{"what": "interface", "expected": "with MAC 52:54:00:ab:cd:ef", "found": "` + strings.Repeat("x", 600) + `", "ok": false}]}`
	r, err := ParseReport("application/json", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	wantRoutes := []Route{{Destination: "0.0.0.0/0", Gateway: "10.0.2.2", Interface: "enp1s0"}, {Destination: "2001:db8::/64", Interface: "enp1s0"}}
	if !slices.Equal(r.Routes, wantRoutes) {
		t.Errorf("routes = %+v", r.Routes)
	}
	if !r.Routes[0].Default() || r.Routes[1].Default() {
		t.Error("Default() is wrong")
	}
	if !slices.Equal(r.DNSServers, []string{"10.0.2.3", "2001:db8::53"}) {
		t.Errorf("dns servers = %v", r.DNSServers)
	}
	if len(r.Warnings) != 3 || !strings.HasPrefix(r.Warnings[0], "routes[2]") || !strings.HasPrefix(r.Warnings[2], "dns_servers[2]") {
		t.Errorf("warnings = %q", r.Warnings)
	}
	results := []CheckResult{}
	for _, c := range r.Checks {
		results = append(results, c.Result)
	}
	if !slices.Equal(results, []CheckResult{CheckMismatch, CheckOK, CheckUnknown, CheckMismatch}) {
		t.Errorf("results = %v", results)
	}
	m := r.Mismatches()
	if len(m) != 2 || m[0].Message() != "no IPv4 default route via 10.0.2.2 on enp1s0 (52:54:00:12:34:56); found: none" {
		t.Errorf("mismatches = %+v", m)
	}
	if got := r.Checks[2].Message(); got != "could not check nameserver 10.0.2.3: cannot read\uFFFD it at all" {
		t.Errorf("unknown check message = %q", got)
	}
	if len(m[1].Found) != maxCheckText {
		t.Errorf("a long found is %d bytes, want it cut to %d", len(m[1].Found), maxCheckText)
	}
	c := r.Clone()
	c.Checks[0].Found, c.Routes[0].Gateway, c.DNSServers[0] = "x", "x", "x"
	if r.Checks[0].Found == "x" || r.Routes[0].Gateway == "x" || r.DNSServers[0] == "x" {
		t.Error("Clone shares the checks, routes or DNS servers")
	}
}

// Too many routes, DNS servers or checks is a malformed report.
func TestParseReportListLimits(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"routes", "dns_servers", "checks"} {
		item := `{}`
		if field == "dns_servers" {
			item = `"10.0.2.3"`
		}
		body := `{"hostname": "h", "` + field + `": [` + strings.TrimSuffix(strings.Repeat(item+",", maxListItems+1), ",") + `]}`
		if _, err := ParseReport("application/json", []byte(body)); err == nil || !strings.Contains(err.Error(), "more than 256") {
			t.Errorf("%s: err = %v", field, err)
		}
	}
}
