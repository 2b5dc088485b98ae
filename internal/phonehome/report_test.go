package phonehome

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseReportForm(t *testing.T) {
	t.Parallel()
	keys := fixtureKeys(t)
	r, err := ParseReport(formType, readFixture(t, "form/cloud-init-22.4-all.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != KindForm || r.InstanceID != "iid-web-01" || r.Hostname != "web-01" || r.FQDN != "web-01.lab.example" || r.CloudInit != nil {
		t.Errorf("got %+v", r)
	}
	want := map[string]string{
		"ssh-rsa":             keys["rsa"],
		"ecdsa-sha2-nistp256": keys["ecdsa"],
		"ssh-ed25519":         keys["ed25519"],
	}
	if len(r.HostKeys) != len(want) {
		t.Fatalf("host keys %v", r.HostKeys)
	}
	for typ, line := range want {
		// The fixture lines end in a comment; the report drops it.
		f := strings.Fields(line)
		if r.HostKeys[typ] != f[0]+" "+f[1] || f[0] != typ {
			t.Errorf("%s: got %q, want %q", typ, r.HostKeys[typ], f[0]+" "+f[1])
		}
	}
	if len(r.Warnings) != 0 {
		t.Errorf("warnings %q", r.Warnings)
	}

	r, err = ParseReport(formType, readFixture(t, "form/cloud-init-25.1-no-rsa.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.HostKeys["ssh-rsa"]; ok || len(r.HostKeys) != 2 || r.InstanceID != "5f1c3a52-8d7e-4a8c-9d51-2b6f0d4c7e11" || len(r.Warnings) != 0 {
		t.Errorf("N/A key: got %+v", r)
	}
}

func TestParseReportJSON(t *testing.T) {
	t.Parallel()
	r, err := ParseReport("application/json; charset=utf-8", jsonBody(t, readFixture(t, "cloudinit/25.1-status-degraded.json")))
	if err != nil {
		t.Fatal(err)
	}
	keys := fixtureKeys(t)
	if r.Kind != KindJSON || r.InstanceID != "iid-gpu-01" || r.Hostname != "gpu-01" || r.FQDN != "gpu-01.lab.example" {
		t.Errorf("identity: %+v", r)
	}
	if r.HostKeys["ssh-ed25519"] != strings.Join(strings.Fields(keys["ed25519"])[:2], " ") ||
		r.HostKeys["ecdsa-sha2-nistp256"] != strings.Join(strings.Fields(keys["ecdsa"])[:2], " ") || len(r.HostKeys) != 2 {
		t.Errorf("host keys %v", r.HostKeys)
	}
	if len(r.Addresses) != 2 || r.Addresses[0] != (Address{"enp1s0", "52:54:00:12:34:56", "10.0.2.15/24"}) ||
		r.Addresses[1].Address != "fec0::5054:ff:fe12:3456/64" {
		t.Errorf("addresses %+v", r.Addresses)
	}
	if len(r.GPUs) != 1 || r.GPUs[0] != (GPU{"NVIDIA A10", "550.54.14", 23028}) {
		t.Errorf("gpus %+v", r.GPUs)
	}
	if r.CloudInit == nil || !r.CloudInit.Degraded || r.CloudInit.ExtendedStatus != "degraded done" {
		t.Errorf("cloud-init %+v", r.CloudInit)
	}
}

func TestParseReportCases(t *testing.T) {
	t.Parallel()
	keys := fixtureKeys(t)
	ed := strings.Fields(keys["ed25519"])
	rsa := strings.Fields(keys["rsa"])
	tests := []struct {
		name    string
		ctype   string
		body    string
		wantErr error
		check   func(t *testing.T, r *Report)
	}{
		{name: "host keys as a list", ctype: jsonType, body: `{"host_keys": ["` + keys["ed25519"] + `", "` + keys["rsa"] + `"]}`,
			check: func(t *testing.T, r *Report) {
				if r.HostKeys["ssh-ed25519"] != ed[0]+" "+ed[1] || r.HostKeys["ssh-rsa"] != rsa[0]+" "+rsa[1] {
					t.Errorf("%v", r.HostKeys)
				}
			}},
		{name: "host key of the wrong declared type is left out", ctype: jsonType, body: `{"hostname": "h", "host_keys": {"ssh-rsa": "` + ed[1] + `"}}`,
			check: func(t *testing.T, r *Report) {
				if len(r.HostKeys) != 0 || len(r.Warnings) != 1 || strings.Contains(r.Warnings[0], ed[1]) {
					t.Errorf("keys %v warnings %q", r.HostKeys, r.Warnings)
				}
			}},
		{name: "host key that is not base64 is left out", ctype: formType, body: "hostname=h&pub_key_ed25519=ssh-ed25519+not*base64",
			check: func(t *testing.T, r *Report) {
				if len(r.HostKeys) != 0 || len(r.Warnings) != 1 {
					t.Errorf("keys %v warnings %q", r.HostKeys, r.Warnings)
				}
			}},
		{name: "form key field with another type is left out", ctype: formType, body: "hostname=h&pub_key_rsa=" + url.QueryEscape(keys["ed25519"]),
			check: func(t *testing.T, r *Report) {
				if len(r.HostKeys) != 0 || len(r.Warnings) != 1 {
					t.Errorf("keys %v warnings %q", r.HostKeys, r.Warnings)
				}
			}},
		{name: "bad address is left out, the rest kept", ctype: jsonType,
			body: `{"addresses": [{"interface": "eth0", "address": "10.0.2.300/24"}, {"interface": "eth0", "mac": "nope", "address": "10.0.2.15"}, {"interface": "eth0", "mac": "52-54-00-AA-BB-CC", "address": "fe80::1%eth0"}]}`,
			check: func(t *testing.T, r *Report) {
				if len(r.Addresses) != 1 || r.Addresses[0] != (Address{"eth0", "52:54:00:aa:bb:cc", "fe80::1%eth0"}) || len(r.Warnings) != 2 {
					t.Errorf("addresses %+v warnings %q", r.Addresses, r.Warnings)
				}
			}},
		{name: "no content type, JSON body", body: `{"hostname": "h"}`,
			check: func(t *testing.T, r *Report) {
				if r.Kind != KindJSON || r.Hostname != "h" {
					t.Errorf("%+v", r)
				}
			}},
		{name: "no content type, form body", body: `hostname=h`,
			check: func(t *testing.T, r *Report) {
				if r.Kind != KindForm || r.Hostname != "h" {
					t.Errorf("%+v", r)
				}
			}},
		{name: "token carried", ctype: jsonType, body: `{"token": "AAAAAAAAAAAAAAAAAAAAAAAA"}`,
			check: func(t *testing.T, r *Report) {
				if r.Token != "AAAAAAAAAAAAAAAAAAAAAAAA" || strings.Contains(r.String(), r.Token) {
					t.Errorf("token %q, String %q", r.Token, r.String())
				}
			}},
		{name: "unknown JSON fields are ignored", ctype: jsonType, body: `{"hostname": "h", "uptime": 12.5, "extra": {"a": [1]}}`,
			check: func(t *testing.T, r *Report) {
				if r.Hostname != "h" {
					t.Errorf("%+v", r)
				}
			}},
		{name: "cloud_init null", ctype: jsonType, body: `{"cloud_init": null}`,
			check: func(t *testing.T, r *Report) {
				if r.CloudInit != nil {
					t.Errorf("%+v", r.CloudInit)
				}
			}},
		{name: "invalid JSON", ctype: jsonType, body: `{"hostname": "h"`, wantErr: ErrMalformed},
		{name: "JSON array", ctype: jsonType, body: `[{"hostname": "h"}]`, wantErr: ErrMalformed},
		{name: "JSON null", ctype: jsonType, body: `null`, wantErr: ErrMalformed},
		{name: "trailing data", ctype: jsonType, body: `{"hostname": "h"} {}`, wantErr: ErrMalformed},
		{name: "wrong type", ctype: jsonType, body: `{"hostname": 7}`, wantErr: ErrMalformed},
		{name: "negative memory", ctype: jsonType, body: `{"gpus": [{"name": "g", "memory_mib": -1}]}`, wantErr: ErrMalformed},
		{name: "host_keys a string", ctype: jsonType, body: `{"host_keys": "ssh-ed25519 AAAA"}`, wantErr: ErrMalformed},
		{name: "cloud_init unrecognised", ctype: jsonType, body: `{"cloud_init": {"state": "ok"}}`, wantErr: ErrMalformed},
		{name: "cloud_init a number", ctype: jsonType, body: `{"cloud_init": 0}`, wantErr: ErrMalformed},
		{name: "control character in hostname", ctype: jsonType, body: `{"hostname": "web\u001b[2J"}`, wantErr: ErrMalformed},
		{name: "bidi override in hostname", ctype: formType, body: "hostname=web%E2%80%AE", wantErr: ErrMalformed},
		{name: "invalid UTF-8 in form", ctype: formType, body: "hostname=%FF%FE", wantErr: ErrMalformed},
		{name: "hostname too long", ctype: formType, body: "hostname=" + strings.Repeat("a", 256), wantErr: ErrMalformed},
		{name: "token of the wrong shape", ctype: jsonType, body: `{"token": "short"}`, wantErr: ErrMalformed},
		{name: "form with no phone_home field", ctype: formType, body: "a=b", wantErr: ErrMalformed},
		{name: "JSON sent as form", ctype: formType, body: `{"hostname": "h"}`, wantErr: ErrMalformed},
		{name: "bad form escape", ctype: formType, body: "hostname=%zz", wantErr: ErrMalformed},
		{name: "plain text", ctype: "text/plain", body: "ready", wantErr: ErrUnsupportedContentType},
		{name: "bad content type", ctype: "application/", body: "x", wantErr: ErrUnsupportedContentType},
		{name: "too large", ctype: jsonType, body: `{"hostname": "` + strings.Repeat("a", MaxBodyBytes) + `"}`, wantErr: ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseReport(tc.ctype, []byte(tc.body))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || r != nil {
					t.Fatalf("got %v, %v; want %v", r, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

// Errors go back to the client and may reach logs of callers: they must not
// quote the body.
func TestParseReportErrorsDoNotQuoteBody(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"hostname": "SECRETVALUE`,
		`{"hostname": SECRETVALUE}`,
		`{"hostname": ["SECRETVALUE"]}`,
		`{"gpus": [{"memory_mib": "SECRETVALUE"}]}`,
		`{"cloud_init": {"status": "done", "errors": "SECRETVALUE"}}`,
		`{"cloud_init": "SECRETVALUE"}`,
	} {
		_, err := ParseReport(jsonType, []byte(body))
		if err == nil {
			t.Fatalf("%s: accepted", body)
		}
		if strings.Contains(err.Error(), "SECRETV") {
			t.Errorf("%s: error quotes the body: %v", body, err)
		}
	}
	// Errors from the standard library quote single characters or escapes:
	// those must not come through either.
	for _, tc := range []struct{ ctype, body, quoted string }{
		{formType, "hostname=%Q7", "%Q7"},
		{jsonType, `{"cloud_init": "{\"status\": Q7}"}`, "'Q'"},
		{jsonType, `{"hostname": Q7}`, "'Q'"},
	} {
		_, err := ParseReport(tc.ctype, []byte(tc.body))
		if err == nil || strings.Contains(err.Error(), tc.quoted) {
			t.Errorf("%s: error %v quotes %q", tc.body, err, tc.quoted)
		}
	}
}

func TestReportClone(t *testing.T) {
	t.Parallel()
	r, err := ParseReport(jsonType, jsonBody(t, readFixture(t, "cloudinit/25.1-status-error.json")))
	if err != nil {
		t.Fatal(err)
	}
	c := r.Clone()
	c.HostKeys["ssh-ed25519"] = "x"
	c.Addresses[0].Interface = "x"
	c.GPUs[0].Name = "x"
	c.CloudInit.Errors[0] = "x"
	c.CloudInit.Status = "x"
	if r.HostKeys["ssh-ed25519"] == "x" || r.Addresses[0].Interface == "x" || r.GPUs[0].Name == "x" || r.CloudInit.Errors[0] == "x" || r.CloudInit.Status == "x" {
		t.Error("Clone shares state with the original")
	}
}

// sent_at is optional: a report with it carries the guest's clock, one
// without it (an older reporter) parses as before, and one whose value is
// not an RFC 3339 time keeps the rest of the report with a warning.
func TestParseReportSentAt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, field string
		want        time.Time
		warn        bool
	}{
		{"microseconds in UTC", `, "sent_at": "2026-11-25T12:00:01.123456Z"`, time.Date(2026, 11, 25, 12, 0, 1, 123456000, time.UTC), false},
		{"nanoseconds with an offset", `, "sent_at": "2026-11-25T13:00:01.123456789+01:00"`, time.Date(2026, 11, 25, 12, 0, 1, 123456789, time.UTC), false},
		{"absent", ``, time.Time{}, false},
		{"null", `, "sent_at": null`, time.Time{}, false},
		{"not RFC 3339", `, "sent_at": "Wed Nov 25 12:00:01 UTC 2026"`, time.Time{}, true},
		{"a number", `, "sent_at": 1795608001.123`, time.Time{}, true},
		{"too long", `, "sent_at": "2026-11-25T12:00:01.` + strings.Repeat("1", 80) + `Z"`, time.Time{}, true},
	}
	for _, tc := range cases {
		r, err := ParseReport("application/json", []byte(`{"hostname": "web-1", "cloud_init": {"status": "done", "errors": []}`+tc.field+`}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !r.SentAt.Equal(tc.want) || r.Hostname != "web-1" || r.CloudInit == nil {
			t.Errorf("%s: SentAt %v, want %v (report %s)", tc.name, r.SentAt, tc.want, r)
		}
		if warned := slices.Contains(r.Warnings, SentAtField+": not an RFC 3339 time; left out"); warned != tc.warn || len(r.Warnings) > 1 {
			t.Errorf("%s: warnings %q", tc.name, r.Warnings)
		}
		if _, ok := r.Transit(); ok {
			t.Errorf("%s: a transit time before the report was received", tc.name)
		}
	}
	r, _ := ParseReport("application/json", []byte(`{"sent_at": "2026-11-25T12:00:01.5Z"}`))
	r.ReceivedAt = time.Date(2026, 11, 25, 12, 0, 1, 750000000, time.UTC)
	if d, ok := r.Transit(); !ok || d != 250*time.Millisecond {
		t.Errorf("Transit = %v, %v; want 250ms", d, ok)
	}
	if c := r.Clone(); !c.SentAt.Equal(r.SentAt) {
		t.Errorf("Clone lost SentAt: %v", c.SentAt)
	}
}
