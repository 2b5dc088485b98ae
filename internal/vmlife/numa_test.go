package vmlife

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// gpuNodeXML is a GPU function's node device on vfio-pci, on a NUMA node
// (-1: none reported).
func gpuNodeXML(bus, node int) string {
	numa := ""
	if node >= 0 {
		numa = fmt.Sprintf("<numa node='%d'/>", node)
	}
	return fmt.Sprintf(`<device><name>pci_0000_%02x_00_0</name><driver><name>vfio-pci</name></driver>
<capability type='pci'><class>0x030200</class><domain>0</domain><bus>%d</bus><slot>0</slot><function>0</function>
<product id='0x2330'/><vendor id='0x10de'/><iommuGroup number='%d'><address domain='0x0000' bus='0x%02x' slot='0x00' function='0x0'/></iommuGroup>%s</capability></device>`,
		bus, bus, bus, bus, numa)
}

// twoSockets is a host with two nodes of 8 CPUs, 2 MiB pages on both and
// 1 GiB pages on node 1 only, and a GPU on each node (0000:17:00.0 on node
// 0, 0000:ca:00.0 on node 1).
func twoSockets() *fakeHost {
	h := newFakeHost()
	h.numa = []virt.NUMANode{
		{ID: 0, CPUs: []int{0, 1, 2, 3, 16, 17, 18, 19}, FreeKnown: true, HugePages: []virt.HugePages{{SizeKiB: 2048, Total: 1024, Free: 1000}}},
		{ID: 1, CPUs: []int{4, 5, 6, 7, 20, 21, 22, 23}, FreeKnown: true, HugePages: []virt.HugePages{{SizeKiB: 2048, Total: 512, Free: 100}, {SizeKiB: 1 << 20, Total: 8, Free: 8}}},
	}
	h.nodeDevs["pci_0000_17_00_0"] = gpuNodeXML(0x17, 0)
	h.nodeDevs["pci_0000_ca_00_0"] = gpuNodeXML(0xca, 1)
	h.nodeDevs["pci_0000_3b_00_0"] = gpuNodeXML(0x3b, -1)
	return h
}

