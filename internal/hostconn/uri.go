package hostconn

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Transports a libvirt URI can name after the '+' in its scheme.
const (
	TransportUnix = "unix"
	TransportTCP  = "tcp"
	TransportTLS  = "tls"
	TransportSSH  = "ssh"
)

// Default ports, as libvirt's own client uses them.
const (
	defaultTCPPort = "16509"
	defaultTLSPort = "16514"
	defaultSSHPort = "22"
)

// Endpoint is a parsed libvirt URI: where to dial and what to ask the daemon for.
type Endpoint struct {
	// Raw is the URI as the user wrote it.
	Raw string
	// Driver is the hypervisor driver (qemu, test, ...).
	Driver string
	// Transport is one of the Transport* constants.
	Transport string
	// Host, Port and User are empty for the unix transport.
	Host string
	Port string
	User string
	// Socket is the unix socket path: local for unix, remote for ssh.
	Socket string
	// Name is the URI sent to the daemon once connected (qemu:///system for
	// qemu+tcp://host/system, or the URI's name= parameter).
	Name string
	// Params holds the URI's query parameters (keyfile, known_hosts, pkipath, ...).
	Params url.Values
	// password is kept out of every printed form of the endpoint.
	password string
}

// Password is the URI's password, for the transport that logs in with it;
// no printed form of the endpoint shows it.
func (e Endpoint) Password() string { return e.password }

// Redacted returns the URI with any password removed, safe for logs and errors.
func (e Endpoint) Redacted() string {
	u, err := url.Parse(e.Raw)
	if err != nil {
		return redactUnparsed(e.Raw)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
	}
	return u.String()
}

// redactUnparsed removes the password of a URI that does not parse. A
// password with an unencoded '/', '#' or '?' ends the authority early (and
// is often why the URI does not parse), so the user info runs to the last
// '@' of the URI, not to the first '/'.
func redactUnparsed(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "//")
	if !ok {
		return raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if strings.ContainsAny(user, "/?#") {
		return scheme + "//REDACTED@" + rest[at+1:]
	}
	if !hasPass {
		return raw
	}
	return scheme + "//" + user + ":REDACTED@" + rest[at+1:]
}

// Address is host:port for network transports and the socket path for unix.
func (e Endpoint) Address() string {
	if e.Transport == TransportUnix {
		return e.Socket
	}
	return e.Host + ":" + e.Port
}

// knownParams are the query parameters libvirt's own client understands that we
// honour. Anything else is rejected so a typo does not silently change nothing.
var knownParams = map[string][]string{
	TransportUnix: {"socket", "name", "mode"},
	TransportTCP:  {"name"},
	TransportTLS:  {"name", "pkipath", "no_verify"},
	TransportSSH:  {"name", "socket", "keyfile", "known_hosts", "known_hosts_verify", "sshauth", "no_verify", "mode", "no_tty"},
}

