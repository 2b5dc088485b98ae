package hostconn

import (
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	t.Parallel()
	cases := []struct {
		uri                                 string
		transport, host, port, user, socket string
		name                                string
	}{
		{"qemu:///system", TransportUnix, "", "", "", "", "qemu:///system"},
		{"qemu:///system?socket=/tmp/x.sock", TransportUnix, "", "", "", "/tmp/x.sock", "qemu:///system"},
		{"test:///default", TransportUnix, "", "", "", "", "test:///default"},
		{"qemu+tcp://127.0.0.1/system", TransportTCP, "127.0.0.1", "16509", "", "", "qemu:///system"},
		{"qemu+tcp://127.0.0.1:1234/system", TransportTCP, "127.0.0.1", "1234", "", "", "qemu:///system"},
		{"qemu://gpu1.example.com/system", TransportTLS, "gpu1.example.com", "16514", "", "", "qemu:///system"},
		{"qemu+tls://gpu1.example.com/system?pkipath=/etc/pki&no_verify=1", TransportTLS, "gpu1.example.com", "16514", "", "", "qemu:///system"},
		{"qemu+ssh://root@gpu1:2222/system?keyfile=/k", TransportSSH, "gpu1", "2222", "root", "/var/run/libvirt/libvirt-sock", "qemu:///system"},
		{"qemu+libssh2://ops@gpu1/system", TransportSSH, "gpu1", "22", "ops", "/var/run/libvirt/libvirt-sock", "qemu:///system"},
		{"qemu+ssh://gpu1/system?socket=/run/libvirt/virtqemud-sock", TransportSSH, "gpu1", "22", "", "/run/libvirt/virtqemud-sock", "qemu:///system"},
		{"qemu+tcp://[::1]:16509/system?name=qemu:///embed", TransportTCP, "::1", "16509", "", "", "qemu:///embed"},
	}
	for _, tc := range cases {
		t.Run(tc.uri, func(t *testing.T) {
			t.Parallel()
			ep, err := ParseURI(tc.uri)
			if err != nil {
				t.Fatalf("ParseURI: %v", err)
			}
			if ep.Transport != tc.transport || ep.Host != tc.host || ep.Port != tc.port || ep.User != tc.user || ep.Name != tc.name {
				t.Errorf("got transport=%q host=%q port=%q user=%q name=%q", ep.Transport, ep.Host, ep.Port, ep.User, ep.Name)
			}
			if tc.socket != "" && ep.Socket != tc.socket {
				t.Errorf("socket = %q, want %q", ep.Socket, tc.socket)
			}
		})
	}
}

func TestParseURISessionSocket(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	ep, err := ParseURI("qemu:///session")
	if err != nil {
		t.Fatal(err)
	}
	if ep.Socket != "/run/user/1000/libvirt/libvirt-sock" || ep.Name != "qemu:///session" {
		t.Errorf("session endpoint = %+v", ep)
	}
}

func TestParseURIErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":                                  "empty",
		"/var/run/libvirt":                  "no scheme",
		"qemu+ftp://host/system":            `transport "ftp"`,
		"qemu+tcp:///system":                "names no host",
		"qemu+tcp://host/system?keyfile=/k": `parameter "keyfile"`,
		"qemu+ssh://host/system?known_hosts_verify=maybe": "normal, auto or ignore",
		"qemu+tls://host/system?no_verify=yes":            "no_verify must be 0 or 1",
	}
	for uri, want := range cases {
		_, err := ParseURI(uri)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURI(%q) error = %v, want it to mention %q", uri, err, want)
		}
	}
}

func TestRedactedHidesPassword(t *testing.T) {
	t.Parallel()
	ep, err := ParseURI("qemu+ssh://ops:s3cret@gpu1/system")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ep.Redacted(), "s3cret") {
		t.Errorf("Redacted() = %q leaks the password", ep.Redacted())
	}
	if ep.password != "s3cret" {
		t.Errorf("password not kept for the dialer")
	}
}

// TestParseURIErrorsHidePassword: a password in a URI reaches no error
// message, whether or not the URI parses.
func TestParseURIErrorsHidePassword(t *testing.T) {
	for _, raw := range []string{
		"qemu+ssh://ops:s3cr3t@gpu1/system?no_verify=yes",
		"qemu+gopher://ops:s3cr3t@gpu1/system",
		"qemu+ssh://ops:s3cr3t@gpu1/system?bogus=1",
		"qemu+ssh://ops:s3cr3t@gpu1:99999999999/system%zz",
		// Unencoded '/', '#' or '?' end the authority early: the URI does
		// not parse, and the parser's message quotes the password as a port.
		"qemu+ssh://ops:s3cr/3t@gpu1/system",
		"qemu+ssh://ops:s3cr#3t@gpu1/system",
		"qemu+ssh://ops:s3cr?3t@gpu1/system",
	} {
		_, err := ParseURI(raw)
		if err == nil {
			t.Fatalf("%s: no error", raw)
		}
		for _, part := range []string{"s3cr", "3t@"} {
			if strings.Contains(err.Error(), part) {
				t.Errorf("error %q shows the password", err)
			}
		}
		if shown := (Endpoint{Raw: raw}).Redacted(); strings.Contains(shown, "s3cr") || strings.Contains(shown, "3t@") {
			t.Errorf("Redacted() = %q shows the password", shown)
		}
	}
}
