package seed

import (
	"strings"
	"testing"
)

// TestUserDataFormatRefused: user data cloud-init would ignore is refused
// with the attribute path, what it starts with and an example; every format
// cloud-init acts on is accepted, plain and gzip-compressed.
func TestUserDataFormatRefused(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name string
		spec func(testing.TB) *Spec
		path string
		want string
	}{
		{"plain words", func(testing.TB) *Spec { return &Spec{Name: "vm1", UserData: []byte("hello world")} }, "user_data", `starts with "hello world"`},
		{"yaml without header", func(testing.TB) *Spec { return &Spec{Name: "vm1", UserData: []byte("runcmd:\n  - echo hi\n")} }, "user_data", `"runcmd:"`},
		{"upstart job", func(testing.TB) *Spec { return &Spec{Name: "vm1", UserData: []byte("#upstart-job\nstart on x\n")} }, "user_data", "#upstart-job is no longer handled"},
		{"only white space", func(testing.TB) *Spec { return &Spec{Name: "vm1", UserData: []byte(" \n\t\n")} }, "user_data", "white space"},
		{"binary", func(testing.TB) *Spec { return &Spec{Name: "vm1", UserData: []byte{0xff, 0, 0xfe}} }, "user_data", "none of the formats"},
		{"gzip of words", func(t testing.TB) *Spec { return &Spec{Name: "vm1", UserData: gz(t, []byte("hello\n"))} }, "user_data", `is gzip whose content starts with "hello"`},
		{"base64 of words", func(testing.TB) *Spec { return &Spec{Name: "vm1", UserDataBase64: "aGVsbG8gd29ybGQ="} }, "user_data_base64", `"hello world"`},
		{"merged with generated content", func(testing.TB) *Spec {
			return &Spec{Name: "vm1", QEMUGuestAgent: true, UserData: []byte("hello world")}
		}, "user_data", "cloud-init would ignore it"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Validate(tc.spec(t))
			ves := ValidationErrors(err)
			if len(ves) != 1 {
				t.Fatalf("want one validation error, got %v", err)
			}
			if ves[0].Path.String() != tc.path || !strings.Contains(ves[0].Problem, tc.want) || ves[0].Example == "" {
				t.Errorf("got %q, want path %s and a problem with %q and an example", ves[0].Error(), tc.path, tc.want)
			}
		})
	}
	good := map[string][]byte{
		"cloud-config":         []byte("#cloud-config\nruncmd: [x]\n"),
		"leading blank line":   []byte("\n#cloud-config\n"),
		"upper case":           []byte("#Cloud-Config\n"),
		"script":               []byte("#!/bin/sh\necho hi\n"),
		"include":              []byte("#include\nhttp://example.com/ud\n"),
		"include-once":         []byte("#include-once\nhttp://example.com/ud\n"),
		"boothook":             []byte("#cloud-boothook\necho early\n"),
		"part-handler":         []byte("#part-handler\ndef list_types(): return []\n"),
		"cloud-config-archive": []byte("#cloud-config-archive\n- content: '#cloud-config'\n"),
		"cloud-config-jsonp":   []byte("#cloud-config-jsonp\n[]\n"),
		"jinja":                []byte("## template: jinja\n#cloud-config\n"),
		"mime":                 []byte("Content-Type: text/x-shellscript\nMIME-Version: 1.0\n\n#!/bin/sh\necho one\n"),
	}
	for name, ud := range good {
		for _, zip := range []bool{false, true} {
			b := ud
			if zip {
				b = gz(t, ud)
			}
			if err := Validate(&Spec{Name: "vm1", UserData: b}); err != nil {
				t.Errorf("%s (gzip %v) refused: %v", name, zip, err)
			}
		}
	}
}

// TestSSHKeyRefused: entries that are not one OpenSSH public key are
// refused with the attribute path; authorized_keys options and comments are
// accepted as sshd accepts them.
func TestSSHKeyRefused(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"not a key":   "is not an OpenSSH public key",
		"ssh-ed25519": "is not an OpenSSH public key",
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyOnlyForTheDocs0000000000000000": "is not an OpenSSH public key",
		"-----BEGIN OPENSSH PRIVATE KEY-----":                                           "private key",
		"---- BEGIN SSH2 PUBLIC KEY ----":                                               "RFC 4716",
		keyEd25519 + "\n" + keyRSA:                                                      "several lines",
		"":                                                                              "is empty",
	}
	for k, want := range bad {
		err := Validate(&Spec{Name: "vm1", User: &User{Name: "kohaku", SSHAuthorizedKeys: []string{keyEd25519, k}}})
		ves := ValidationErrors(err)
		if len(ves) != 1 || ves[0].Path.String() != "user.ssh_authorized_keys[1]" || !strings.Contains(ves[0].Problem, want) || ves[0].Example == "" {
			t.Errorf("%q: got %v, want user.ssh_authorized_keys[1] with %q", k, err, want)
		}
		err = Validate(&Spec{Name: "vm1", PublicKeys: []string{k}})
		if ves := ValidationErrors(err); len(ves) != 1 || ves[0].Path.String() != "public_keys[0]" {
			t.Errorf("public_keys %q: got %v", k, err)
		}
	}
	for _, k := range []string{
		keyEd25519,
		keyRSA,
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILFRDGJOE867zGQxw9jhleSLQZuOfZq+YKlHt9Qo49YI",
		`from="10.0.0.0/8",no-agent-forwarding ` + keyEd25519,
		`command="echo \"hi there\"" ` + keyRSA,
		keyEd25519 + " a comment with spaces",
	} {
		if err := Validate(&Spec{Name: "vm1", User: &User{Name: "kohaku", SSHAuthorizedKeys: []string{k}}}); err != nil {
			t.Errorf("%q refused: %v", k, err)
		}
	}
}
