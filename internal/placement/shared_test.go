package placement

import (
	"context"
	"slices"
	"sync"
	"testing"
)

func TestShared_requestPolicyOverridesThePlannersAndEachHostIsReadOnce(t *testing.T) {
	t.Parallel()
	src := newSource(hgx("hgx-a"), hgx("hgx-b"))
	sh := NewShared(src, []string{"hgx-a", "hgx-b"}, Pack)
	var hosts []string
	for i, pol := range []Policy{Spread, Spread, "", Pack} {
		p, err := sh.Place(context.Background(), &Request{Name: "vm" + string(rune('0'+i)), GPU: h100s(1), VCPUs: 4, MemoryMiB: 8 << 10, Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, p.Host)
	}
	// spread: a (tie), then b (emptier); pack (planner's and asked): the fuller, a then a
	if want := []string{"hgx-a", "hgx-b", "hgx-a", "hgx-a"}; !slices.Equal(hosts, want) {
		t.Errorf("placed on %v, want %v", hosts, want)
	}
	snaps := sh.Snapshots(context.Background(), []string{"hgx-b"})
	if len(snaps) != 1 || snaps[0].Name != "hgx-b" {
		t.Fatalf("snapshots %v", snaps)
	}
	claimed := 0
	for _, g := range snaps[0].GPUs {
		if g.State == Claimed {
			claimed++
		}
	}
	if claimed != 1 {
		t.Errorf("hgx-b's snapshot shows %d claimed GPUs, want the 1 placed there", claimed)
	}
	if src.reads["hgx-a"] != 1 || src.reads["hgx-b"] != 1 {
		t.Errorf("reads %v, want each host once", src.reads)
	}
}

func TestShared_concurrentPlacementsNeverShareAGPU(t *testing.T) {
	t.Parallel()
	sh := NewShared(newSource(hgx("hgx-a")), []string{"hgx-a"}, Pack)
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := sh.Place(context.Background(), &Request{Name: "vm" + string(rune('a'+i)), GPU: h100s(1), VCPUs: 1, MemoryMiB: 1024})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, g := range p.GPUs {
				if seen[g.String()] {
					t.Errorf("GPU %s placed twice", g)
				}
				seen[g.String()] = true
			}
		}()
	}
	wg.Wait()
	if len(seen) != 8 {
		t.Errorf("%d GPUs placed, want 8", len(seen))
	}
}
