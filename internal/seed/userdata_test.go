package seed

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"strings"
	"testing"
)

// parts parses a MIME multipart document independently of the package
// (net/mail + mime/multipart) and returns each part's content type and
// decoded body.
func parts(t testing.TB, doc []byte) (ctypes []string, bodies [][]byte, headers []map[string]string) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("not a MIME message: %v\n%s", err, doc)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/mixed" {
		t.Fatalf("top-level Content-Type %q: %v", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading part: %v\n%s", err, doc)
		}
		b, _ := io.ReadAll(p)
		if strings.EqualFold(p.Header.Get("Content-Transfer-Encoding"), "base64") {
			b, err = base64.StdEncoding.DecodeString(strings.NewReplacer("\n", "", "\r", "").Replace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		ctypes = append(ctypes, ct)
		bodies = append(bodies, b)
		h := map[string]string{}
		for k := range p.Header {
			h[k] = p.Header.Get(k)
		}
		headers = append(headers, h)
	}
	return ctypes, bodies, headers
}

func TestUserDataUnchangedWithoutGeneratedContent(t *testing.T) {
	t.Parallel()
	b64 := string(readInput(t, "cloudinit_config.b64"))
	raw, _ := base64.StdEncoding.DecodeString(b64)
	cases := []struct {
		name string
		spec *Spec
		want []byte
	}{
		{"gzip+base64 MIME from cloudinit_config", &Spec{Name: "vm1", UserDataBase64: b64, Hostname: "h", PublicKeys: []string{keyRSA}}, raw},
		{"plain text", &Spec{Name: "vm1", UserData: []byte("#!/bin/sh\r\necho crlf kept\r\n")}, []byte("#!/bin/sh\r\necho crlf kept\r\n")},
		{"binary (gzip)", &Spec{Name: "vm1", UserData: gz(t, []byte("#cloud-config\n"))}, gz(t, []byte("#cloud-config\n"))},
		{"configdrive", &Spec{Name: "vm1", Format: FormatConfigDrive, UserDataBase64: b64}, raw},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Render(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := userDataOf(r); !bytes.Equal(got, tc.want) {
				t.Errorf("user data was rewritten:\n%q\nwant\n%q", got, tc.want)
			}
			if r.UserDataMerged {
				t.Error("UserDataMerged set with nothing to merge")
			}
		})
	}
}

func TestUserDataMerged(t *testing.T) {
	t.Parallel()
	b64 := string(readInput(t, "cloudinit_config.b64"))
	tfDoc, _ := gunzipCapped(mustB64(t, b64), 1<<20)
	cases := []struct {
		name      string
		user      []byte
		wantTypes []string
		userParts int // leading parts that are the user's
	}{
		{"shell script", []byte("#!/bin/bash\necho hi\n"), []string{"text/x-shellscript", "text/cloud-config"}, 1},
		{"cloud-config without trailing newline", []byte("#cloud-config\nruncmd: [x]"), []string{"text/cloud-config", "text/cloud-config"}, 1},
		{"boothook", []byte("#cloud-boothook\necho early\n"), []string{"text/cloud-boothook", "text/cloud-config"}, 1},
		{"jinja template", []byte("## template: jinja\n#cloud-config\nruncmd: [x]\n"), []string{"text/jinja2", "text/cloud-config"}, 1},
		{"CRLF text goes base64", []byte("#!/bin/sh\r\necho\r\n"), []string{"text/x-shellscript", "text/cloud-config"}, 1},
		{"gzip cloud-config", gz(t, []byte("#cloud-config\nruncmd: [x]\n")), []string{"text/cloud-config", "text/cloud-config"}, 1},
		{"cloudinit_config MIME is flattened", tfDoc, []string{"text/cloud-config", "text/x-shellscript", "text/cloud-config"}, 2},
		{"single MIME entity", []byte("Content-Type: text/x-shellscript\nMIME-Version: 1.0\n\n#!/bin/sh\necho one\n"), []string{"text/x-shellscript", "text/cloud-config"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Render(&Spec{Name: "vm1", QEMUGuestAgent: true, UserData: tc.user})
			if err != nil {
				t.Fatal(err)
			}
			if !r.UserDataMerged {
				t.Error("UserDataMerged not set")
			}
			doc := r.Files[FileUserData]
			if n := bytes.Count(doc, []byte("multipart/mixed")); n != 1 {
				t.Errorf("%d multipart/mixed headers: documents must be flattened, not nested", n)
			}
			ctypes, bodies, headers := parts(t, doc)
			if strings.Join(ctypes, ",") != strings.Join(tc.wantTypes, ",") {
				t.Fatalf("part types %v, want %v\n%s", ctypes, tc.wantTypes, doc)
			}
			last := len(ctypes) - 1
			if want := "#cloud-config\nruncmd:\n  - systemctl is-enabled --quiet qemu-guest-agent || systemctl enable qemu-guest-agent\n  - systemctl start --no-block qemu-guest-agent\n"; string(bodies[last]) != want {
				t.Errorf("generated part %q, want %q", bodies[last], want)
			}
			if headers[last]["Merge-Type"] != DefaultMergeType {
				t.Errorf("generated part Merge-Type %q", headers[last]["Merge-Type"])
			}
			plain := tc.user
			if isGzip(plain) {
				plain, _ = gunzipCapped(plain, 1<<20)
			}
			if tc.userParts == 1 && !bytes.Contains(plain, []byte("MIME-Version")) && !bytes.Equal(bodies[0], plain) {
				t.Errorf("user's part body %q, want the user's bytes %q", bodies[0], plain)
			}
			// Deterministic: the same input gives the same document.
			r2, _ := Render(&Spec{Name: "vm1", QEMUGuestAgent: true, UserData: tc.user})
			if !bytes.Equal(doc, r2.Files[FileUserData]) {
				t.Error("merged user data is not deterministic")
			}
		})
	}
}

