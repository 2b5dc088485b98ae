package virt

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func capsFixture(t *testing.T, name string) *HostInfo {
	t.Helper()
	doc, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	h := &HostInfo{}
	if err := capabilitiesInto(h, string(doc)); err != nil {
		t.Fatal(err)
	}
	return h
}

func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// A dual-socket host in the shape libvirt 9.0 writes (two cells, hyper-thread
// siblings numbered n and n+16, 4 KiB base pages plus 2 MiB and 1 GiB pools):
// the base page is not a huge page pool, memory is KiB turned into MiB.
func TestNUMAFromCapabilities_twoNodes(t *testing.T) {
	t.Parallel()
	h := capsFixture(t, "capabilities-2node.xml")
	want := []NUMANode{
		{ID: 0, CPUs: append(seq(0, 7), seq(16, 23)...), MemoryMiB: 131599552 / 1024,
			HugePages: []HugePages{{SizeKiB: 2048, Total: 1024}, {SizeKiB: 1048576, Total: 4}}},
		{ID: 1, CPUs: append(seq(8, 15), seq(24, 31)...), MemoryMiB: 132115484 / 1024,
			HugePages: []HugePages{{SizeKiB: 2048, Total: 512}, {SizeKiB: 1048576, Total: 0}}},
	}
	if !reflect.DeepEqual(h.NUMANodes, want) {
		t.Fatalf("got  %+v\nwant %+v", h.NUMANodes, want)
	}
	if got := h.NUMANodes[0].CPUSet(); got != "0-7,16-23" {
		t.Errorf("node 0 cpuset %q", got)
	}
	if got := h.NUMANodes[1].CPUSet(); got != "8-15,24-31" {
		t.Errorf("node 1 cpuset %q", got)
	}
	if got := hugePageSizes(h.NUMANodes); !reflect.DeepEqual(got, []uint32{2048, 1048576}) {
		t.Errorf("page sizes %v", got)
	}
}

// The acceptance test host as captured: one cell, two CPUs, no huge pages
// reserved, the distances element present.
func TestNUMAFromCapabilities_singleNode(t *testing.T) {
	t.Parallel()
	h := capsFixture(t, "capabilities-1node-tcg.xml")
	want := []NUMANode{{ID: 0, CPUs: []int{0, 1}, MemoryMiB: 18704588 / 1024,
		HugePages: []HugePages{{SizeKiB: 2048}, {SizeKiB: 1048576}}}}
	if !reflect.DeepEqual(h.NUMANodes, want) {
		t.Fatalf("got  %+v\nwant %+v", h.NUMANodes, want)
	}
	if h.NUMANodes[0].CPUSet() != "0-1" {
		t.Errorf("cpuset %q", h.NUMANodes[0].CPUSet())
	}
}

// Capabilities without a topology (libvirt built without NUMA support) give
// no nodes rather than an error; cells without pages or CPUs are kept with
// empty lists; a page size that is not a number is refused.
func TestNUMAFromCapabilities_edges(t *testing.T) {
	t.Parallel()
	h := &HostInfo{}
	if err := capabilitiesInto(h, `<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>`); err != nil || h.NUMANodes != nil {
		t.Errorf("no topology: %v %v", h.NUMANodes, err)
	}
	h = &HostInfo{}
	err := capabilitiesInto(h, `<capabilities><host><topology><cells num='2'>
<cell id='1'><memory unit='KiB'>2097152</memory></cell>
<cell id='0'><memory unit='KiB'>1048576</memory><pages unit='KiB' size='4'>262144</pages><cpus num='1'><cpu id='0'/></cpus></cell>
</cells></topology></host></capabilities>`)
	if err != nil {
		t.Fatal(err)
	}
	want := []NUMANode{
		{ID: 0, CPUs: []int{0}, MemoryMiB: 1024, HugePages: []HugePages{}},
		{ID: 1, CPUs: []int{}, MemoryMiB: 2048, HugePages: []HugePages{}},
	}
	if !reflect.DeepEqual(h.NUMANodes, want) {
		t.Errorf("got  %+v\nwant %+v", h.NUMANodes, want)
	}
	h = &HostInfo{}
	err = capabilitiesInto(h, `<capabilities><host><topology><cells num='1'><cell id='0'><pages unit='KiB' size='x'>1</pages></cell></cells></topology></host></capabilities>`)
	if err == nil {
		t.Error("a page size that is not a number was accepted")
	}
}

