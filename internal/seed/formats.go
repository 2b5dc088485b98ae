package seed

import (
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Input that cloud-init would take without complaint and then ignore, so
// that the user only finds out inside the guest, is refused here.

// userDataFormats names what cloud-init accepts as user data, for messages.
const userDataFormats = "#cloud-config, a #! script, MIME multipart (MIME-Version header), #include, #include-once, " +
	"#cloud-boothook, #part-handler, #cloud-config-archive, #cloud-config-jsonp or a '## template: jinja' header, " +
	"optionally gzip-compressed"

// checkUserDataFormat refuses user data that is none of the formats
// cloud-init acts on. cloud-init (22.4 and 25.1 alike) looks at the
// decompressed data: MIME when a "MIME-Version:" header is in its first
// 4096 bytes, else by the prefixes of handlers.INCLUSION_TYPES_MAP after
// leading white space; anything else becomes a text/x-not-multipart part
// that no handler takes, with only a warning in the guest's log. The old
// "#upstart-job" is such a case: neither generation has a handler for it.
func checkUserDataFormat(u *userInput, path string, p *problems) {
	if u == nil || u.mime {
		return
	}
	if len(bytes.TrimSpace(u.plain)) == 0 {
		p.add(path, "is empty or only white space: cloud-init would do nothing with it; leave the attribute unset instead",
			`user_data = "#cloud-config\nruncmd:\n  - echo hello\n"`)
		return
	}
	if sniffType(u.plain) != "" {
		return
	}
	what := "starts with " + quoteStart(u.plain)
	if u.gzipped {
		what = "is gzip whose content " + what
	}
	extra := ""
	if bytes.HasPrefix(bytes.ToLower(bytes.TrimLeft(u.plain, " \t\r\n")), []byte("#upstart-job")) {
		extra = " (#upstart-job is no longer handled by cloud-init)"
	}
	p.add(path, fmt.Sprintf("%s, which is none of the formats cloud-init accepts (%s)%s: cloud-init would ignore it",
		what, userDataFormats, extra),
		`"#cloud-config\npackages: [htop]\n" or "#!/bin/sh\necho hello\n"`)
}

// quoteStart quotes the first line of b (at most 40 bytes) for a message.
func quoteStart(b []byte) string {
	b = bytes.TrimLeft(b, " \t\r\n")
	if i := bytes.IndexAny(b, "\r\n"); i >= 0 {
		b = b[:i]
	}
	s := string(b)
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// sshKeyProblem says what is wrong with an authorized_keys entry, or "" when
// it is one OpenSSH public key: an optional options prefix, the key type, the
// base64 key blob and an optional comment, all on one line, as sshd reads
// ~/.ssh/authorized_keys (and cloud-init writes the entry there as is).
func sshKeyProblem(k string) string {
	if strings.TrimSpace(k) == "" {
		return "is empty"
	}
	if strings.ContainsAny(k, "\r\n\x00") {
		return "spans several lines: give one key per list entry"
	}
	if strings.HasPrefix(strings.TrimSpace(k), "-----BEGIN") {
		return "is a private key or a PEM block, not an OpenSSH public key: use the contents of the .pub file"
	}
	if strings.HasPrefix(strings.TrimSpace(k), "---- BEGIN SSH2 PUBLIC KEY") {
		return "is an RFC 4716 (SSH2) public key: convert it with ssh-keygen -i -f KEY"
	}
	if _, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil {
		return "is not an OpenSSH public key (" + strings.TrimPrefix(err.Error(), "ssh: ") + ")"
	} else if len(bytes.TrimSpace(rest)) > 0 {
		return "holds more than one key: give one key per list entry"
	}
	return ""
}