func mustB64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The user's multipart document keeps every byte up to its closing
// delimiter, and the generated part follows in its line-ending style.
func TestAppendPartKeepsUserBytes(t *testing.T) {
	t.Parallel()
	b64 := string(readInput(t, "cloudinit_config.b64"))
	tfDoc, _ := gunzipCapped(mustB64(t, b64), 1<<20)
	closing := bytes.LastIndex(tfDoc, []byte("--MIMEBOUNDARY--"))
	r, err := Render(&Spec{Name: "vm1", QEMUGuestAgent: true, UserDataBase64: b64})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Files[FileUserData]
	if !bytes.HasPrefix(got, tfDoc[:closing]) {
		t.Fatal("the user's bytes before the closing delimiter changed")
	}
	if !bytes.HasSuffix(got, tfDoc[closing:]) {
		t.Error("the closing delimiter (and epilogue) is not kept at the end")
	}
	inserted := got[closing : len(got)-len(tfDoc)+closing]
	if !bytes.HasPrefix(inserted, []byte("--MIMEBOUNDARY\r\nContent-Type: text/cloud-config")) || !bytes.Contains(inserted, []byte("Merge-Type: "+DefaultMergeType+"\r\n")) {
		t.Errorf("inserted part does not use the document's CRLF headers:\n%q", inserted)
	}

	// No closing delimiter: the part and one are added.
	open := []byte("Content-Type: multipart/mixed; boundary=b\nMIME-Version: 1.0\n\n--b\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho open")
	doc, merged, err := combineUserData(&userInput{raw: open, plain: open, mime: true}, []byte("#cloud-config\n{}\n"))
	if err != nil || !merged {
		t.Fatal(err)
	}
	ctypes, bodies, _ := parts(t, doc)
	if strings.Join(ctypes, ",") != "text/x-shellscript,text/cloud-config" || string(bodies[0]) != "#!/bin/sh\necho open" {
		t.Errorf("unterminated document: %v %q\n%s", ctypes, bodies, doc)
	}
}

// Generated text that contains the user's boundary is sent base64-encoded
// so it cannot end the user's document early.
func TestGeneratedPartEscapesUserBoundary(t *testing.T) {
	t.Parallel()
	user := []byte("Content-Type: multipart/mixed; boundary=\"b\"\nMIME-Version: 1.0\n\n--b\nContent-Type: text/x-shellscript\n\n#!/bin/sh\n--b--\n")
	r, err := Render(&Spec{Name: "vm1", UserData: user, WriteFiles: []File{{Path: "/x", Content: []byte("--b--\n--b\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	ctypes, bodies, headers := parts(t, r.Files[FileUserData])
	if len(ctypes) != 2 || headers[1]["Content-Transfer-Encoding"] != "base64" {
		t.Fatalf("parts %v headers %v", ctypes, headers)
	}
	if !bytes.Contains(bodies[1], []byte("content: |\n      --b--\n      --b\n")) {
		t.Errorf("generated part lost the file content:\n%s", bodies[1])
	}
}

func TestBoundaryAvoidsContent(t *testing.T) {
	t.Parallel()
	a := []byte("hello")
	first := boundaryFor(a)
	clash := []byte("--" + first)
	b := boundaryFor(clash)
	if bytes.Contains(clash, []byte("--"+b)) {
		t.Errorf("boundary %q occurs in the content", b)
	}
	if boundaryFor(a) != first {
		t.Error("boundary is not deterministic")
	}
}

func TestSniffType(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"#cloud-config\n":         "text/cloud-config",
		"  \n#Cloud-Config\n":     "text/cloud-config",
		"#cloud-config-archive\n": "text/cloud-config-archive",
		"#cloud-config-jsonp\n":   "text/cloud-config-jsonp",
		"#!/bin/sh\n":             "text/x-shellscript",
		"#include\nhttp://x\n":    "text/x-include-url",
		"#include-once\nhttp://x": "text/x-include-once-url",
		"#cloud-boothook\n":       "text/cloud-boothook",
		"#part-handler\n":         "text/part-handler",
		"## template: jinja\n":    "text/jinja2",
		"hello":                   "",
		"\xff\xfe#cloud-config":   "",
	} {
		if got := sniffType([]byte(in)); got != want {
			t.Errorf("sniffType(%q) = %q, want %q", in, got, want)
		}
	}
}
