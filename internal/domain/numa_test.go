package domain

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// NUMA binding, huge pages and CPU topology round-trip through the XML,
// and the binding has the shape libvirt needs: one node as a cpuset and a
// strict memory binding; several as guest cells, each pinned to its node.
func TestNUMABuildParse(t *testing.T) {
	t.Parallel()
	base := func(name string) Spec {
		return Spec{Name: name, VCPU: 4, MemoryMiB: 1024, Kernel: "/k", Initrd: "/i"}
	}
	one := base("n1")
	one.NUMA = []NUMACell{{HostNode: 1, CPUs: "8,9,10,11,24-27"}}
	one.HugePageKiB = HugePage2MiB
	two := base("n2")
	two.NUMA = []NUMACell{{HostNode: 0, CPUs: "0-7"}, {HostNode: 1, CPUs: "8-15"}}
	two.HugePageKiB = HugePage2MiB
	topo := base("n3")
	topo.Topology = &CPUTopology{Sockets: 1, Cores: 2, Threads: 2}
	pinned := base("n4")
	pinned.NUMA = []NUMACell{{HostNode: 1, CPUs: "8-15"}}
	pinned.CPUPins, pinned.EmulatorCPUs = []int{8, 9, 10, 11}, "15"
	pinnedFlat := base("n5") // a one-node host: pinned, not bound
	pinnedFlat.CPUPins, pinnedFlat.EmulatorCPUs = []int{0, 1, 2, 3}, "7"
	cases := []struct {
		name     string
		spec     Spec
		want     []string
		wantNone []string
	}{
		{"one node", one, []string{
			`<vcpu placement="static" cpuset="8-11,24-27">4</vcpu>`,
			`<numatune><memory mode="strict" nodeset="1"></memory></numatune>`,
			`<memoryBacking><hugepages><page size="2048" unit="KiB"></page></hugepages></memoryBacking>`,
		}, []string{"<cputune>", "<numa>"}},
		{"two nodes", two, []string{
			`<vcpu placement="static" cpuset="0-15">4</vcpu>`,
			`<memory mode="strict" nodeset="0-1"></memory><memnode cellid="0" mode="strict" nodeset="0"></memnode><memnode cellid="1" mode="strict" nodeset="1"></memnode>`,
			`<vcpupin vcpu="0" cpuset="0-7"></vcpupin><vcpupin vcpu="1" cpuset="0-7"></vcpupin><vcpupin vcpu="2" cpuset="8-15"></vcpupin><vcpupin vcpu="3" cpuset="8-15"></vcpupin>`,
			`<cell id="0" cpus="0-1" memory="512" unit="MiB"></cell><cell id="1" cpus="2-3" memory="512" unit="MiB"></cell>`,
		}, nil},
		{"topology", topo, []string{`<topology sockets="1" dies="1" cores="2" threads="2"></topology>`}, []string{"numatune", "hugepages", "cpuset"}},
		{"pinned one to one on a node", pinned, []string{
			`<vcpu placement="static" cpuset="8-15">4</vcpu>`,
			`<cputune><vcpupin vcpu="0" cpuset="8"></vcpupin><vcpupin vcpu="1" cpuset="9"></vcpupin><vcpupin vcpu="2" cpuset="10"></vcpupin><vcpupin vcpu="3" cpuset="11"></vcpupin><emulatorpin cpuset="15"></emulatorpin></cputune>`,
			`<numatune><memory mode="strict" nodeset="1"></memory></numatune>`,
		}, []string{"<numa>"}},
		{"pinned, no node", pinnedFlat, []string{
			`<cputune><vcpupin vcpu="0" cpuset="0"></vcpupin><vcpupin vcpu="1" cpuset="1"></vcpupin><vcpupin vcpu="2" cpuset="2"></vcpupin><vcpupin vcpu="3" cpuset="3"></vcpupin><emulatorpin cpuset="7"></emulatorpin></cputune>`,
		}, []string{"numatune", "<numa>"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkRoundTrip(t, tc.spec, tc.want, tc.wantNone)
		})
	}
}

