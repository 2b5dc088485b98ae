package seed

import (
	"strings"
	"testing"
)

func TestInspectRoundTrip(t *testing.T) {
	t.Parallel()
	for _, format := range []Format{FormatNoCloud, FormatConfigDrive} {
		t.Run(string(format), func(t *testing.T) {
			t.Parallel()
			spec := &Spec{
				Name:   "inspect-me",
				Format: format,
				Network: []NIC{
					{Addresses: []string{"10.0.2.15/24"}, Gateway4: "10.0.2.2"},
					{MAC: "52:54:00:AA:BB:CC", DHCP4: true},
				},
			}
			res, err := Render(spec)
			if err != nil {
				t.Fatal(err)
			}
			in, err := Inspect(res.ISO)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if in.Format != format || in.InstanceID != res.InstanceID {
				t.Errorf("format=%q instance=%q, want %q %q", in.Format, in.InstanceID, format, res.InstanceID)
			}
			want := []string{DeriveMAC("inspect-me"), "52:54:00:aa:bb:cc"}
			if strings.Join(in.MACs, ",") != strings.Join(want, ",") || strings.Join(res.MACs, ",") != strings.Join(want, ",") {
				t.Errorf("MACs: inspected %v, rendered %v, want %v", in.MACs, res.MACs, want)
			}
			for name, b := range res.Files {
				if string(in.Files[name]) != string(b) {
					t.Errorf("file %s differs after the round trip", name)
				}
			}
		})
	}
}

func TestInspectNetplanV1AndWrapped(t *testing.T) {
	t.Parallel()
	v1 := "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    mac_address: '52:54:00:12:34:56'\n"
	macs, err := netplanMACs([]byte(v1))
	if err != nil || len(macs) != 1 || macs[0] != "52:54:00:12:34:56" {
		t.Errorf("v1: %v %v", macs, err)
	}
	wrapped := "network:\n  version: 2\n  ethernets:\n    b:\n      match: {macaddress: '52:54:00:00:00:02'}\n    a:\n      match: {macaddress: '52:54:00:00:00:01'}\n"
	macs, err = netplanMACs([]byte(wrapped))
	if err != nil || strings.Join(macs, ",") != "52:54:00:00:00:02,52:54:00:00:00:01" {
		t.Errorf("wrapped v2 (document order): %v %v", macs, err)
	}
}

func TestInspectRejectsNonSeeds(t *testing.T) {
	t.Parallel()
	img, err := BuildISO("DATA", map[string][]byte{"readme.txt": []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Inspect(img); err == nil || !strings.Contains(err.Error(), "not a cloud-init seed") {
		t.Errorf("non-seed label: %v", err)
	}
	if _, err := Inspect([]byte("not an iso at all")); err == nil {
		t.Error("garbage accepted")
	}
}

func TestInspectFindsPhoneHomeURL(t *testing.T) {
	t.Parallel()
	url := "http://10.0.2.2:8787/v1/phone-home/AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"
	for name, user := range map[string][]byte{
		"generated only":                nil,
		"merged with user cloud-config": []byte("#cloud-config\nruncmd:\n  - echo hi\n"),
		"merged with user script":       []byte("#!/bin/sh\necho hi\n"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := Render(&Spec{Name: "ph", PhoneHome: &PhoneHome{URL: url}, UserData: user, QEMUGuestAgent: true})
			if err != nil {
				t.Fatal(err)
			}
			in, err := Inspect(res.ISO)
			if err != nil {
				t.Fatal(err)
			}
			if in.PhoneHomeURL != url {
				t.Errorf("PhoneHomeURL = %q, want %q\nuser-data:\n%s", in.PhoneHomeURL, url, res.Files[FileUserData])
			}
		})
	}
	res, err := Render(&Spec{Name: "noph", QEMUGuestAgent: true})
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := Inspect(res.ISO); in.PhoneHomeURL != "" {
		t.Errorf("a seed without phone_home reports URL %q", in.PhoneHomeURL)
	}
}

func TestReporterReplacesPhoneHomeModule(t *testing.T) {
	t.Parallel()
	url := "http://10.0.2.2:8787/v1/phone-home/AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"
	for name, user := range map[string][]byte{
		"generated only":   nil,
		"merged with user": []byte("#cloud-config\nruncmd:\n  - echo hi\n"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := Render(&Spec{Name: "rep", UserData: user, PhoneHome: &PhoneHome{URL: url, Reporter: true, Token: "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"}})
			if err != nil {
				t.Fatal(err)
			}
			ud := string(res.Files[FileUserData])
			if strings.Contains(ud, "phone_home:") {
				t.Errorf("the phone_home module is configured although the reporter replaces it")
			}
			for _, want := range []string{ReporterScriptPath, ReporterConfigPath, ReporterUnitPath, "systemctl start --no-block kohaku-report.service", "After=cloud-final.service"} {
				if !strings.Contains(ud, want) {
					t.Errorf("user-data lacks %q", want)
				}
			}
			in, err := Inspect(res.ISO)
			if err != nil {
				t.Fatal(err)
			}
			if in.PhoneHomeURL != url {
				t.Errorf("Inspect found %q, want %q", in.PhoneHomeURL, url)
			}
		})
	}
}