// ParseURI parses a libvirt connection URI such as qemu:///system,
// qemu+tcp://host/system or qemu+ssh://user@host:22/system?keyfile=~/.ssh/id_ed25519.
func ParseURI(raw string) (Endpoint, error) {
	if strings.TrimSpace(raw) == "" {
		return Endpoint{}, fmt.Errorf("the libvirt URI is empty; for example qemu:///system or qemu+ssh://root@gpu1.example.com/system")
	}
	shown := Endpoint{Raw: raw}.Redacted() // for messages: without a password
	u, err := url.Parse(raw)
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its message quotes the URI, password included
	}
	if err != nil && strings.Contains(raw, "@") {
		// The parser's own message may quote part of the user info (a
		// password with a '/' reads as a port): leave it out.
		return Endpoint{}, fmt.Errorf("%q is not a libvirt URI; percent-encode '/', '#', '?' and '@' in a user name or "+
			"password; for example qemu+ssh://root@gpu1.example.com/system", shown)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("%q is not a libvirt URI: %w; for example qemu+ssh://root@gpu1.example.com/system", shown, err)
	}
	if u.Scheme == "" {
		return Endpoint{}, fmt.Errorf("%q has no scheme; a libvirt URI looks like qemu:///system or qemu+tcp://10.0.0.5/system", shown)
	}
	ep := Endpoint{Raw: raw, Params: u.Query()}
	driver, transport, hasTransport := strings.Cut(u.Scheme, "+")
	ep.Driver = driver
	switch {
	case hasTransport:
		ep.Transport = transport
	case u.Host != "":
		// libvirt's own rule: a host without a transport means TLS.
		ep.Transport = TransportTLS
	default:
		ep.Transport = TransportUnix
	}
	if ep.Transport == "libssh" || ep.Transport == "libssh2" {
		// Same wire protocol, same options: we speak SSH in-process either way.
		ep.Transport = TransportSSH
	}
	allowed, ok := knownParams[ep.Transport]
	if !ok {
		return Endpoint{}, fmt.Errorf("%q uses transport %q, which Kohaku does not support; use unix, tcp, tls or ssh (for example qemu+ssh://root@host/system)", shown, ep.Transport)
	}
	for k := range ep.Params {
		if !contains(allowed, k) {
			return Endpoint{}, fmt.Errorf("%q has parameter %q, which the %s transport does not take; it takes %s", shown, k, ep.Transport, strings.Join(allowed, ", "))
		}
	}
	if ep.Transport != TransportUnix && u.Hostname() == "" {
		return Endpoint{}, fmt.Errorf("%q uses the %s transport but names no host; for example %s+%s://gpu1.example.com/system", shown, ep.Transport, driver, ep.Transport)
	}
	if ep.Transport == TransportUnix && u.Host != "" {
		return Endpoint{}, fmt.Errorf("%q names host %q but uses the local unix socket; use %s+ssh://%s/... or %s+tcp://%s/... to reach another machine", shown, u.Host, driver, u.Host, driver, u.Host)
	}
	ep.Host = u.Hostname()
	ep.Port = u.Port()
	if u.User != nil {
		ep.User = u.User.Username()
		ep.password, _ = u.User.Password()
	}
	switch ep.Transport {
	case TransportTCP:
		ep.Port = orDefault(ep.Port, defaultTCPPort)
	case TransportTLS:
		ep.Port = orDefault(ep.Port, defaultTLSPort)
	case TransportSSH:
		ep.Port = orDefault(ep.Port, defaultSSHPort)
	}
	path := u.Path
	if path == "" {
		path = "/system"
	}
	ep.Name = (&url.URL{Scheme: driver, Path: path}).String()
	if driver == "test" && path == "/default" {
		ep.Name = "test:///default"
	}
	if n := ep.Params.Get("name"); n != "" {
		ep.Name = n
	}
	ep.Socket = ep.Params.Get("socket")
	if ep.Socket == "" {
		switch ep.Transport {
		case TransportUnix:
			ep.Socket = localSocket(path)
		case TransportSSH:
			ep.Socket = "/var/run/libvirt/libvirt-sock"
		}
	}
	if v := ep.Params.Get("no_verify"); v != "" && v != "0" && v != "1" {
		return Endpoint{}, fmt.Errorf("%q: no_verify must be 0 or 1, not %q", shown, v)
	}
	if v := ep.Params.Get("known_hosts_verify"); v != "" && !contains([]string{"normal", "auto", "ignore"}, v) {
		return Endpoint{}, fmt.Errorf("%q: known_hosts_verify must be normal, auto or ignore, not %q", shown, v)
	}
	return ep, nil
}

// localSocket finds the unix socket a local client would use: the per-user
// daemon for qemu:///session, the system daemon otherwise. On hosts with
// libvirt's modular daemons only virtqemud's socket may exist.
func localSocket(path string) string {
	if path == "/session" {
		dir := os.Getenv("XDG_RUNTIME_DIR")
		if dir == "" {
			if home, err := os.UserHomeDir(); err == nil {
				dir = filepath.Join(home, ".cache")
			}
		}
		return filepath.Join(dir, "libvirt", "libvirt-sock")
	}
	for _, s := range []string{"/var/run/libvirt/libvirt-sock", "/var/run/libvirt/virtqemud-sock"} {
		if _, err := os.Stat(s); err == nil {
			return s
		}
	}
	return "/var/run/libvirt/libvirt-sock"
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
