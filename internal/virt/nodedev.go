package virt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/digitalocean/go-libvirt"
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

// writableSysfs are the host files WriteHostFile writes: a PF's VF count
// and a VF's vGPU type (internal/sriov), nothing else.
var writableSysfs = regexp.MustCompile(`^/sys/bus/pci/devices/[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]/(sriov_numvfs|nvidia/current_vgpu_type)$`)

// WriteHostFile writes a number to one of the host's SR-IOV sysfs files
// (a PF's sriov_numvfs, a VF's nvidia/current_vgpu_type): directly for a
// local connection, with the shell's echo over an SSH session for qemu+ssh
// hosts; tcp and tls yield ErrHostFilesUnsupported. The kernel's and the
// driver's refusals come back wrapping syscall.EBUSY (in use, a type
// already set), syscall.EINVAL (a value the driver does not accept) or
// os.ErrNotExist (no such file: the device is gone, or its vendor driver
// offers no vGPU files).
func (c *Client) WriteHostFile(ctx context.Context, path, value string) error {
	if !writableSysfs.MatchString(path) {
		return fmt.Errorf("refusing to write host file %q: Kohaku writes only a PCI function's sriov_numvfs and nvidia/current_vgpu_type", path)
	}
	if n, err := strconv.Atoi(value); err != nil || n < 0 {
		return fmt.Errorf("refusing to write %q to %s: want a number, 0 or more", value, path)
	}
	switch c.ep.Transport {
	case TransportUnix:
		err := os.WriteFile(path, []byte(value), 0)
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("writing %s to %s: %w", value, path, pe.Err)
		}
		return err
	case TransportSSH:
		_, stderr, err := c.runOverSSH(ctx, "[ -e "+path+" ] || { echo 'No such file' >&2; exit 3; }; echo "+value+" > "+path, 1024)
		if err == nil {
			return nil
		}
		lower := strings.ToLower(stderr)
		for _, e := range []error{syscall.EBUSY, syscall.EINVAL, syscall.ENOSPC, syscall.EPERM} {
			if strings.Contains(lower, strings.ToLower(e.Error())) {
				return fmt.Errorf("writing %s to %s on %s: %w", value, path, c.ep.Host, e)
			}
		}
		if strings.Contains(stderr, "No such file") {
			return fmt.Errorf("writing %s to %s on %s: %w", value, path, c.ep.Host, os.ErrNotExist)
		}
		return fmt.Errorf("writing %s to %s: %w", value, path, err)
	}
	return ErrHostFilesUnsupported
}

// SRIOVManage is NVIDIA's script for enabling and disabling a GPU's VFs,
// which its vGPU manager installs on the host.
const SRIOVManage = "/usr/lib/nvidia/sriov-manage"

var pciAddressArg = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// RunSRIOVManage runs NVIDIA's sriov-manage on the host with -e (enable
// every VF of pf) or -d (disable them): locally, or over an SSH session
// for qemu+ssh hosts; tcp and tls yield ErrHostFilesUnsupported. A host
// without the script yields an error wrapping os.ErrNotExist, and nothing
// was run.
func (c *Client) RunSRIOVManage(ctx context.Context, enable bool, pf string) error {
	if !pciAddressArg.MatchString(pf) {
		return fmt.Errorf("refusing to run sriov-manage on %q: not a PCI address", pf)
	}
	op := "-d"
	if enable {
		op = "-e"
	}
	script := "[ -x " + SRIOVManage + " ] || { echo 'No such file' >&2; exit 3; }; " + SRIOVManage + " " + op + " " + pf + " 2>&1"
	switch c.ep.Transport {
	case TransportUnix:
		if _, err := os.Stat(SRIOVManage); err != nil {
			return fmt.Errorf("%s: %w", SRIOVManage, os.ErrNotExist)
		}
		ctx, cancel := context.WithTimeout(ctx, c.settings.CallTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, SRIOVManage, op, pf).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s %s: %w: %s", SRIOVManage, op, pf, err, strings.TrimSpace(string(out)))
		}
		return nil
	case TransportSSH:
		out, stderr, err := c.runOverSSH(ctx, script, 4096)
		if err != nil && strings.Contains(stderr, "No such file") {
			return fmt.Errorf("%s on %s: %w", SRIOVManage, c.ep.Host, os.ErrNotExist)
		}
		if err != nil {
			return fmt.Errorf("%s %s %s: %w: %s", SRIOVManage, op, pf, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return ErrHostFilesUnsupported
}

// RunHealthCheck runs the operator's GPU health check on the host: the
// command, given by the provider's configuration, through the host's
// shell with the GPU's PCI address as its one argument and in KOHAKU_GPU,
// locally or over an SSH session (tcp and tls yield
// ErrHostFilesUnsupported). It fails when the command exits non-zero or
// outlives timeout, with the last lines of its output.
func (c *Client) RunHealthCheck(ctx context.Context, command, gpu string, timeout time.Duration) error {
	if !pciAddressArg.MatchString(gpu) {
		return fmt.Errorf("refusing to run the health check for %q: not a PCI address", gpu)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []byte
	var err error
	switch c.ep.Transport {
	case TransportUnix:
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command+` "$KOHAKU_GPU"`)
		cmd.Env = append(os.Environ(), "KOHAKU_GPU="+gpu)
		var buf bytes.Buffer
		cmd.Stdout = &limitedBuffer{buf: &buf, max: 4096}
		cmd.Stderr = cmd.Stdout
		err = cmd.Run()
		out = buf.Bytes()
	case TransportSSH:
		var stderr string
		out, stderr, err = c.runOverSSHWithin(ctx, "KOHAKU_GPU="+gpu+"; export KOHAKU_GPU; "+command+" "+gpu+" 2>&1", 4096)
		out = append(out, stderr...)
	default:
		return ErrHostFilesUnsupported
	}
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("it did not finish within %s", timeout)
	}
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%v: %s", err, strings.Join(lines[max(0, len(lines)-3):], " / "))
	}
	return nil
}
