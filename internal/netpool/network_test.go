package netpool

import (
	"context"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func natSpec() NetworkSpec {
	return NetworkSpec{
		Name: "lab", Mode: ModeNAT,
		IPv4:      netip.MustParsePrefix("192.168.131.1/24"),
		DHCPStart: netip.MustParseAddr("192.168.131.100"), DHCPEnd: netip.MustParseAddr("192.168.131.199"),
		IPv6:      netip.MustParsePrefix("fd00:131::1/64"),
		Hosts:     []DHCPHost{{MAC: "52:54:00:00:00:01", IP: netip.MustParseAddr("192.168.131.10"), Name: "db"}},
		Autostart: true,
	}
}

func TestNetworkXMLGolden(t *testing.T) {
	t.Parallel()
	cases := map[string]NetworkSpec{
		"nat":      natSpec(),
		"isolated": {Name: "quiet", Mode: ModeIsolated, Bridge: "kq0", IPv4: netip.MustParsePrefix("10.77.0.1/16")},
		"route":    {Name: "routed", Mode: ModeRoute, IPv4: netip.MustParsePrefix("10.78.0.1/24")},
		"open":     {Name: "opened", Mode: ModeOpen, IPv4: netip.MustParsePrefix("10.79.0.1/24")},
		"bridge":   {Name: "lan", Mode: ModeBridge, Bridge: "br0"},
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			doc, err := NetworkXML(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "network-"+name+".xml", doc)
			// what is rendered reads back as what was declared
			got, err := ParseNetwork(virt.Definition{XML: doc, Autostart: s.Autostart})
			if err != nil {
				t.Fatal(err)
			}
			if !equalSpec(got.NetworkSpec, s) {
				t.Fatalf("read back %+v, want %+v", got.NetworkSpec, s)
			}
		})
	}
}

func TestPoolXMLGolden(t *testing.T) {
	t.Parallel()
	doc, err := PoolXML(PoolSpec{Name: "vms", Path: "/srv/vms"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "pool-dir.xml", doc)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if strings.TrimSpace(string(want)) != strings.TrimSpace(got) {
		t.Fatalf("%s differs:\n got: %s\nwant: %s", name, got, want)
	}
}

func equalSpec(a, b NetworkSpec) bool {
	return a.Name == b.Name && a.Mode == b.Mode && a.Bridge == b.Bridge && a.IPv4 == b.IPv4 && a.IPv6 == b.IPv6 &&
		a.DHCPStart == b.DHCPStart && a.DHCPEnd == b.DHCPEnd && slices.Equal(a.Hosts, b.Hosts) && a.Autostart == b.Autostart
}

// A network libvirt or a person wrote: netmask instead of prefix, forward
// without mode, upper-case MACs.
func TestParseNetworkAsLibvirtWritesIt(t *testing.T) {
	t.Parallel()
	doc := `<network><name>default</name><uuid>3e3fce45-4f53-4fa7-bb32-11f34168b82b</uuid><forward/>
<bridge name='virbr0' stp='on' delay='0'/><mac address='52:54:00:0a:0b:0c'/>
<ip address='192.168.122.1' netmask='255.255.255.0'><dhcp><range start='192.168.122.2' end='192.168.122.254'/>
<host mac='52:54:00:AA:BB:CC' ip='192.168.122.5'/></dhcp></ip></network>`
	n, err := ParseNetwork(virt.Definition{XML: doc, Active: true})
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode != ModeNAT || n.Bridge != "virbr0" || n.IPv4 != netip.MustParsePrefix("192.168.122.1/24") || !n.Active {
		t.Fatalf("parsed %+v", n)
	}
	if len(n.Hosts) != 1 || n.Hosts[0].MAC != "52:54:00:aa:bb:cc" {
		t.Fatalf("hosts %+v, want the MAC in lower case", n.Hosts)
	}
}

func TestValidateNetwork(t *testing.T) {
	t.Parallel()
	ip := netip.MustParseAddr
	cases := []struct {
		name string
		mod  func(*NetworkSpec)
		attr string // "" when valid
		msg  string
	}{
		{"valid", func(*NetworkSpec) {}, "", ""},
		{"range outside subnet", func(s *NetworkSpec) { s.DHCPStart = ip("192.168.132.5") }, "dhcp_start", "outside"},
		{"range reversed", func(s *NetworkSpec) { s.DHCPEnd = ip("192.168.131.50") }, "dhcp_end", "before"},
		{"half a range", func(s *NetworkSpec) { s.DHCPEnd = netip.Addr{} }, "dhcp_end", "both"},
		{"network address", func(s *NetworkSpec) { s.IPv4 = netip.MustParsePrefix("192.168.131.0/24") }, "ipv4_address", "network address"},
		{"duplicate MAC", func(s *NetworkSpec) {
			s.Hosts = append(s.Hosts, DHCPHost{MAC: "52:54:00:00:00:01", IP: ip("192.168.131.11")})
		}, "dhcp_hosts", "two reservations"},
		{"duplicate IP", func(s *NetworkSpec) {
			s.Hosts = append(s.Hosts, DHCPHost{MAC: "52:54:00:00:00:02", IP: ip("192.168.131.10")})
		}, "dhcp_hosts", "reserved twice"},
		{"reservation outside", func(s *NetworkSpec) { s.Hosts[0].IP = ip("10.0.0.5") }, "dhcp_hosts", "outside"},
		{"reservation is the host", func(s *NetworkSpec) { s.Hosts[0].IP = ip("192.168.131.1") }, "dhcp_hosts", "host's own"},
		{"reservations without DHCP", func(s *NetworkSpec) { s.DHCPStart, s.DHCPEnd = netip.Addr{}, netip.Addr{} }, "dhcp_hosts", "dhcp_start"},
		{"no address", func(s *NetworkSpec) { s.IPv4 = netip.Prefix{} }, "ipv4_address", "needs"},
		{"bridge without name", func(s *NetworkSpec) { *s = NetworkSpec{Name: "lan", Mode: ModeBridge} }, "bridge", "br0"},
		{"bridge with addresses", func(s *NetworkSpec) { s.Mode, s.Bridge = ModeBridge, "br0" }, "mode", "no addresses"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := natSpec()
			s.Hosts = slices.Clone(s.Hosts)
			c.mod(&s)
			ps := s.Validate()
			if c.attr == "" {
				if len(ps) > 0 {
					t.Fatalf("valid spec refused: %+v", ps)
				}
				return
			}
			if !slices.ContainsFunc(ps, func(p Problem) bool { return p.Attribute == c.attr && strings.Contains(p.Msg, c.msg) }) {
				t.Fatalf("problems %+v, want one on %s saying %q", ps, c.attr, c.msg)
			}
		})
	}
}

