package netpool

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// The forward modes of a network.
const (
	ModeNAT      = "nat"
	ModeRoute    = "route"
	ModeIsolated = "isolated"
	ModeBridge   = "bridge"
	ModeOpen     = "open"
)

// Modes are the modes a network can be declared with.
var Modes = []string{ModeNAT, ModeRoute, ModeOpen, ModeIsolated, ModeBridge}

// DHCPHost is a DHCP reservation: the address (and optionally the host
// name) dnsmasq gives the NIC with this MAC.
type DHCPHost struct {
	MAC  string // lower case
	IP   netip.Addr
	Name string
}

func (d DHCPHost) key() string { return d.MAC + "|" + d.IP.String() + "|" + d.Name }

// XML renders the reservation as virNetworkUpdate takes it.
func (d DHCPHost) XML() (string, error) {
	h := libvirtxml.NetworkDHCPHost{MAC: d.MAC, Name: d.Name, IP: d.IP.String()}
	doc, err := h.Marshal()
	if err != nil {
		return "", fmt.Errorf("rendering DHCP host %s: %w", d.MAC, err)
	}
	return doc, nil
}

// NetworkSpec is a network as declared. IPv4 and IPv6 carry the host's
// address on the network with the prefix length (192.168.131.1/24); a
// bridge-mode network has neither.
type NetworkSpec struct {
	Name      string
	Mode      string
	Bridge    string // the host bridge (bridge mode), or the one libvirt makes; empty lets libvirt choose
	IPv4      netip.Prefix
	DHCPStart netip.Addr
	DHCPEnd   netip.Addr
	IPv6      netip.Prefix
	Hosts     []DHCPHost
	Autostart bool
}

// Network is a network as the host has it.
type Network struct {
	NetworkSpec
	Active bool
}

// Problem is declared input that cannot make a network: Attribute names the
// attribute at fault.
type Problem struct {
	Attribute string
	Msg       string
}

