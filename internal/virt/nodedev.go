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
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"libvirt.org/go/libvirtxml"
)

// PCINodeDevices returns libvirt's node-device XML of every PCI device of
// the host (virsh nodedev-list --cap pci, then nodedev-dumpxml each), in one
// bounded call on the connection.
func (c *Client) PCINodeDevices(ctx context.Context) ([]string, error) {
	return c.nodeDevicesWithCap(ctx, "list PCI node devices", libvirt.ConnectListNodeDevicesCapPciDev)
}

// nodeDevicesWithCap returns the XML of every node device the flags select,
// sorted by name, in one bounded call; a device removed while they are
// listed (a hot unplug, an mdev stopped) is left out.
func (c *Client) nodeDevicesWithCap(ctx context.Context, op string, flags libvirt.ConnectListAllNodeDeviceFlags) ([]string, error) {
	var out []string
	err := c.Call(ctx, op, func(l *libvirt.Libvirt) error {
		devs, _, err := l.ConnectListAllNodeDevices(1, uint32(flags))
		if err != nil {
			return err
		}
		sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
		out = make([]string, 0, len(devs))
		for _, d := range devs {
			doc, err := l.NodeDeviceGetXMLDesc(d.Name, 0)
			if notFound(err) {
				continue // removed while we listed
			}
			if err != nil {
				return fmt.Errorf("reading node device %s: %w", d.Name, err)
			}
			out = append(out, doc)
		}
		return nil
	})
	return out, err
}

// NodeDeviceXML returns one node device's XML; a device that does not exist
// yields an error wrapping ErrNotFound.
func (c *Client) NodeDeviceXML(ctx context.Context, name string) (string, error) {
	var doc string
	err := c.Call(ctx, "read node device "+name, func(l *libvirt.Libvirt) error {
		var err error
		doc, err = l.NodeDeviceGetXMLDesc(name, 0)
		if notFound(err) {
			return fmt.Errorf("node device %s %w", name, ErrNotFound)
		}
		return err
	})
	return doc, err
}

// DetachNodeDevice unbinds a PCI device from its host driver and binds it to
// the stub driver libvirt names driver ("vfio" binds vfio-pci), as virsh
// nodedev-detach --driver does.
func (c *Client) DetachNodeDevice(ctx context.Context, name, driver string) error {
	return c.Call(ctx, fmt.Sprintf("detach node device %s to %s", name, driver), func(l *libvirt.Libvirt) error {
		err := l.NodeDeviceDetachFlags(name, libvirt.OptString{driver}, 0)
		if notFound(err) {
			return fmt.Errorf("node device %s %w", name, ErrNotFound)
		}
		return err
	})
}

// ReattachNodeDevice gives a detached PCI device back to the host: libvirt
// unbinds the stub driver and lets the kernel probe the device's own driver,
// as virsh nodedev-reattach does.
func (c *Client) ReattachNodeDevice(ctx context.Context, name string) error {
	return c.Call(ctx, "reattach node device "+name, func(l *libvirt.Libvirt) error {
		err := l.NodeDeviceReAttach(name)
		if notFound(err) {
			return fmt.Errorf("node device %s %w", name, ErrNotFound)
		}
		return err
	})
}

// PCIHostdevUsers maps each host PCI function that a running domain uses as a
// hostdev ("0000:01:00.0") to the names of those domains.
func (c *Client) PCIHostdevUsers(ctx context.Context) (map[string][]string, error) {
	users := map[string][]string{}
	err := c.Call(ctx, "list the PCI devices of running domains", func(l *libvirt.Libvirt) error {
		doms, _, err := l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive)
		if err != nil {
			return err
		}
		for _, d := range doms {
			doc, err := l.DomainGetXMLDesc(d, 0)
			if notFound(err) {
				continue // stopped and undefined while we listed
			}
			if err != nil {
				return fmt.Errorf("reading domain %s: %w", d.Name, err)
			}
			addrs, err := pciHostdevs(doc)
			if err != nil {
				return fmt.Errorf("domain %s: %w", d.Name, err)
			}
			for _, a := range addrs {
				users[a] = append(users[a], d.Name)
			}
		}
		return nil
	})
	return users, err
}

// pciHostdevs lists the host PCI addresses of a domain's hostdevs, in the
// canonical DDDD:BB:SS.F form.
func pciHostdevs(doc string) ([]string, error) {
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(doc); err != nil {
		return nil, fmt.Errorf("parsing domain XML: %w", err)
	}
	if dom.Devices == nil {
		return nil, nil
	}
	var out []string
	for _, h := range dom.Devices.Hostdevs {
		if h.SubsysPCI == nil || h.SubsysPCI.Source == nil || h.SubsysPCI.Source.Address == nil {
			continue
		}
		a := h.SubsysPCI.Source.Address
		out = append(out, fmt.Sprintf("%04x:%02x:%02x.%x", pciField(a.Domain), pciField(a.Bus), pciField(a.Slot), pciField(a.Function)))
	}
	return out, nil
}

func pciField(p *uint) uint {
	if p == nil {
		return 0
	}
	return *p
}

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
	d, ok := c.dialer.inner.(*sshDialer)
	if !ok {
		return nil, "", ErrHostFilesUnsupported
	}
	ctx, cancel := context.WithTimeout(ctx, c.settings.CallTimeout)
	defer cancel()
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

// ResetPCIFunction resets one PCI function of the host ("0000:01:00.0")
// through the kernel, writing 1 to the function's sysfs reset file: the
// kernel uses the first method its reset_method file lists (a
// function-level, power-management, slot or bus reset). It does so locally
// for a local connection and over an SSH session for qemu+ssh hosts; tcp
// and tls yield ErrHostFilesUnsupported. (libvirt's node-device reset is no
// substitute: it skips a function bound to vfio-pci, leaving the reset to
// vfio, which resets only when a guest opens or closes the device.) A
// function without a reset method yields an error wrapping os.ErrNotExist,
// and one whose methods all turn out unusable (a bus reset of a function
// that shares its bus with others, as a multi-function device's functions
// do) an error wrapping ErrResetUnusable.
func (c *Client) ResetPCIFunction(ctx context.Context, addr string) error {
	path := "/sys/bus/pci/devices/" + addr + "/reset"
	if !safeHostPath.MatchString(path) {
		return fmt.Errorf("refusing to reset PCI function %q: not a PCI address", addr)
	}
	switch c.ep.Transport {
	case TransportUnix:
		err := os.WriteFile(path, []byte("1"), 0)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%s has no reset method: %w", addr, os.ErrNotExist)
		case errors.Is(err, syscall.ENOTTY):
			return fmt.Errorf("%s: %w", addr, ErrResetUnusable)
		}
		return err
	case TransportSSH:
		_, stderr, err := c.runOverSSH(ctx, "[ -e "+path+" ] || { echo 'no reset method' >&2; exit 3; }; echo 1 > "+path, 1024)
		switch {
		case err != nil && strings.Contains(stderr, "no reset method"):
			return fmt.Errorf("%s has no reset method: %w", addr, os.ErrNotExist)
		case err != nil && strings.Contains(strings.ToLower(stderr), syscall.ENOTTY.Error()):
			return fmt.Errorf("%s: %w", addr, ErrResetUnusable)
		}
		return err
	}
	return ErrHostFilesUnsupported
}
