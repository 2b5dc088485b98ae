package placement

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fleet8 is eight hosts: four HGX H100 hosts, two L40S hosts and two
// CPU-only hosts.
func fleet8() *countingSource {
	return newSource(hgx("hgx1"), hgx("hgx2"), hgx("hgx3"), hgx("hgx4"), l40sHost("l40s1"), l40sHost("l40s2"), cpuHost("cpu1"), cpuHost("cpu2"))
}

// fifty is one apply's 50 VMs, which fill the fleet's GPUs exactly: 20
// pinned NUMA-local single-H100 VMs, 6 with two H100s, 8 with one L40S and
// 16 without GPUs.
func fifty() []*Request {
	var rs []*Request
	for i := range 20 {
		rs = append(rs, &Request{Name: fmt.Sprintf("h1-%d", i), GPU: h100s(1), NUMALocal: true, PinCPUs: true, VCPUs: 8, MemoryMiB: 64 << 10})
	}
	for i := range 6 {
		rs = append(rs, &Request{Name: fmt.Sprintf("h2-%d", i), GPU: h100s(2), NUMALocal: true, VCPUs: 16, MemoryMiB: 32 << 10, HugePageKiB: 2048})
	}
	for i := range 8 {
		rs = append(rs, &Request{Name: fmt.Sprintf("l-%d", i), GPU: &GPUAsk{Count: 1, Selector: Selector{Model: "L40S"}}, VCPUs: 8, MemoryMiB: 32 << 10})
	}
	for i := range 16 {
		rs = append(rs, &Request{Name: fmt.Sprintf("c-%d", i), VCPUs: 4, MemoryMiB: 8 << 10})
	}
	return rs
}

func placeAll(src *countingSource, rs []*Request) ([]*Placement, error) {
	_, ps, err := planAll(src, rs)
	return ps, err
}

func planAll(src *countingSource, rs []*Request) (*Planner, []*Placement, error) {
	pl := NewPlanner(src, src.names(), Pack)
	out := make([]*Placement, 0, len(rs))
	for _, r := range rs {
		p, err := pl.Place(context.Background(), r)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, p)
	}
	return pl, out, nil
}

func TestPlanner_fiftyVMsReadEachHostOnce(t *testing.T) {
	t.Parallel()
	src := fleet8()
	pl, ps, err := planAll(src, fifty())
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range src.reads {
		if n != 1 {
			t.Errorf("%s read %d times, want once for the apply", name, n)
		}
	}
	if len(src.reads) != 8 {
		t.Errorf("%d hosts read, want 8", len(src.reads))
	}
	perHost := map[string]int{}
	taken := map[string]bool{}
	for _, p := range ps {
		perHost[p.Host]++
		for _, g := range p.GPUs {
			k := p.Host + "/" + g.String()
			if taken[k] {
				t.Errorf("GPU %s placed twice", k)
			}
			taken[k] = true
		}
	}
	if len(taken) != 40 {
		t.Errorf("%d GPUs placed, want all 40 of the fleet", len(taken))
	}
	if perHost["cpu1"]+perHost["cpu2"] != 16 {
		t.Errorf("VMs per host %v: the 16 CPU-only VMs belong on the CPU hosts under pack", perHost)
	}
	// one more GPU VM finds nothing in this apply, and says so host by
	// host without reading any host again
	_, err = pl.Place(context.Background(), h100Req())
	var nf *NoFitError
	if !errors.As(err, &nf) || len(nf.Misses) != 8 || !strings.Contains(err.Error(), "hgx4: 0 free GPUs matching") {
		t.Fatalf("a 51st VM: %v", err)
	}
	for name, n := range src.reads {
		if n != 1 {
			t.Errorf("%s read %d times after a failed placement", name, n)
		}
	}
	// the source's hosts are untouched: a new apply's snapshot has room
	if _, err := NewPlanner(src, src.names(), Pack).Place(context.Background(), h100Req()); err != nil {
		t.Fatalf("a fresh snapshot has room: %v", err)
	}
}

func h100Req() *Request { return &Request{Name: "x", GPU: h100s(1), VCPUs: 1, MemoryMiB: 1024} }

// BenchmarkPlace50 places one apply's 50 VMs across 8 hosts (fleet8,
// fifty): each op is a whole apply's placement, reading each host once.
// It reports the cost per VM and the host reads per apply.
func BenchmarkPlace50(b *testing.B) {
	rs := fifty()
	var reads int
	b.ReportAllocs()
	for b.Loop() {
		src := fleet8()
		if _, err := placeAll(src, rs); err != nil {
			b.Fatal(err)
		}
		reads = 0
		for _, n := range src.reads {
			reads += n
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/VM")
	b.ReportMetric(float64(reads), "host-reads/apply")
	b.ReportMetric(float64(reads)/float64(len(rs)), "host-reads/VM")
}

// BenchmarkPlaceOne is the floor: one VM placed on a fresh snapshot of the
// same 8 hosts, as an apply that read capacity once per VM would pay for
// each (8 host reads per VM instead of 8 per apply).
func BenchmarkPlaceOne(b *testing.B) {
	r := fifty()[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := placeAll(fleet8(), []*Request{r}); err != nil {
			b.Fatal(err)
		}
	}
}
