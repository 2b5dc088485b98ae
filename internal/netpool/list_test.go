package netpool

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Pools Kohaku did not make are listed as well as its own, stopped ones
// too; a pool kohaku_pool does not model (LVM: destroying it would delete
// the volume group) is left out.
func TestListPoolsListsEveryDirectoryPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newFakeHost()
	if _, err := CreatePool(ctx, h, PoolSpec{Name: "vms", Path: "/srv/vms", Autostart: true}); err != nil {
		t.Fatal(err)
	}
	h.pools["images"] = &fakeObj{xml: readTestdata(t, "foreign-pool.xml")}
	h.pools["vg0"] = &fakeObj{xml: `<pool type='logical'><name>vg0</name><source><name>vg0</name></source><target><path>/dev/vg0</path></target></pool>`, active: true}
	got, err := ListPools(ctx, h, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []Pool{
		{Name: "images", Type: "dir", Path: "/srv/images"},
		{Name: "vms", Type: "dir", Path: "/srv/vms", Active: true, Autostart: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %+v, want %+v", got, want)
	}
	// A prefix keeps its pools, and reads no other pool's definition.
	h.pools["broken"] = &fakeObj{xml: "<not a pool"}
	if got, err := ListPools(ctx, h, "im"); err != nil || !slices.Equal(got, want[:1]) {
		t.Fatalf("listed %+v (%v) with prefix im, want %+v", got, err, want[:1])
	}
}

func TestListPoolsFailsWithTheHost(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	h.failOn = "PoolNames"
	if _, err := ListPools(context.Background(), h, ""); err == nil || !strings.Contains(err.Error(), "listing storage pools") {
		t.Fatalf("got %v, want the listing's failure with context", err)
	}
}

// libvirt's own default network (netmask, forward without mode), a
// hand-made one with what Kohaku does not model, and Kohaku's are listed;
// a network of a mode kohaku_network does not have (hostdev) is not.
func TestListNetworksListsModelledNetworks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newFakeHost()
	if _, err := CreateNetwork(ctx, h, natSpec()); err != nil {
		t.Fatal(err)
	}
	h.networks["default"] = &fakeObj{active: true, autostart: true, xml: `<network><name>default</name><forward/>
<bridge name='virbr0' stp='on' delay='0'/><ip address='192.168.122.1' netmask='255.255.255.0'>
<dhcp><range start='192.168.122.2' end='192.168.122.254'/></dhcp></ip></network>`}
	h.networks["corp"] = &fakeObj{xml: readTestdata(t, "foreign-network.xml")}
	h.networks["sriov"] = &fakeObj{xml: `<network><name>sriov</name><forward mode='hostdev' managed='yes'><pf dev='eth3'/></forward></network>`}
	got, err := ListNetworks(ctx, h, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range got {
		names = append(names, n.Name)
	}
	if want := []string{"corp", "default", natSpec().Name}; !slices.Equal(names, want) {
		t.Fatalf("listed %v, want %v", names, want)
	}
	if only, err := ListNetworks(ctx, h, "def"); err != nil || len(only) != 1 || only[0].Name != "default" {
		t.Fatalf("listed %+v (%v) with prefix def, want default alone", only, err)
	}
	def := got[1]
	if def.Mode != ModeNAT || def.Bridge != "virbr0" || def.IPv4 != netip.MustParsePrefix("192.168.122.1/24") ||
		def.DHCPStart != netip.MustParseAddr("192.168.122.2") || !def.Active || !def.Autostart {
		t.Fatalf("default network listed as %+v", def)
	}
	corp := got[0]
	if corp.IPv6 != netip.MustParsePrefix("fd00:145::1/64") || len(corp.Hosts) != 1 || corp.Hosts[0].MAC != "52:54:00:aa:00:01" {
		t.Fatalf("corp network listed as %+v", corp)
	}
}

// Adopting a network Kohaku did not make, then applying what was read (the
// configuration `terraform query` generates) changes nothing on the host;
// changing a reservation and autostart afterwards edits only those, never
// redefining the network, so what Kohaku does not model (DNS, MTU, domain,
// port groups, NAT ports, lease time, metadata, the UUID and MAC) survives.
func TestUpdateNetworkKeepsWhatKohakuDoesNotModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newFakeHost()
	h.networks["corp"] = &fakeObj{xml: readTestdata(t, "foreign-network.xml"), active: true}
	n, err := ReadNetwork(ctx, h, "corp")
	if err != nil || n == nil {
		t.Fatalf("reading: %v %v", n, err)
	}
	before := h.networks["corp"].xml
	if _, err := UpdateNetwork(ctx, h, n.NetworkSpec); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 0 || h.networks["corp"].xml != before {
		t.Fatalf("adopting as read changed the network: calls %v", h.calls)
	}

	s := n.NetworkSpec
	s.Autostart = true
	s.Hosts = append(s.Hosts, DHCPHost{MAC: "52:54:00:aa:00:02", IP: netip.MustParseAddr("192.168.145.12")})
	got, err := UpdateNetwork(ctx, h, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Hosts) != 2 || !got.Autostart || !got.Active {
		t.Fatalf("after the update %+v", got)
	}
	for _, c := range h.calls {
		if op := strings.Fields(c)[0]; op != "AddDHCPHost" && op != "SetNetworkAutostart" {
			t.Errorf("the update called %s; only the reservation and autostart were to change", c)
		}
	}
	after := h.networks["corp"].xml
	for _, kept := range []string{"team-a", "<port start=\"1024\" end=\"65535\"", "<mtu size=\"9000\"", "lab.example",
		"<hostname>build</hostname>", "<lease expiry=\"1\" unit=\"hours\"", "trusted", "6b6f6861-6b75-4e65-8000-000000000045",
		"52:54:00:45:45:45", "fd00:145::1"} {
		if !strings.Contains(after, kept) {
			t.Errorf("the update lost %s:\n%s", kept, after)
		}
	}
}

// A pool Kohaku did not make keeps its definition (permissions, label,
// UUID) through adoption and an autostart change: a pool is never
// redefined after create.
func TestUpdatePoolKeepsWhatKohakuDoesNotModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newFakeHost()
	doc := readTestdata(t, "foreign-pool.xml")
	h.pools["images"] = &fakeObj{xml: doc, active: true}
	p, err := ReadPool(ctx, h, "images")
	if err != nil || p == nil {
		t.Fatalf("reading: %v %v", p, err)
	}
	if _, err := UpdatePool(ctx, h, PoolSpec{Name: p.Name, Path: p.Path, Autostart: p.Autostart}); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 0 {
		t.Fatalf("adopting as read changed the pool: %v", h.calls)
	}
	if _, err := UpdatePool(ctx, h, PoolSpec{Name: p.Name, Path: p.Path, Autostart: true}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.calls, []string{"SetPoolAutostart images"}) {
		t.Fatalf("the update called %v, want only the autostart", h.calls)
	}
	if h.pools["images"].xml != doc {
		t.Fatalf("the pool's definition changed:\n%s", h.pools["images"].xml)
	}
}