func TestCreateNetworkStartsAndAutostarts(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	n, err := CreateNetwork(context.Background(), h, natSpec())
	if err != nil {
		t.Fatal(err)
	}
	if !n.Active || !n.Autostart || n.Bridge != "virbr7" || !slices.Equal(n.Hosts, natSpec().Hosts) {
		t.Fatalf("created %+v", n)
	}
}

func TestCreateNetworkFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"StartNetwork", "SetNetworkAutostart"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost()
			h.failOn = step
			if _, err := CreateNetwork(context.Background(), h, natSpec()); !errors.Is(err, errFake) {
				t.Fatalf("got %v, want the injected failure", err)
			}
			if len(h.networks) != 0 {
				t.Fatalf("a failed create left networks: %v", h.networks)
			}
		})
	}
}

func TestCreateNetworkRefusesAnExistingNetwork(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ctx := context.Background()
	if _, err := CreateNetwork(ctx, h, natSpec()); err != nil {
		t.Fatal(err)
	}
	var exists *ExistsError
	if _, err := CreateNetwork(ctx, h, natSpec()); !errors.As(err, &exists) {
		t.Fatalf("got %v, want an ExistsError", err)
	}
}

// Reservations change on the running network one by one, live and in the
// definition: the network is never stopped or started.
func TestUpdateNetworkChangesReservationsWithoutRestart(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ctx := context.Background()
	if _, err := CreateNetwork(ctx, h, natSpec()); err != nil {
		t.Fatal(err)
	}
	h.calls = nil
	s := natSpec()
	s.Hosts = []DHCPHost{
		{MAC: "52:54:00:00:00:01", IP: netip.MustParseAddr("192.168.131.12"), Name: "db"}, // address moved
		{MAC: "52:54:00:00:00:02", IP: netip.MustParseAddr("192.168.131.10")},             // takes the old one
	}
	n, err := UpdateNetwork(ctx, h, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.Hosts, s.Hosts) || !n.Active {
		t.Fatalf("after update %+v, want hosts %+v on an active network", n, s.Hosts)
	}
	want := []string{"DeleteDHCPHost lab", "AddDHCPHost lab", "AddDHCPHost lab"}
	if !slices.Equal(h.calls, want) {
		t.Fatalf("calls %v, want %v (no stop or start)", h.calls, want)
	}

	h.calls = nil
	s.Hosts = nil
	if n, err = UpdateNetwork(ctx, h, s); err != nil {
		t.Fatal(err)
	}
	if len(n.Hosts) != 0 || !slices.Equal(h.calls, []string{"DeleteDHCPHost lab", "DeleteDHCPHost lab"}) {
		t.Fatalf("hosts %+v after calls %v, want both removed live", n.Hosts, h.calls)
	}
}

// A stopped network has its reservations changed in the definition only
// (live would be refused), then it is started.
func TestUpdateStoppedNetworkEditsDefinitionThenStarts(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ctx := context.Background()
	if _, err := CreateNetwork(ctx, h, natSpec()); err != nil {
		t.Fatal(err)
	}
	h.networks["lab"].active = false
	s := natSpec()
	s.Hosts = nil
	s.Autostart = false
	n, err := UpdateNetwork(ctx, h, s)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Active || n.Autostart || len(n.Hosts) != 0 {
		t.Fatalf("after update %+v", n)
	}
}

func TestDeleteNetwork(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ctx := context.Background()
	if _, err := CreateNetwork(ctx, h, natSpec()); err != nil {
		t.Fatal(err)
	}
	if err := DeleteNetwork(ctx, h, "lab"); err != nil {
		t.Fatal(err)
	}
	if len(h.networks) != 0 {
		t.Fatal("network left")
	}
	if err := DeleteNetwork(ctx, h, "lab"); err != nil {
		t.Fatalf("deleting a network already gone: %v", err)
	}
}
