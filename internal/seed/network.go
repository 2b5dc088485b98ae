package seed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
)

// How the documents are written, checked against cloud-init's own renderers
// of both generations (Debian 12's 22.4 and Debian 13's 25.1: see
// TestCloudInitRenderers and docs/resources/seed.md):
//
//   - Default gateways are gateway4/gateway6 (NoCloud) and a "gateway" on the
//     network (ConfigDrive), never a default route. Both become a subnet
//     gateway in cloud-init's network state, which ENI writes as a plain
//     "gateway" line (ifupdown applies it with ip(8)), netplan as a default
//     route and networkd as [Route] Gateway=. A route (routes: to 0.0.0.0/0,
//     or a ConfigDrive route to 0.0.0.0/0 or ::/0) is written by ENI, in 22.4
//     and 25.1 alike, as "post-up route add ... || true", which needs
//     net-tools' route(8) and silently does nothing without it (cloud-init
//     issue 6250). "to: default" is rejected by 22.4's renderers, and in 22.4
//     "to: ::/0" became a route to ::/64 (LP #2003562, fixed in 23.1).
//     The cost: cloud-init 25.x logs gateway4/gateway6 as DEPRECATED
//     (removal announced for 27.4), so a Debian 13 guest with a static
//     gateway reports extended_status "degraded done". ConfigDrive's
//     network "gateway" has no such warning.
//   - DNS servers and search domains go on each NIC that declares them
//     (nameservers:, ConfigDrive dns_nameservers/dns_search on the NIC's
//     first network), and ConfigDrive lists the servers once more as "dns"
//     services, as the format defines them. What applies them is the guest's
//     resolver stack, not cloud-init: ENI writes dns-nameservers/dns-search,
//     which only resolvconf reads; netplan and networkd hand them to
//     systemd-resolved. For guests with neither, the generated cloud-config
//     writes them into /etc/resolv.conf from bootcmd (resolvConfCommands).

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
			e.set("gateway4", ystr(n.gw4.String()))
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

// ndNetwork is one entry of "networks". gateway, dns_nameservers and
// dns_search are keys cloud-init copies into its network state as they are
// (openstack.convert_net_json, 22.4 and 25.1 alike); the format itself
// carries routes and services.
type ndNetwork struct {
	ID             string   `json:"id"`
	Type           string   `json:"type"`
	Link           string   `json:"link"`
	NetworkID      string   `json:"network_id"`
	IPAddress      string   `json:"ip_address,omitempty"`
	Netmask        string   `json:"netmask,omitempty"`
	Gateway        string   `json:"gateway,omitempty"`
	DNSNameservers []string `json:"dns_nameservers,omitempty"`
	DNSSearch      []string `json:"dns_search,omitempty"`
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
// address, each gateway on the network whose subnet holds it, the NIC's DNS
// servers and search domains on its first network, and every DNS server
// once more as a dns service.
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
				nw.Gateway = n.gw4.String()
			case gw6At:
				nw.Gateway = n.gw6.String()
			}
			add(nw)
		}
		if len(nd.Networks) > first {
			for _, ns := range n.nameservers {
				nd.Networks[first].DNSNameservers = append(nd.Networks[first].DNSNameservers, ns.String())
			}
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
