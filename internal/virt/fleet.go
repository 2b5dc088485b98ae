package virt

import (
	"fmt"
	"sort"
	"strings"
)

// Fleet holds the default host connection and any named hosts. Clients dial on
// first use, so a host that is down fails only the resources placed on it.
type Fleet struct {
	def   *Client
	hosts map[string]*Client
}

// NewFleet validates every host's settings without dialing any of them.
func NewFleet(def Settings, hosts map[string]Settings) (*Fleet, error) {
	f := &Fleet{hosts: map[string]*Client{}}
	var err error
	if f.def, err = New(def); err != nil {
		return nil, err
	}
	for name, s := range hosts {
		if f.hosts[name], err = New(s); err != nil {
			return nil, fmt.Errorf("hosts[%q]: %w", name, err)
		}
	}
	return f, nil
}

// Host returns the client for a key of the hosts map; "" is the default host.
func (f *Fleet) Host(name string) (*Client, error) {
	if name == "" {
		return f.def, nil
	}
	if c, ok := f.hosts[name]; ok {
		return c, nil
	}
	if len(f.hosts) == 0 {
		return nil, fmt.Errorf("host %q is not configured: the provider has no hosts map; add hosts = { %s = { "+
			"uri = \"qemu+ssh://root@...\" } } to the provider block, or leave host empty for the default "+
			"connection", name, name)
	}
	return nil, fmt.Errorf("host %q is not a key of the provider's hosts map; the keys are %s", name, strings.Join(f.Names(), ", "))
}

// Names lists the configured host keys in order.
func (f *Fleet) Names() []string {
	names := make([]string, 0, len(f.hosts))
	for n := range f.hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close ends every open connection.
func (f *Fleet) Close() {
	f.def.Close()
	for _, c := range f.hosts {
		c.Close()
	}
}

// Default returns the default host's client.
func (f *Fleet) Default() *Client { return f.def }
