package placement

import (
	"context"
	"fmt"
	"sync"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

const (
	nvidia   = 0x10de
	h100SXM  = 0x2330
	l40s     = 0x26b9
	h100Name = "GH100 [H100 SXM5 80GB]"
	l40sName = "AD102GL [L40S]"
)

func addr(bus uint8) vfio.Address { return vfio.Address{Bus: bus} }

func cpuRange(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// hgx is an 8-GPU HGX H100 host as lspci and libvirt show one: two
// sockets of 56 cores, four SXM5 GPUs on each socket's PCIe switches,
// 1 TiB of memory per node of which most is free, 2 MiB huge pages
// reserved on both nodes.
func hgx(name string) *Host {
	h := &Host{Name: name, Schedulable: true}
	for id := range 2 {
		h.Nodes = append(h.Nodes, Node{
			ID: id, CPUs: cpuRange(id*56, 56), FreeMemoryMiB: 900 << 10,
			FreeHugePages: map[uint64]uint64{2048: 64 << 10 / 2}, // 64 GiB of 2 MiB pages
		})
	}
	for i, bus := range []uint8{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb} {
		a := addr(bus)
		h.GPUs = append(h.GPUs, GPU{
			Address: a, Group: 20 + i, GroupMembers: []vfio.Address{a},
			VendorID: nvidia, DeviceID: h100SXM, Model: h100Name, MemoryGiB: 80, NUMANode: i / 4,
		})
	}
	return h
}

// l40sHost has four L40S, two per node, and 2x32 CPUs.
func l40sHost(name string) *Host {
	h := &Host{Name: name, Schedulable: true}
	for id := range 2 {
		h.Nodes = append(h.Nodes, Node{ID: id, CPUs: cpuRange(id*32, 32), FreeMemoryMiB: 240 << 10})
	}
	for i, bus := range []uint8{0x17, 0x31, 0xb1, 0xca} {
		a, audio := addr(bus), vfio.Address{Bus: bus, Function: 1}
		h.GPUs = append(h.GPUs, GPU{
			Address: a, Group: 40 + i, GroupMembers: []vfio.Address{a, audio},
			VendorID: nvidia, DeviceID: l40s, Model: l40sName, MemoryGiB: 48, NUMANode: i / 2,
		})
	}
	return h
}

// cpuHost has no GPU: 2x16 CPUs, 120 GiB free per node.
func cpuHost(name string) *Host {
	h := &Host{Name: name, Schedulable: true}
	for id := range 2 {
		h.Nodes = append(h.Nodes, Node{ID: id, CPUs: cpuRange(id*16, 16), FreeMemoryMiB: 120 << 10})
	}
	return h
}

func downHost(name, why string) *Host { return &Host{Name: name, Reason: why} }

func h100s(n int) *GPUAsk {
	return &GPUAsk{Count: n, Selector: Selector{VendorID: nvidia, Model: "H100"}}
}

// countingSource serves fixed hosts and counts each host's reads.
type countingSource struct {
	mu    sync.Mutex
	hosts map[string]*Host
	fail  map[string]error
	reads map[string]int
}

func newSource(hosts ...*Host) *countingSource {
	s := &countingSource{hosts: map[string]*Host{}, fail: map[string]error{}, reads: map[string]int{}}
	for _, h := range hosts {
		s.hosts[h.Name] = h
	}
	return s
}

func (s *countingSource) ReadHost(_ context.Context, name string) (*Host, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[name]++
	if err := s.fail[name]; err != nil {
		return nil, err
	}
	h, ok := s.hosts[name]
	if !ok {
		return nil, fmt.Errorf("no such host %q", name)
	}
	return h, nil
}

func (s *countingSource) names() []string {
	var out []string
	for n := range s.hosts {
		out = append(out, n)
	}
	for n := range s.fail {
		out = append(out, n)
	}
	return out
}
