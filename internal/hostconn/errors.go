package hostconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Unreachable bounds how long an undo waits for a host that cannot be
// reached (WhileUnreachable): long enough for a restarting libvirtd.
const Unreachable = 30 * time.Second

// WhileUnreachable runs fn again as long as it fails because the host
// cannot be reached (a *ConnectionError: refused, lost or hung), backing
// off from 200 ms to 2 s, for up to window or until ctx ends. Undo steps
// after a failed create use it: a libvirtd restarted mid-apply is back in a
// few seconds, and an undo that waits for it leaves the host as it was
// instead of an object whose fate nobody knows. fn's own errors are
// returned at once.
func WhileUnreachable(ctx context.Context, window time.Duration, fn func() error) error {
	deadline := time.Now().Add(window)
	wait := 200 * time.Millisecond
	for {
		err := fn()
		var ce *ConnectionError
		if err == nil || !errors.As(err, &ce) || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// ConnectionError says the host could not be reached, refused us, or stopped
// answering. It names the URI and the transport so a user knows which host.
type ConnectionError struct {
	Endpoint Endpoint
	Op       string
	Err      error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("%s: libvirt host %s (transport %s, %s): %v%s",
		e.Op, e.Endpoint.Redacted(), e.Endpoint.Transport, e.Endpoint.Address(), e.Err, hint(e.Endpoint, e.Err))
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// hint adds what to check for the common ways a connection fails.
func hint(ep Endpoint, err error) string {
	var opErr *net.OpError
	var unknown *UnknownHostKeyError
	var mismatch *HostKeyMismatchError
	var auth *AuthError
	var tlsErr *TLSError
	switch {
	case errors.As(err, &unknown), errors.As(err, &mismatch), errors.As(err, &auth), errors.As(err, &tlsErr):
		return "" // these errors already say what to do
	case errors.As(err, &opErr):
		switch ep.Transport {
		case TransportUnix:
			return fmt.Sprintf(". Is libvirtd running on this machine, and may this user open %s? (For another machine use qemu+ssh://user@host/system.)", ep.Socket)
		case TransportTCP:
			return fmt.Sprintf(". Is libvirtd on %s listening for TCP (listen_tcp = 1 in libvirtd.conf and "+
				"libvirtd started with --listen, or the libvirtd-tcp socket enabled), and is port %s open?", ep.Host, ep.Port)
		case TransportTLS:
			return fmt.Sprintf(". Is libvirtd on %s listening for TLS on port %s, and are the client certificates in place?", ep.Host, ep.Port)
		case TransportSSH:
			return fmt.Sprintf(". Is sshd running on %s port %s and reachable from here?", ep.Host, ep.Port)
		}
	}
	return ""
}

// UnknownHostKeyError says the SSH server's key is not in known_hosts.
type UnknownHostKeyError struct {
	Host, File, Fingerprint, KeyType, Line string
}

func (e *UnknownHostKeyError) Error() string {
	return fmt.Sprintf("the SSH host key of %s (%s %s) is not in %s. If that fingerprint is the host's, add "+
		"this line to %s:\n  %s\nor set known_hosts_verify = \"auto\" to trust the host on first use "+
		"(\"ignore\" skips the check and is insecure)",
		e.Host, e.KeyType, e.Fingerprint, e.File, e.File, e.Line)
}

// HostKeyMismatchError says the SSH server presented a key other than the recorded one.
type HostKeyMismatchError struct {
	Host, File, Fingerprint string
	// Pinned names the setting the expected key came from (ssh.host_key)
	// when it was not a known_hosts file; KeyType is then the key's type.
	Pinned, KeyType string
}

func (e *HostKeyMismatchError) Error() string {
	if e.Pinned != "" {
		return fmt.Sprintf("the SSH host key of %s (%s %s) does NOT match %s: the host was reinstalled, %s "+
			"holds another host's key, or someone is intercepting the connection. If that fingerprint is the "+
			"host's, set %s to its public key (/etc/ssh/ssh_host_*_key.pub on the host)",
			e.Host, e.KeyType, e.Fingerprint, e.Pinned, e.Pinned, e.Pinned)
	}
	return fmt.Sprintf("the SSH host key of %s (%s) does NOT match the one recorded in %s: the host was "+
		"reinstalled or someone is intercepting the connection. Check the host, then remove its old line from %s",
		e.Host, e.Fingerprint, e.File, e.File)
}

// AuthError says the SSH server refused every credential we offered.
type AuthError struct {
	User    string
	Offered []string
	Err     error
}

func (e *AuthError) Error() string {
	offered := "nothing"
	if len(e.Offered) > 0 {
		offered = strings.Join(e.Offered, ", ")
	}
	return fmt.Sprintf("the SSH server refused user %q (offered: %s): %v. Set ssh.key_file to a key in the "+
		"user's authorized_keys, load the key into ssh-agent, or put the user in the URI "+
		"(qemu+ssh://USER@host/system)",
		e.User, offered, e.Err)
}

// TLSError says why a TLS session with libvirtd failed, naming the files
// involved and what to change. It already says what to do, so connection
// errors add no hint of their own.
type TLSError struct {
	Msg string
	Err error
}

func (e *TLSError) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + " (" + e.Err.Error() + ")"
}

func (e *TLSError) Unwrap() error { return e.Err }