// Validate returns what is wrong with s across attributes: what each
// attribute's own validator cannot see.
func (s NetworkSpec) Validate() []Problem {
	var out []Problem
	bad := func(attr, format string, args ...any) {
		out = append(out, Problem{Attribute: attr, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Mode == ModeBridge {
		if s.Bridge == "" {
			bad("bridge", "mode \"bridge\" joins an existing host bridge: name it, e.g. bridge = \"br0\"")
		}
		if s.IPv4.IsValid() || s.IPv6.IsValid() || len(s.Hosts) > 0 || s.DHCPStart.IsValid() {
			bad("mode", "a bridge-mode network has no addresses or DHCP of libvirt's: the host bridge's LAN provides them; "+
				"remove ipv4_address, ipv6_address, dhcp_start, dhcp_end and dhcp_hosts, or choose another mode")
		}
		return out
	}
	if !s.IPv4.IsValid() {
		bad("ipv4_address", "mode %q needs the host's IPv4 address on the network with its prefix length, e.g. 192.168.131.1/24", s.Mode)
		return out
	}
	subnet := s.IPv4.Masked()
	if s.IPv4.Addr() == subnet.Addr() {
		bad("ipv4_address", "%s is the subnet's network address; give the host's address in it, e.g. %s", s.IPv4, nextAddr(subnet))
	}
	if s.DHCPStart.IsValid() != s.DHCPEnd.IsValid() {
		bad("dhcp_end", "set both dhcp_start and dhcp_end, or neither")
	}
	if s.DHCPStart.IsValid() && s.DHCPEnd.IsValid() {
		switch {
		case !subnet.Contains(s.DHCPStart):
			bad("dhcp_start", "%s is outside the network's subnet %s", s.DHCPStart, subnet)
		case !subnet.Contains(s.DHCPEnd):
			bad("dhcp_end", "%s is outside the network's subnet %s", s.DHCPEnd, subnet)
		case s.DHCPEnd.Less(s.DHCPStart):
			bad("dhcp_end", "%s comes before dhcp_start %s", s.DHCPEnd, s.DHCPStart)
		}
	}
	if len(s.Hosts) > 0 && !s.DHCPStart.IsValid() {
		bad("dhcp_hosts", "reservations need DHCP on the network: set dhcp_start and dhcp_end")
	}
	macs, ips := map[string]bool{}, map[netip.Addr]bool{}
	for _, h := range s.Hosts {
		if macs[h.MAC] {
			bad("dhcp_hosts", "MAC %s has two reservations; give each MAC one", h.MAC)
		}
		if ips[h.IP] {
			bad("dhcp_hosts", "%s is reserved twice; give each reservation its own address", h.IP)
		}
		macs[h.MAC], ips[h.IP] = true, true
		switch {
		case !subnet.Contains(h.IP):
			bad("dhcp_hosts", "the reservation of %s, %s, is outside the network's subnet %s", h.MAC, h.IP, subnet)
		case h.IP == s.IPv4.Addr():
			bad("dhcp_hosts", "the reservation of %s, %s, is the host's own address on the network", h.MAC, h.IP)
		}
	}
	return out
}

func nextAddr(p netip.Prefix) netip.Addr { return p.Addr().Next() }

// NetworkXML renders the definition of a network.
func NetworkXML(s NetworkSpec) (string, error) {
	n := libvirtxml.Network{Name: s.Name}
	switch s.Mode {
	case ModeNAT, ModeRoute, ModeOpen, ModeBridge:
		n.Forward = &libvirtxml.NetworkForward{Mode: s.Mode}
	case ModeIsolated:
	default:
		return "", fmt.Errorf("network %s: unknown mode %q (one of %s)", s.Name, s.Mode, strings.Join(Modes, ", "))
	}
	if s.Bridge != "" {
		n.Bridge = &libvirtxml.NetworkBridge{Name: s.Bridge}
		if s.Mode != ModeBridge {
			n.Bridge.STP, n.Bridge.Delay = "on", "0"
		}
	}
	if s.IPv4.IsValid() {
		ip := libvirtxml.NetworkIP{Address: s.IPv4.Addr().String(), Prefix: uint(s.IPv4.Bits())}
		if s.DHCPStart.IsValid() {
			ip.DHCP = &libvirtxml.NetworkDHCP{Ranges: []libvirtxml.NetworkDHCPRange{{Start: s.DHCPStart.String(), End: s.DHCPEnd.String()}}}
			for _, h := range s.Hosts {
				ip.DHCP.Hosts = append(ip.DHCP.Hosts, libvirtxml.NetworkDHCPHost{MAC: h.MAC, Name: h.Name, IP: h.IP.String()})
			}
		}
		n.IPs = append(n.IPs, ip)
	}
	if s.IPv6.IsValid() {
		n.IPs = append(n.IPs, libvirtxml.NetworkIP{Family: "ipv6", Address: s.IPv6.Addr().String(), Prefix: uint(s.IPv6.Bits())})
	}
	doc, err := n.Marshal()
	if err != nil {
		return "", fmt.Errorf("rendering the XML of network %s: %w", s.Name, err)
	}
	return doc, nil
}

// ParseNetwork reads a network's XML and state as the host reported them.
// A network with no <forward> is isolated.
func ParseNetwork(d hostapi.Definition) (Network, error) {
	var x libvirtxml.Network
	if err := x.Unmarshal(d.XML); err != nil {
		return Network{}, fmt.Errorf("parsing the XML of a network: %w", err)
	}
	n := Network{NetworkSpec: NetworkSpec{Name: x.Name, Mode: ModeIsolated, Autostart: d.Autostart}, Active: d.Active}
	if x.Forward != nil {
		n.Mode = x.Forward.Mode
		if n.Mode == "" {
			n.Mode = ModeNAT // libvirt's default forward mode
		}
	}
	if x.Bridge != nil {
		n.Bridge = x.Bridge.Name
	}
	for _, ip := range x.IPs {
		p, err := ipPrefix(ip)
		if err != nil {
			return Network{}, fmt.Errorf("network %s: %w", x.Name, err)
		}
		switch {
		case p.Addr().Is4() && !n.IPv4.IsValid():
			n.IPv4 = p
			if err := parseDHCP(&n.NetworkSpec, ip.DHCP); err != nil {
				return Network{}, fmt.Errorf("network %s: %w", x.Name, err)
			}
		case p.Addr().Is6() && !n.IPv6.IsValid():
			n.IPv6 = p
		}
	}
	return n, nil
}

func ipPrefix(ip libvirtxml.NetworkIP) (netip.Prefix, error) {
	a, err := netip.ParseAddr(ip.Address)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("address %q: %w", ip.Address, err)
	}
	bits := int(ip.Prefix)
	if ip.Netmask != "" {
		m, err := netip.ParseAddr(ip.Netmask)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("netmask %q: %w", ip.Netmask, err)
		}
		bits = 0
		for _, b := range m.AsSlice() {
			for ; b&0x80 != 0; b <<= 1 {
				bits++
			}
		}
	}
	if bits == 0 { // libvirt's default for an address without prefix: its class
		bits = 24
		if a.Is6() {
			bits = 64
		}
	}
	return netip.PrefixFrom(a, bits), nil
}

func parseDHCP(s *NetworkSpec, d *libvirtxml.NetworkDHCP) error {
	if d == nil {
		return nil
	}
	if len(d.Ranges) > 0 {
		var err1, err2 error
		s.DHCPStart, err1 = netip.ParseAddr(d.Ranges[0].Start)
		s.DHCPEnd, err2 = netip.ParseAddr(d.Ranges[0].End)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("DHCP range %s-%s is not two addresses", d.Ranges[0].Start, d.Ranges[0].End)
		}
	}
	for _, h := range d.Hosts {
		ip, err := netip.ParseAddr(h.IP)
		if err != nil {
			return fmt.Errorf("DHCP host %s: address %q: %w", h.MAC, h.IP, err)
		}
		s.Hosts = append(s.Hosts, DHCPHost{MAC: strings.ToLower(h.MAC), IP: ip, Name: h.Name})
	}
	return nil
}

