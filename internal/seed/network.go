package seed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
)

// Default routes are written the way both cloud-init 22.4 (Debian 12) and
// 25.x (Debian 13) render correctly with every renderer:
//
//   - IPv4: routes: [{to: 0.0.0.0/0, via: GW}]. "to: default" is rejected
//     by the ENI, networkd and sysconfig renderers of both versions
//     ("Address default is not a valid ip address"); only netplan
//     passthrough takes it.
//   - IPv6: gateway6: GW. "to: ::/0" is rendered as a route to ::/64 by
//     22.4 (LP #2003562, fixed in 23.1), and gateway6 is still read by 25.x.
//
// ConfigDrive's network_data.json carries both as routes with network
// 0.0.0.0/:: and netmask 0.0.0.0/::, which both versions render correctly.

// renderNetplan renders the NoCloud network-config (netplan v2 syntax, as
// cloud-init accepts it) for the structured NICs.
func renderNetplan(nics []nicPlan) ([]byte, error) {
	eths := newMap()
	for _, n := range nics {
		e := newMap().set("match", newMap().set("macaddress", ystr(n.mac)).node())
		if n.setName != "" {
			e.set("set-name", ystr(n.setName))
		}
		if n.dhcp4 {
			e.set("dhcp4", ybool(true))
		}
		if n.dhcp6 {
			e.set("dhcp6", ybool(true))
		}
		if len(n.addrs) > 0 {
			as := yseq()
			for _, a := range n.addrs {
				as.Content = append(as.Content, ystr(a.String()))
			}
			e.set("addresses", as)
		}
		if n.gw4.IsValid() {
			e.set("routes", yseq(newMap().
				set("to", ystr("0.0.0.0/0")).
				set("via", ystr(n.gw4.String())).node()))
		}
		if n.gw6.IsValid() {
			e.set("gateway6", ystr(n.gw6.String()))
		}
		if len(n.nameservers) > 0 || len(n.search) > 0 {
			ns := newMap()
			if len(n.nameservers) > 0 {
				as := yseq()
				for _, a := range n.nameservers {
					as.Content = append(as.Content, ystr(a.String()))
				}
				ns.set("addresses", as)
			}
			if len(n.search) > 0 {
				ns.set("search", ystrs(n.search))
			}
			e.set("nameservers", ns.node())
		}
		eths.set(n.id, e.node())
	}
	doc := newMap().set("version", yint(2)).set("ethernets", eths.node())
	return encodeYAML(doc.node())
}

type ndLink struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	MAC  string `json:"ethernet_mac_address"`
	Name string `json:"name,omitempty"`
}

type ndRoute struct {
	Network string `json:"network"`
	Netmask string `json:"netmask"`
	Gateway string `json:"gateway"`
}

type ndNetwork struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Link      string    `json:"link"`
	NetworkID string    `json:"network_id"`
	IPAddress string    `json:"ip_address,omitempty"`
	Netmask   string    `json:"netmask,omitempty"`
	Routes    []ndRoute `json:"routes,omitempty"`
	DNSSearch []string  `json:"dns_search,omitempty"`
}

type ndService struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

type networkData struct {
	Links    []ndLink    `json:"links"`
	Networks []ndNetwork `json:"networks"`
	Services []ndService `json:"services"`
}

func netmask(p netip.Prefix) string {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	m, _ := netip.AddrFromSlice(net.CIDRMask(p.Bits(), bits))
	return m.String()
}

// renderNetworkData renders ConfigDrive v2 network_data.json: one "phy"
// link per NIC keyed by MAC, one network per DHCP family and per static
// address, the default routes on the first network of their family, and the
// name servers as dns services. dns_search is a cloud-init extension of the
// format (it reads it from each network).
func renderNetworkData(nics []nicPlan) ([]byte, error) {
	nd := networkData{Links: []ndLink{}, Networks: []ndNetwork{}, Services: []ndService{}}
	seenNS := map[netip.Addr]bool{}
	for _, n := range nics {
		nd.Links = append(nd.Links, ndLink{ID: n.id, Type: "phy", MAC: n.mac, Name: n.setName})
		first := len(nd.Networks)
		add := func(nw ndNetwork) {
			nw.ID = fmt.Sprintf("%s-%d", n.id, len(nd.Networks)-first)
			nw.NetworkID = nw.ID
			nw.Link = n.id
			nd.Networks = append(nd.Networks, nw)
		}
		if n.dhcp4 {
			add(ndNetwork{Type: "ipv4_dhcp"})
		}
		if n.dhcp6 {
			add(ndNetwork{Type: "ipv6_dhcp"})
		}
		gw4At, gw6At := gatewayHome(n.addrs, n.gw4), gatewayHome(n.addrs, n.gw6)
		for i, a := range n.addrs {
			nw := ndNetwork{Type: "ipv4", IPAddress: a.Addr().String(), Netmask: netmask(a)}
			if a.Addr().Is6() {
				nw.Type = "ipv6"
			}
			switch i {
			case gw4At:
				nw.Routes = []ndRoute{{Network: "0.0.0.0", Netmask: "0.0.0.0", Gateway: n.gw4.String()}}
			case gw6At:
				nw.Routes = []ndRoute{{Network: "::", Netmask: "::", Gateway: n.gw6.String()}}
			}
			add(nw)
		}
		if len(n.search) > 0 && len(nd.Networks) > first {
			nd.Networks[first].DNSSearch = n.search
		}
		for _, ns := range n.nameservers {
			if !seenNS[ns] {
				seenNS[ns] = true
				nd.Services = append(nd.Services, ndService{Type: "dns", Address: ns.String()})
			}
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(nd); err != nil {
		return nil, fmt.Errorf("encoding network_data.json: %w", err)
	}
	return b.Bytes(), nil
}

// gatewayHome is the index of the address whose subnet holds gw (for an
// IPv6 link-local gateway: the first IPv6 address), or -1.
func gatewayHome(addrs []netip.Prefix, gw netip.Addr) int {
	if !gw.IsValid() {
		return -1
	}
	first := -1
	for i, a := range addrs {
		if a.Addr().Is6() != gw.Is6() {
			continue
		}
		if first < 0 {
			first = i
		}
		if a.Masked().Contains(gw) {
			return i
		}
	}
	if gw.IsLinkLocalUnicast() {
		return first
	}
	return -1
}
