package image

import (
	"strings"
	"testing"
)

// TestFetchErrorsHideURLPasswords: a password in an image or checksum URL
// appears in no error, whether the URL parses or not (a '/', '#' or '?' in
// an unencoded password breaks it), and a URL that does not parse is an
// error, not a local path.
func TestFetchErrorsHideURLPasswords(t *testing.T) {
	srv := newImageServer(t)
	base := strings.TrimSuffix(srv.put("/there.qcow2", []byte("x")), "/there.qcow2")
	host := strings.TrimPrefix(base, "http://")
	cases := map[string]Request{
		"unparsable slash":    {Source: "https://user:s3cr/etpw@" + host + "/img.qcow2"},
		"unparsable hash":     {Source: "https://user:s3cr#etpw@" + host + "/img.qcow2"},
		"unparsable question": {Source: "https://user:s3cr?etpw@" + host + "/img.qcow2"},
		"missing image":       {Source: "http://user:s3cretpw@" + host + "/missing.qcow2"},
		"refused":             {Source: "http://user:s3cretpw@127.0.0.1:1/img.qcow2"},
		"missing checksum":    {Source: base + "/there.qcow2", ChecksumURL: "http://user:s3cretpw@" + host + "/SHA256SUMS"},
		"unparsable checksum": {Source: base + "/there.qcow2", ChecksumURL: "https://user:s3cr/etpw@" + host + "/SHA256SUMS"},
	}
	for name, req := range cases {
		_, err := fetch(t, &Cache{Dir: t.TempDir()}, req)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		for _, secret := range []string{"s3cr", "etpw"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: error shows the password: %v", name, err)
			}
		}
		if strings.HasPrefix(name, "unparsable") && !strings.Contains(err.Error(), "does not parse") {
			t.Errorf("%s: %v, want a URL that does not parse", name, err)
		}
	}
}