// ReadNetwork reads the network name; nil when the host has none.
func ReadNetwork(ctx context.Context, h NetworkHost, name string) (*Network, error) {
	d, err := h.NetworkDefinition(ctx, name)
	if err != nil || d == nil {
		return nil, err
	}
	n, err := ParseNetwork(*d)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// CreateNetwork defines a network, starts it and sets its autostart. A
// failure after the definition stops and undefines it again, so the host is
// left as it was.
func CreateNetwork(ctx context.Context, h NetworkHost, s NetworkSpec) (Network, error) {
	if have, err := h.NetworkDefinition(ctx, s.Name); err != nil {
		return Network{}, err
	} else if have != nil {
		return Network{}, &ExistsError{Kind: "network", Name: s.Name}
	}
	doc, err := NetworkXML(s)
	if err != nil {
		return Network{}, err
	}
	if err := h.DefineNetwork(ctx, doc); err != nil {
		return Network{}, fmt.Errorf("defining network %s: %w", s.Name, err)
	}
	started := false
	if err = h.StartNetwork(ctx, s.Name); err != nil {
		err = fmt.Errorf("starting network %s: %w", s.Name, err)
	} else if started = true; s.Autostart {
		if err = h.SetNetworkAutostart(ctx, s.Name, true); err != nil {
			err = fmt.Errorf("marking network %s to start with the host: %w", s.Name, err)
		}
	}
	if err != nil {
		var uerr error
		if started {
			uerr = h.StopNetwork(ctx, s.Name)
		}
		if uerr == nil {
			uerr = h.UndefineNetwork(ctx, s.Name)
		}
		if uerr != nil {
			return Network{}, fmt.Errorf("%w (and removing the half-made network failed: %v; remove it with virsh net-destroy/net-undefine %s)", err, uerr, s.Name)
		}
		return Network{}, fmt.Errorf("%w (the network's definition was removed again)", err)
	}
	return mustReadNetwork(ctx, h, s.Name)
}

func mustReadNetwork(ctx context.Context, h NetworkHost, name string) (Network, error) {
	n, err := ReadNetwork(ctx, h, name)
	if err == nil && n == nil {
		err = fmt.Errorf("network %s is gone from the host; refresh, and the next apply creates it again", name)
	}
	if err != nil {
		return Network{}, err
	}
	return *n, nil
}

// UpdateNetwork puts right what changes in place: the DHCP reservations
// (deleted and added one by one through virNetworkUpdate, live and in the
// persistent definition, so a running network is not restarted and its
// guests keep their leases), the autostart flag, and a network found
// stopped is started. The reservations are compared with what the host
// has, not with the last state: one added by hand is removed.
func UpdateNetwork(ctx context.Context, h NetworkHost, s NetworkSpec) (Network, error) {
	cur, err := mustReadNetwork(ctx, h, s.Name)
	if err != nil {
		return Network{}, err
	}
	want := map[string]bool{}
	for _, d := range s.Hosts {
		want[d.key()] = true
	}
	have := map[string]bool{}
	for _, d := range cur.Hosts {
		have[d.key()] = true
	}
	// deletions first: a MAC whose address changes is deleted, then added
	for _, d := range cur.Hosts {
		if !want[d.key()] {
			if err := updateHost(ctx, h, s.Name, false, d, cur.Active); err != nil {
				return Network{}, err
			}
		}
	}
	for _, d := range s.Hosts {
		if !have[d.key()] {
			if err := updateHost(ctx, h, s.Name, true, d, cur.Active); err != nil {
				return Network{}, err
			}
		}
	}
	if cur.Autostart != s.Autostart {
		if err := h.SetNetworkAutostart(ctx, s.Name, s.Autostart); err != nil {
			return Network{}, fmt.Errorf("setting autostart of network %s to %t: %w", s.Name, s.Autostart, err)
		}
	}
	if !cur.Active {
		if err := h.StartNetwork(ctx, s.Name); err != nil {
			return Network{}, fmt.Errorf("starting network %s: %w", s.Name, err)
		}
	}
	return mustReadNetwork(ctx, h, s.Name)
}

func updateHost(ctx context.Context, h NetworkHost, network string, add bool, d DHCPHost, live bool) error {
	doc, err := d.XML()
	if err != nil {
		return err
	}
	if err := h.UpdateNetworkDHCPHost(ctx, network, add, doc, live); err != nil {
		verb := "removing"
		if add {
			verb = "adding"
		}
		return fmt.Errorf("%s the DHCP reservation of %s (%s) on network %s: %w", verb, d.MAC, d.IP, network, err)
	}
	return nil
}

// DeleteNetwork stops and undefines a network; one already gone is no
// error.
func DeleteNetwork(ctx context.Context, h NetworkHost, name string) error {
	n, err := ReadNetwork(ctx, h, name)
	if err != nil || n == nil {
		return err
	}
	if n.Active {
		if err := h.StopNetwork(ctx, name); err != nil {
			return fmt.Errorf("stopping network %s: %w", name, err)
		}
	}
	if err := h.UndefineNetwork(ctx, name); err != nil {
		return fmt.Errorf("undefining network %s: %w", name, err)
	}
	return nil
}

// SortHosts orders reservations by MAC, the order state keeps them in.
func SortHosts(hs []DHCPHost) {
	slices.SortFunc(hs, func(a, b DHCPHost) int { return strings.Compare(a.MAC, b.MAC) })
}