// A seed that reports over the channel only carries a token derived from its
// inputs, which Inspect finds again; with phone home the reporter carries the
// phone-home token instead; without either there is no reporter.
func TestReportChannelToken(t *testing.T) {
	t.Parallel()
	render := func(s *Spec) (*Inspection, string) {
		t.Helper()
		res, err := Render(s)
		if err != nil {
			t.Fatal(err)
		}
		in, err := Inspect(res.ISO)
		if err != nil {
			t.Fatal(err)
		}
		return in, string(res.Files[FileUserData])
	}
	ch := &Spec{Name: "chan", ReportChannel: true, UserData: []byte("#!/bin/sh\necho hi\n")}
	in, ud := render(ch)
	want := DerivedReportToken(ch)
	if in.ReportToken != want || len(want) != 32 {
		t.Errorf("ReportToken = %q, want the derived %q (32 chars)\n%s", in.ReportToken, want, ud)
	}
	if in.HeartbeatSeconds != 0 {
		t.Errorf("HeartbeatSeconds = %d for a seed without heartbeats", in.HeartbeatSeconds)
	}
	hb := *ch
	hb.HeartbeatSeconds = 25
	if in, ud := render(&hb); in.HeartbeatSeconds != 25 {
		t.Errorf("HeartbeatSeconds = %d, want 25\n%s", in.HeartbeatSeconds, ud)
	}
	if in.PhoneHomeURL != "" {
		t.Errorf("a channel-only seed has phone-home URL %q", in.PhoneHomeURL)
	}
	for _, s := range []string{ReporterScriptPath, "systemctl start --no-block kohaku-report.service", `"url":""`} {
		if !strings.Contains(ud, s) {
			t.Errorf("user-data lacks %q", s)
		}
	}
	// Plan renders with the instance id derived, apply with it given (the
	// plan's value): the same ISO, or Terraform sees an inconsistent apply.
	first, err := Render(&Spec{Name: "chan", ReportChannel: true, UserData: []byte("#!/bin/sh\necho hi\n")})
	if err != nil {
		t.Fatal(err)
	}
	second, err := Render(&Spec{Name: "chan", ReportChannel: true, UserData: []byte("#!/bin/sh\necho hi\n"), InstanceID: first.InstanceID})
	if err != nil {
		t.Fatal(err)
	}
	if first.ISOSHA256 != second.ISOSHA256 {
		t.Errorf("instance id derived vs given: ISO %s vs %s", first.ISOSHA256, second.ISOSHA256)
	}
	// Same inputs, same token; any change, another token.
	if again := DerivedReportToken(&Spec{Name: "chan", ReportChannel: true, UserData: []byte("#!/bin/sh\necho hi\n")}); again != want {
		t.Errorf("token not reproducible: %q then %q", want, again)
	}
	if other := DerivedReportToken(&Spec{Name: "chan", ReportChannel: true, UserData: []byte("#!/bin/sh\necho ho\n")}); other == want {
		t.Error("different user data, same token")
	}

	tok := "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"
	url := "http://10.0.2.2:8787/v1/phone-home/" + tok
	in, _ = render(&Spec{Name: "both", ReportChannel: true, PhoneHome: &PhoneHome{URL: url, Reporter: true, Token: tok}})
	if in.ReportToken != tok || in.PhoneHomeURL != url {
		t.Errorf("phone home + channel: token %q url %q", in.ReportToken, in.PhoneHomeURL)
	}
	// cloud-init's phone_home module posts; the reporter still uses the channel.
	in, ud = render(&Spec{Name: "module", ReportChannel: true, PhoneHome: &PhoneHome{URL: url, Token: tok}})
	if in.ReportToken != tok || !strings.Contains(ud, "phone_home:") {
		t.Errorf("module + channel: token %q\n%s", in.ReportToken, ud)
	}
	if in, _ = render(&Spec{Name: "none", UserData: []byte("#cloud-config\nwrite_files:\n- path: /x\n  content: '\"token\": \"AbCdEfGhIjKlMnOpQrStUvWxYz0123\"'\n")}); in.ReportToken != "" {
		t.Errorf("a seed without reporter has report token %q", in.ReportToken)
	}
}