func TestPlace(t *testing.T) {
	t.Parallel()
	spec := func(vcpu, mib, pageKiB int) domain.Spec {
		return domain.Spec{Name: "g", VCPU: vcpu, MemoryMiB: mib, HugePageKiB: pageKiB}
	}
	cases := []struct {
		name     string
		host     func() *fakeHost
		spec     domain.Spec
		mode     string
		gpus     []string
		nodes    []int
		creating bool
		want     []domain.NUMACell
		err      string // substring; attribute before the colon
		calls    int    // host calls made
	}{
		{name: "no gpus, no pages: no call", host: twoSockets, spec: spec(4, 4096, 0), creating: true},
		{name: "gpu on node 1", host: twoSockets, spec: spec(4, 4096, 0), gpus: []string{"0000:ca:00.0"}, creating: true,
			want: []domain.NUMACell{{HostNode: 1, CPUs: "4-7,20-23"}}, calls: 2},
		{name: "gpu named with its host", host: twoSockets, spec: spec(4, 4096, 0), gpus: []string{"gpu1/0000:17:00.0"}, creating: true,
			want: []domain.NUMACell{{HostNode: 0, CPUs: "0-3,16-19"}}, calls: 2},
		{name: "gpus on both nodes: two cells", host: twoSockets, spec: spec(4, 4096, 0), gpus: []string{"0000:ca:00.0", "0000:17:00.0"}, creating: true,
			want: []domain.NUMACell{{HostNode: 0, CPUs: "0-3,16-19"}, {HostNode: 1, CPUs: "4-7,20-23"}}, calls: 3},
		{name: "placement none", host: twoSockets, spec: spec(4, 4096, 0), mode: PlacementNone, gpus: []string{"0000:ca:00.0"}, creating: true},
		{name: "gpu without a node", host: twoSockets, spec: spec(4, 4096, 0), gpus: []string{"0000:3b:00.0"}, creating: true, calls: 2},
		{name: "one-node host", host: func() *fakeHost { h := twoSockets(); h.numa = h.numa[:1]; return h }, spec: spec(4, 4096, 0), gpus: []string{"0000:ca:00.0"}, creating: true, calls: 1},
		{name: "more vcpus than the node has", host: twoSockets, spec: spec(12, 4096, 0), gpus: []string{"0000:ca:00.0"}, creating: true,
			err: "vcpu: 12 vCPUs exceed the 8 CPUs of NUMA node 1, where the VM's GPUs are. Lower vcpu to 8 or less"},
		{name: "pages on the node", host: twoSockets, spec: spec(4, 128, domain.HugePage2MiB), gpus: []string{"0000:ca:00.0"}, creating: true,
			want: []domain.NUMACell{{HostNode: 1, CPUs: "4-7,20-23"}}, calls: 2},
		{name: "too few free pages on the node", host: twoSockets, spec: spec(4, 4096, domain.HugePage2MiB), gpus: []string{"0000:ca:00.0"}, creating: true,
			err: "hugepages: NUMA node 1 has 100 free 2 MiB huge pages; the VM's 4096 MiB there need 2048"},
		{name: "updating does not count free pages (the VM's own are in use)", host: twoSockets, spec: spec(4, 4096, domain.HugePage2MiB), gpus: []string{"0000:ca:00.0"},
			want: []domain.NUMACell{{HostNode: 1, CPUs: "4-7,20-23"}}, calls: 2},
		{name: "1 GiB pages where the node has none", host: twoSockets, spec: spec(4, 2048, domain.HugePage1GiB), gpus: []string{"0000:17:00.0"}, creating: true,
			err: "hugepages: NUMA node 0, where the VM's GPUs are, has no 1 GiB huge pages; reserve them on the host first: echo N > /sys/devices/system/node/node<id>/hugepages/hugepages-1048576kB/nr_hugepages, or hugepagesz=1G hugepages=N"},
		{name: "unbound pages counted on all nodes", host: twoSockets, spec: spec(2, 2048, domain.HugePage2MiB), creating: true, calls: 1},
		{name: "unbound, too few in all", host: twoSockets, spec: spec(2, 4096, domain.HugePage2MiB), creating: true,
			err: "hugepages: the host has 1100 free 2 MiB huge pages; the VM's 4096 MiB need 2048"},
		{name: "no gpus, the node placement chose", host: twoSockets, spec: spec(4, 4096, 0), nodes: []int{1}, creating: true,
			want: []domain.NUMACell{{HostNode: 1, CPUs: "4-7,20-23"}}, calls: 1},
		{name: "the gpus' nodes win over nodes", host: twoSockets, spec: spec(4, 4096, 0), gpus: []string{"0000:17:00.0"}, nodes: []int{1}, creating: true,
			want: []domain.NUMACell{{HostNode: 0, CPUs: "0-3,16-19"}}, calls: 2},
		{name: "nodes, placement none", host: twoSockets, spec: spec(4, 4096, 0), mode: PlacementNone, nodes: []int{1}, creating: true},
		{name: "nodes on a one-node host", host: func() *fakeHost { h := twoSockets(); h.numa = h.numa[:1]; return h }, spec: spec(4, 4096, 0), nodes: []int{0}, creating: true, calls: 1},
		{name: "more vcpus than the chosen node has", host: twoSockets, spec: spec(12, 4096, 0), nodes: []int{0}, creating: true,
			err: "vcpu: 12 vCPUs exceed the 8 CPUs of NUMA node 0, where placement put the VM. Lower vcpu to 8 or less"},
		{name: "split over two nodes, pages per node", host: twoSockets, spec: spec(4, 256, domain.HugePage2MiB), gpus: []string{"0000:ca:00.0", "0000:17:00.0"}, creating: true,
			want: []domain.NUMACell{{HostNode: 0, CPUs: "0-3,16-19"}, {HostNode: 1, CPUs: "4-7,20-23"}}, calls: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := c.host()
			s := c.spec
			s.NUMA = []domain.NUMACell{{HostNode: 9, CPUs: "99"}} // stale: Place starts afresh
			err := Place(context.Background(), h, &s, c.mode, c.gpus, c.nodes, c.creating)
			if c.err != "" {
				var pe *PlacementError
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a PlacementError with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.NUMA, c.want) {
				t.Errorf("NUMA = %+v, want %+v", s.NUMA, c.want)
			}
			if len(h.ops) != c.calls {
				t.Errorf("%d host calls (%v), want %d", len(h.ops), h.ops, c.calls)
			}
		})
	}
}

// A host whose driver does not report NUMA cells is not bound and not
// refused: libvirt has the last word when the domain starts.
func TestPlaceUnsupported(t *testing.T) {
	t.Parallel()
	h := twoSockets()
	h.numa = nil
	s := domain.Spec{Name: "g", VCPU: 64, MemoryMiB: 1 << 20, HugePageKiB: domain.HugePage1GiB}
	if err := Place(context.Background(), h, &s, PlacementAuto, []string{"0000:ca:00.0"}, nil, true); err != nil || s.NUMA != nil {
		t.Fatalf("err %v, NUMA %+v; want neither", err, s.NUMA)
	}
	h.fail["NUMANodes"] = errors.New("connection reset")
	if err := Place(context.Background(), h, &s, PlacementAuto, []string{"0000:ca:00.0"}, nil, true); err == nil {
		t.Fatal("a failed capabilities read was ignored")
	}
}