// checkRoundTrip builds spec, checks the XML (whitespace between tags
// ignored) has every want and no wantNone, and that it parses back to the
// normalized spec with nothing unrecognized and the same hash.
func checkRoundTrip(t *testing.T, spec Spec, want, wantNone []string) {
	t.Helper()
	doc, err := Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	flat := regexp.MustCompile(`>\s+<`).ReplaceAllString(doc, "><")
	for _, w := range want {
		if !strings.Contains(flat, w) && !strings.Contains(doc, w) {
			t.Errorf("XML lacks %s:\n%s", w, doc)
		}
	}
	for _, w := range wantNone {
		if strings.Contains(flat, w) {
			t.Errorf("XML has %s:\n%s", w, doc)
		}
	}
	o, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := Normalize(spec); !reflect.DeepEqual(o.Spec, want) {
		t.Errorf("parsed spec differs\n got: %+v\nwant: %+v", o.Spec, want)
	}
	if len(o.Unrecognized) != 0 {
		t.Errorf("Unrecognized = %q", o.Unrecognized)
	}
	if Hash(o.Spec) != Hash(spec) {
		t.Error("the parsed spec hashes differently: every refresh would redefine")
	}
}

// A placement Kohaku does not write (another numatune mode, a bare cpuset)
// is reported, not silently dropped.
func TestNUMAParseForeign(t *testing.T) {
	t.Parallel()
	for name, frag := range map[string]string{
		"interleave":  `<vcpu placement='static' cpuset='0-3'>2</vcpu><numatune><memory mode='interleave' nodeset='0-1'/></numatune>`,
		"bare cpuset": `<vcpu placement='static' cpuset='0-3'>2</vcpu>`,
	} {
		doc := `<domain type='kvm'><name>f</name><memory unit='MiB'>512</memory>` + frag + `<os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os></domain>`
		o, err := Parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Spec.NUMA) != 0 || len(o.Unrecognized) == 0 {
			t.Errorf("%s: NUMA %+v, unrecognized %q; want no binding and a note", name, o.Spec.NUMA, o.Unrecognized)
		}
	}
}

func TestNUMAValidate(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		mod  func(*Spec)
		want string
	}{
		"topology product": {func(s *Spec) { s.Topology = &CPUTopology{Sockets: 2, Cores: 2, Threads: 2} }, "cpu_topology: sockets x cores x threads is 2 x 2 x 2 = 8, not vcpu (4)"},
		"topology zero":    {func(s *Spec) { s.Topology = &CPUTopology{Sockets: 0, Cores: 4, Threads: 1} }, "must each be at least 1"},
		"odd page size":    {func(s *Spec) { s.HugePageKiB = 4096 }, "4096 KiB is not a huge page size"},
		"not whole pages":  {func(s *Spec) { s.MemoryMiB = 1000; s.HugePageKiB = HugePage1GiB }, "1000 MiB is not a whole number of 1024 MiB huge pages"},
		"cells of odd pages": {func(s *Spec) {
			s.MemoryMiB = 1026
			s.HugePageKiB = HugePage2MiB
			s.NUMA = []NUMACell{{0, "0"}, {1, "1"}}
		}, "does not split into 2 guest NUMA cells of whole 2 MiB huge pages"},
		"more cells than vcpus": {func(s *Spec) {
			s.VCPU = 1
			s.NUMA = []NUMACell{{0, "0"}, {1, "1"}}
		}, "1 vCPUs cannot be spread over 2 NUMA nodes"},
		"bad cpuset": {func(s *Spec) { s.NUMA = []NUMACell{{0, "3-1"}} }, `is not a CPU range`},
	}
	for name, c := range cases {
		s := Spec{Name: "v", VCPU: 4, MemoryMiB: 1024, Kernel: "/k", Initrd: "/i"}
		c.mod(&s)
		err := Validate(s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, c.want)
		}
	}
	ok := Spec{Name: "v", VCPU: 4, MemoryMiB: 2048, Kernel: "/k", Initrd: "/i", HugePageKiB: HugePage1GiB,
		Topology: &CPUTopology{Sockets: 1, Cores: 2, Threads: 2}, NUMA: []NUMACell{{0, "0-1"}, {1, "2-3"}}}
	if err := Validate(ok); err != nil {
		t.Errorf("valid spec refused: %v", err)
	}
}

func TestCPUSet(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0-3,8": "0-3,8", "3,1,2,0": "0-3", "0-7,^4": "0-3,5-7", "5": "5", "0,2,4": "0,2,4"} {
		c, err := ParseCPUSet(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := FormatCPUSet(c); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "1,,2", "^1", "-1"} {
		if _, err := ParseCPUSet(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
