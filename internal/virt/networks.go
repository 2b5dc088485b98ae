package virt

import (
	"context"
	"fmt"
	"sort"

	"github.com/digitalocean/go-libvirt"
)

// ErrNetworkNotFound is wrapped by errors about a network that does not exist.
var ErrNetworkNotFound = fmt.Errorf("network %w", ErrNotFound)

// NetworkDefinition reads a network's live XML (its persistent XML when it
// is stopped); nil when the host has no network of that name.
func (c *Client) NetworkDefinition(ctx context.Context, name string) (*Definition, error) {
	var out *Definition
	err := c.Call(ctx, "read network "+name, func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(name)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		doc, err := l.NetworkGetXMLDesc(n, 0)
		if err != nil {
			return err
		}
		active, err := l.NetworkIsActive(n)
		if err != nil {
			return err
		}
		auto, err := l.NetworkGetAutostart(n)
		if err != nil {
			return err
		}
		out = &Definition{XML: doc, Active: active == 1, Autostart: auto == 1}
		return nil
	})
	return out, err
}

// DefineNetwork makes a network persistent from its XML (virsh
// net-define); it is not started.
func (c *Client) DefineNetwork(ctx context.Context, doc string) error {
	return c.Call(ctx, "define network", func(l *libvirt.Libvirt) error {
		_, err := l.NetworkDefineXML(doc)
		return err
	})
}

// StartNetwork starts a defined network (virsh net-start).
func (c *Client) StartNetwork(ctx context.Context, name string) error {
	return c.networkCall(ctx, "start network "+name, name, func(l *libvirt.Libvirt, n libvirt.Network) error {
		return l.NetworkCreate(n)
	})
}

// SetNetworkAutostart sets whether a network starts with the host (virsh
// net-autostart).
func (c *Client) SetNetworkAutostart(ctx context.Context, name string, on bool) error {
	return c.networkCall(ctx, fmt.Sprintf("set autostart of network %s to %t", name, on), name, func(l *libvirt.Libvirt, n libvirt.Network) error {
		return l.NetworkSetAutostart(n, boolInt(on))
	})
}

// StopNetwork stops a running network (virsh net-destroy).
func (c *Client) StopNetwork(ctx context.Context, name string) error {
	return c.networkCall(ctx, "stop network "+name, name, func(l *libvirt.Libvirt, n libvirt.Network) error {
		return l.NetworkDestroy(n)
	})
}

// UndefineNetwork removes a network's persistent definition (virsh
// net-undefine).
func (c *Client) UndefineNetwork(ctx context.Context, name string) error {
	return c.networkCall(ctx, "undefine network "+name, name, func(l *libvirt.Libvirt, n libvirt.Network) error {
		return l.NetworkUndefine(n)
	})
}

// UpdateNetworkDHCPHost adds (add) or deletes one <host> element of the
// DHCP section of the network's first IPv4 address, in the persistent
// definition and, when live, in the running network too, without
// restarting it (virsh net-update NAME add-last|delete ip-dhcp-host
// --live --config).
func (c *Client) UpdateNetworkDHCPHost(ctx context.Context, name string, add bool, hostXML string, live bool) error {
	cmd, verb := libvirt.NetworkUpdateCommandDelete, "delete"
	if add {
		cmd, verb = libvirt.NetworkUpdateCommandAddLast, "add"
	}
	flags := libvirt.NetworkUpdateAffectConfig
	if live {
		flags |= libvirt.NetworkUpdateAffectLive
	}
	return c.networkCall(ctx, fmt.Sprintf("%s DHCP host %s on network %s", verb, hostXML, name), name, func(l *libvirt.Libvirt, n libvirt.Network) error {
		// the Compat call asks the server which order of command and section
		// it reads (libvirt swapped them on the wire before 7.2)
		return l.NetworkUpdateCompat(n, cmd, libvirt.NetworkSectionIPDhcpHost, -1, hostXML, flags)
	})
}

// networkCall looks the network up and runs fn on it; a missing network is
// an error wrapping ErrNetworkNotFound.
func (c *Client) networkCall(ctx context.Context, op, name string, fn func(*libvirt.Libvirt, libvirt.Network) error) error {
	return c.Call(ctx, op, func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(name)
		if err == nil {
			err = fn(l, n)
		}
		if notFound(err) {
			return fmt.Errorf("%w: %s", ErrNetworkNotFound, name)
		}
		return err
	})
}

// NetworkNames returns the names of every network of the host, started or
// not, sorted.
func (c *Client) NetworkNames(ctx context.Context) ([]string, error) {
	var names []string
	err := c.Call(ctx, "list networks", func(l *libvirt.Libvirt) error {
		nets, _, err := l.ConnectListAllNetworks(1, libvirt.ConnectListNetworksActive|libvirt.ConnectListNetworksInactive)
		if err != nil {
			return err
		}
		for _, n := range nets {
			names = append(names, n.Name)
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}
