package virt

import (
	"context"
	"fmt"

	"github.com/digitalocean/go-libvirt"
)

// MdevNodeDevices returns the XML of every mediated device libvirt knows,
// defined or active (virsh nodedev-list --cap mdev --all).
func (c *Client) MdevNodeDevices(ctx context.Context) ([]string, error) {
	return c.nodeDevicesWithCap(ctx, "list mediated devices",
		libvirt.ConnectListNodeDevicesCapMdev|libvirt.ConnectListNodeDevicesActive|libvirt.ConnectListNodeDevicesInactive)
}

// MdevParentNodeDevices returns the XML of every node device that offers
// mediated device types (virsh nodedev-list --cap mdev_types).
func (c *Client) MdevParentNodeDevices(ctx context.Context) ([]string, error) {
	return c.nodeDevicesWithCap(ctx, "list mediated device parents", libvirt.ConnectListNodeDevicesCapMdevTypes)
}

// DefineNodeDevice makes a node device persistent from its XML (virsh
// nodedev-define) and returns the name libvirt gave it. It is defined, not
// started.
func (c *Client) DefineNodeDevice(ctx context.Context, doc string) (string, error) {
	var name string
	err := c.Call(ctx, "define node device", func(l *libvirt.Libvirt) error {
		d, err := l.NodeDeviceDefineXML(doc, libvirt.NodeDeviceDefineXMLValidate)
		name = d.Name
		return err
	})
	return name, err
}

// StartNodeDevice starts a defined node device (virsh nodedev-start).
func (c *Client) StartNodeDevice(ctx context.Context, name string) error {
	return c.nodeDeviceCall(ctx, "start node device "+name, name, func(l *libvirt.Libvirt) error { return l.NodeDeviceCreate(name, 0) })
}

// SetNodeDeviceAutostart sets whether a defined node device starts with the
// host (virsh nodedev-autostart).
func (c *Client) SetNodeDeviceAutostart(ctx context.Context, name string, on bool) error {
	v := int32(0)
	if on {
		v = 1
	}
	return c.nodeDeviceCall(ctx, fmt.Sprintf("set autostart of node device %s to %t", name, on), name,
		func(l *libvirt.Libvirt) error { return l.NodeDeviceSetAutostart(name, v) })
}

// StopNodeDevice stops an active node device (virsh nodedev-destroy); a
// defined one stays defined.
func (c *Client) StopNodeDevice(ctx context.Context, name string) error {
	return c.nodeDeviceCall(ctx, "stop node device "+name, name, func(l *libvirt.Libvirt) error { return l.NodeDeviceDestroy(name) })
}

// UndefineNodeDevice removes a node device's persistent definition (virsh
// nodedev-undefine).
func (c *Client) UndefineNodeDevice(ctx context.Context, name string) error {
	return c.nodeDeviceCall(ctx, "undefine node device "+name, name, func(l *libvirt.Libvirt) error { return l.NodeDeviceUndefine(name, 0) })
}

// NodeDeviceState reads a node device's state; a device that does not exist
// yields an error wrapping ErrNotFound.
func (c *Client) NodeDeviceState(ctx context.Context, name string) (NodeDeviceState, error) {
	var s NodeDeviceState
	err := c.nodeDeviceCall(ctx, "read the state of node device "+name, name, func(l *libvirt.Libvirt) error {
		a, err := l.NodeDeviceIsActive(name)
		if err != nil {
			return err
		}
		p, err := l.NodeDeviceIsPersistent(name)
		if err != nil {
			return err
		}
		s.Active, s.Persistent = a == 1, p == 1
		if s.Persistent {
			as, err := l.NodeDeviceGetAutostart(name)
			if err != nil {
				return err
			}
			s.Autostart = as == 1
		}
		return nil
	})
	return s, err
}

func (c *Client) nodeDeviceCall(ctx context.Context, op, name string, fn func(*libvirt.Libvirt) error) error {
	return c.Call(ctx, op, func(l *libvirt.Libvirt) error {
		err := fn(l)
		if notFound(err) {
			return fmt.Errorf("node device %s %w", name, ErrNotFound)
		}
		return err
	})
}
