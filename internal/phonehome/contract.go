package phonehome

import "strings"

// The guest-to-host report contract, in one place: the virtio-serial
// channel the first-boot reporter writes to (internal/seed/reporter.py
// names the same port; a test ties the two), and the phone-home URL a guest
// posts to, <base URL>PathPrefix<token>.
//
// A JSON report may carry SentAtField: the guest's clock when it wrote
// that copy of the report (each delivery try writes it anew), as an RFC
// 3339 time with sub-second precision in UTC. It is optional: a report
// without it (an older reporter) is accepted as before, and one whose value
// does not parse keeps the rest of the report with a warning.

// ReportChannel is the name of the virtio-serial channel a guest writes its
// first-boot report to; the guest sees it as /dev/virtio-ports/<name>.
const ReportChannel = "org.kohaku.report.0"

// SentAtField is the JSON report's field for the guest's clock when it
// wrote the report.
const SentAtField = "sent_at"

// ViaPhoneHome is Report.Via for a report posted to the listener.
const ViaPhoneHome = "phone_home"

// URL is the phone-home URL for token under base (an http(s) URL without a
// path; trailing slashes are dropped).
func URL(base, token string) string {
	return strings.TrimRight(base, "/") + PathPrefix + token
}

// Under reports whether u is a phone-home URL under base, i.e. whether a
// guest posting to u reaches a listener whose base URL is base.
func Under(u, base string) bool {
	return strings.HasPrefix(u, strings.TrimRight(base, "/")+PathPrefix)
}

// TokenOf returns the token of a phone-home URL: what follows PathPrefix,
// or the last path segment of a URL without it.
func TokenOf(u string) string {
	if i := strings.Index(u, PathPrefix); i >= 0 {
		return u[i+len(PathPrefix):]
	}
	return u[strings.LastIndex(u, "/")+1:]
}

// Redact keeps the secret token of a phone-home URL out of messages:
// everything after PathPrefix becomes "<token>".
func Redact(u string) string {
	if i := strings.Index(u, PathPrefix); i >= 0 && len(u) > i+len(PathPrefix) {
		return u[:i+len(PathPrefix)] + "<token>"
	}
	return u
}
