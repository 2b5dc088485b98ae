package virt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// safeHostPath is what ReadHostFile passes to a remote shell unquoted: PCI
// addresses' colons included.
var safeHostPath = regexp.MustCompile(`^/[A-Za-z0-9/._:-]+$`)

// ReadsHostFiles reports whether the connection can read the host's files
// (local and SSH connections can; tcp and tls cannot).
func (c *Client) ReadsHostFiles() bool {
	switch c.ep.Transport {
	case TransportUnix:
		return true
	case TransportSSH:
		_, ok := c.dialer.inner.(*sshDialer)
		return ok
	}
	return false
}

// ReadHostFile reads a small file of the host, such as
// /sys/module/nvidia/version: directly for a local connection, with `cat`
// over an SSH session on the host's shared SSH connection for qemu+ssh hosts. A missing file yields
// an error wrapping os.ErrNotExist; tcp and tls yield ErrHostFilesUnsupported.
// At most limit bytes are returned; the read is bounded by the call timeout.
func (c *Client) ReadHostFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	if !safeHostPath.MatchString(path) {
		return nil, fmt.Errorf("refusing to read host file %q: want an absolute path of letters, digits and /._:-", path)
	}
	switch c.ep.Transport {
	case TransportUnix:
		return readLocal(path, limit)
	case TransportSSH:
		out, stderr, err := c.runOverSSH(ctx, "cat "+path, limit)
		if err != nil && strings.Contains(stderr, "No such file") {
			err = fmt.Errorf("%s on %s: %w", path, c.ep.Host, os.ErrNotExist)
		} else if err != nil {
			err = fmt.Errorf("reading %s: %w", path, err)
		}
		return out, err
	}
	return nil, ErrHostFilesUnsupported
}

func readLocal(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// hostFileMark starts each file's part of ReadHostFiles' SSH output, on a
// line of its own; no line of a sysfs or procfs file starts with it.
const hostFileMark = "\n@@kohaku-file@@ "

// ReadHostFiles reads several small files of the host in one go: locally,
// or with one SSH session for them all. Files that do not exist (or cannot
// be read) are left out of the result; at most limit bytes of each are
// kept. tcp and tls yield ErrHostFilesUnsupported.
func (c *Client) ReadHostFiles(ctx context.Context, paths []string, limit int64) (map[string][]byte, error) {
	for _, p := range paths {
		if !safeHostPath.MatchString(p) {
			return nil, fmt.Errorf("refusing to read host file %q: want an absolute path of letters, digits and /._:-", p)
		}
	}
	out := map[string][]byte{}
	switch c.ep.Transport {
	case TransportUnix:
		for _, p := range paths {
			if b, err := readLocal(p, limit); err == nil {
				out[p] = b
			}
		}
		return out, nil
	case TransportSSH:
		if len(paths) == 0 {
			return out, nil
		}
		script := "for f in " + strings.Join(paths, " ") + "; do [ -r \"$f\" ] && printf '\\n@@kohaku-file@@ %s\\n' \"$f\" && head -c " +
			fmt.Sprint(limit) + " \"$f\"; done; exit 0"
		raw, _, err := c.runOverSSH(ctx, script, int64(len(paths))*(limit+300))
		if err != nil {
			return nil, fmt.Errorf("reading %d files: %w", len(paths), err)
		}
		return splitHostFiles(raw), nil
	}
	return nil, ErrHostFilesUnsupported
}

// splitHostFiles cuts ReadHostFiles' SSH output at its marks.
func splitHostFiles(raw []byte) map[string][]byte {
	out := map[string][]byte{}
	parts := bytes.Split(raw, []byte(hostFileMark))
	for _, p := range parts[1:] {
		name, body, _ := bytes.Cut(p, []byte("\n"))
		out[string(name)] = body
	}
	return out
}

// RunHostScript runs a shell script on the host, read-only by the caller's
// contract, and returns its standard output (at most limit bytes): locally
// with /bin/sh, over an SSH session on the shared connection for qemu+ssh
// hosts; tcp and tls yield ErrHostFilesUnsupported. Bounded by the call timeout.
func (c *Client) RunHostScript(ctx context.Context, script string, limit int64) ([]byte, error) {
	switch c.ep.Transport {
	case TransportUnix:
		ctx, cancel := context.WithTimeout(ctx, c.settings.CallTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
		var stdout bytes.Buffer
		cmd.Stdout = &limitedBuffer{buf: &stdout, max: limit}
		err := cmd.Run()
		return stdout.Bytes(), err
	case TransportSSH:
		out, stderr, err := c.runOverSSH(ctx, script, limit)
		if err != nil && stderr != "" {
			err = fmt.Errorf("%w: %s", err, stderr)
		}
		return out, err
	}
	return nil, ErrHostFilesUnsupported
}

// runOverSSH runs a command in a session on the host's shared SSH
// connection, bounded by the call timeout, and returns its standard output
// (at most limit bytes) and the start of its standard error.
func (c *Client) runOverSSH(ctx context.Context, command string, limit int64) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.settings.CallTimeout)
	defer cancel()
	return c.runOverSSHWithin(ctx, command, limit)
}

// runOverSSHWithin is runOverSSH bounded by ctx alone.
func (c *Client) runOverSSHWithin(ctx context.Context, command string, limit int64) ([]byte, string, error) {
	d, ok := c.dialer.inner.(*sshDialer)
	if !ok {
		return nil, "", ErrHostFilesUnsupported
	}
	type result struct {
		out    []byte
		stderr string
		err    error
	}
	done := make(chan result, 1)
	var mu sync.Mutex
	var session *ssh.Session
	var conn *sharedSSH
	go func() {
		// A session on the host's shared SSH connection (no handshake
		// of its own); a connection of its own only when that one has
		// no session to spare (OpenSSH's MaxSessions, 10 by default).
		shared, err := d.acquire()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer d.release(shared)
		mu.Lock()
		conn = shared
		mu.Unlock()
		s, err := shared.client.NewSession()
		var refused *ssh.OpenChannelError
		if errors.As(err, &refused) {
			var own *ssh.Client
			if own, err = d.handshake(); err == nil {
				defer own.Close()
				s, err = own.NewSession()
			}
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		mu.Lock()
		session = s
		mu.Unlock()
		defer s.Close()
		var stdout, stderr bytes.Buffer
		s.Stdout, s.Stderr = &limitedBuffer{buf: &stdout, max: limit}, &limitedBuffer{buf: &stderr, max: 4096}
		err = s.Run(command)
		msg := strings.TrimSpace(stderr.String())
		if err != nil {
			err = fmt.Errorf("on %s over SSH: %v: %s", d.addr, err, msg)
		}
		done <- result{out: stdout.Bytes(), stderr: msg, err: err}
	}()
	select {
	case r := <-done:
		return r.out, r.stderr, r.err
	case <-ctx.Done():
		// Closing the session ends the command without disturbing the
		// connection's other channels. A connection that did not even
		// open the session in time is as good as lost: drop it.
		mu.Lock()
		if session != nil {
			session.Close()
		} else if conn != nil {
			d.kill(conn)
		}
		mu.Unlock()
		return nil, "", fmt.Errorf("on %s over SSH: %w", d.addr, ctx.Err())
	}
}

// limitedBuffer keeps the first max bytes written and discards the rest.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int64
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - int64(b.buf.Len()); room > 0 {
		if int64(len(p)) > room {
			b.buf.Write(p[:room])
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}