func TestCPUSet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{0, 1}, "0-1"},
		{[]int{8, 0, 1, 2, 3, 2}, "0-3,8"},
		{append(seq(16, 23), seq(0, 7)...), "0-7,16-23"},
		{[]int{1, 3, 5}, "1,3,5"},
	} {
		if got := CPUSet(c.in); got != c.want {
			t.Errorf("CPUSet(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// libvirt answers NodeGetCellsFreeMemory with bytes per cell from the start
// cell, and NodeGetFreePages with, cell after cell, one count per size asked.
func TestApplyFree(t *testing.T) {
	t.Parallel()
	h := capsFixture(t, "capabilities-2node.xml")
	nodes := h.NUMANodes
	if err := applyFreeMemory(nodes, 0, []uint64{100 << 30, 3<<30 + 512<<20 + 4095}); err != nil {
		t.Fatal(err)
	}
	if nodes[0].FreeMemoryMiB != 100<<10 || nodes[1].FreeMemoryMiB != 3<<10+512 {
		t.Errorf("free memory %d %d MiB", nodes[0].FreeMemoryMiB, nodes[1].FreeMemoryMiB)
	}
	if runs := cellRuns(nodes); !reflect.DeepEqual(runs, [][2]int{{0, 2}}) {
		t.Errorf("runs %v", runs)
	}
	sizes := []uint32{2048, 1048576}
	if err := applyFreePages(nodes, 0, 2, sizes, []uint64{1000, 3, 512, 0}); err != nil {
		t.Fatal(err)
	}
	got := [][]HugePages{nodes[0].HugePages, nodes[1].HugePages}
	want := [][]HugePages{
		{{SizeKiB: 2048, Total: 1024, Free: 1000}, {SizeKiB: 1048576, Total: 4, Free: 3}},
		{{SizeKiB: 2048, Total: 512, Free: 512}, {SizeKiB: 1048576, Total: 0, Free: 0}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// A short answer is an error, not a silent zero.
	if err := applyFreePages(nodes, 0, 2, sizes, []uint64{1, 2, 3}); err == nil || !strings.Contains(err.Error(), "3 free page counts") {
		t.Errorf("short free pages answer: %v", err)
	}
	if err := applyFreeMemory(nodes, 0, []uint64{1}); err == nil || !strings.Contains(err.Error(), "not for cell 1") {
		t.Errorf("short free memory answer: %v", err)
	}
}

// Cells numbered with a gap (0, 1, 4) need one free-pages call per run, each
// answered for its own cells only.
func TestCellRunsWithGap(t *testing.T) {
	t.Parallel()
	nodes := []NUMANode{
		{ID: 0, HugePages: []HugePages{{SizeKiB: 2048, Total: 8}}},
		{ID: 1, HugePages: []HugePages{{SizeKiB: 2048, Total: 8}}},
		{ID: 4, HugePages: []HugePages{{SizeKiB: 2048, Total: 8}}},
	}
	runs := cellRuns(nodes)
	if !reflect.DeepEqual(runs, [][2]int{{0, 2}, {4, 1}}) {
		t.Fatalf("runs %v", runs)
	}
	sizes := hugePageSizes(nodes)
	if err := applyFreePages(nodes, runs[0][0], runs[0][1], sizes, []uint64{5, 6}); err != nil {
		t.Fatal(err)
	}
	if err := applyFreePages(nodes, runs[1][0], runs[1][1], sizes, []uint64{7}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{5, 6, 7} {
		if got := nodes[i].HugePages[0].Free; got != want {
			t.Errorf("cell %d: %d free, want %d", nodes[i].ID, got, want)
		}
	}
	// free memory from cell 0 to 4: five entries, cells 2 and 3 ignored
	if err := applyFreeMemory(nodes, 0, []uint64{1 << 20, 2 << 20, 0, 0, 5 << 20}); err != nil {
		t.Fatal(err)
	}
	if nodes[2].FreeMemoryMiB != 5 {
		t.Errorf("cell 4 free %d MiB", nodes[2].FreeMemoryMiB)
	}
}
