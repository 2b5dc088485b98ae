package capacity

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost serves a workstation's PCI devices (vfio's testdata: an RTX
// 3090 and its audio function in IOMMU group 13), two NUMA nodes, claims
// and domains, and counts each call.
type fakeHost struct {
	docs    []string
	nodes   []virt.NUMANode
	vols    map[string][]byte
	domains []claim.Domain
	calls   map[string]int
}

func (f *fakeHost) CreateClaim(_ context.Context, name string, b []byte) error {
	f.calls["CreateClaim"]++
	if _, ok := f.vols[name]; ok {
		return fmt.Errorf("volume %s: %w", name, fs.ErrExist)
	}
	f.vols[name] = b
	return nil
}

func (f *fakeHost) ReadClaim(_ context.Context, name string) ([]byte, error) {
	f.calls["ReadClaim"]++
	b, ok := f.vols[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return b, nil
}

func (f *fakeHost) DeleteClaim(_ context.Context, name string) error {
	f.calls["DeleteClaim"]++
	delete(f.vols, name)
	return nil
}

func (f *fakeHost) ListClaims(context.Context) ([]string, error) {
	f.calls["ListClaims"]++
	var out []string
	for n := range f.vols {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeHost) Domains(context.Context) ([]claim.Domain, error) {
	f.calls["Domains"]++
	return f.domains, nil
}

func (f *fakeHost) NUMANodes(context.Context) ([]virt.NUMANode, error) {
	f.calls["NUMANodes"]++
	return f.nodes, nil
}

func (f *fakeHost) PCINodeDevices(context.Context) ([]string, error) {
	f.calls["PCINodeDevices"]++
	return f.docs, nil
}

type files map[string][]byte

func (m files) ReadHostFiles(_ context.Context, paths []string, _ int64) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range paths {
		if b, ok := m[p]; ok {
			out[p] = b
		}
	}
	return out, nil
}

func workstation(t *testing.T) *fakeHost {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "vfio", "testdata", "workstation", "*.xml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	f := &fakeHost{vols: map[string][]byte{}, calls: map[string]int{}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f.docs = append(f.docs, string(b))
	}
	f.nodes = []virt.NUMANode{
		{ID: 0, CPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, MemoryMiB: 32 << 10, FreeMemoryMiB: 20 << 10, FreeKnown: true, HugePages: []virt.HugePages{{SizeKiB: 2048, Total: 512, Free: 100}}},
		{ID: 1, CPUs: []int{8, 9, 10, 11, 12, 13, 14, 15}, MemoryMiB: 32 << 10, FreeMemoryMiB: 30 << 10, FreeKnown: true},
	}
	return f
}

var gpu = vfio.Address{Bus: 1}

func TestReadHost_oneReadOfEachKindAndTheGPUsState(t *testing.T) {
	t.Parallel()
	f := workstation(t)
	rec, _ := json.Marshal(claim.Record{Version: 1, Device: gpu.String(), Holder: claim.Holder{VM: "train", UUID: "u-1", Workspace: "ml"}, Token: "t", Created: time.Now()})
	f.vols[claim.VolumeName(gpu)] = rec
	f.domains = []claim.Domain{{Name: "web", UUID: "u-2", PinnedCPUs: []int{4, 5}}}
	bars := "0x00000000e2000000 0x00000000e2ffffff 0x0000000000040200\n0x0000004000000000 0x00000047ffffffff 0x000000000014220c\n"
	r := &Reader{
		Host:  func(string) (Host, error) { return f, nil },
		Files: func(string) vfio.HostFiles { return files{vfio.ResourcePath(gpu): []byte(bars)} },
	}
	h, err := r.ReadHost(context.Background(), "ws")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.GPUs) != 1 {
		t.Fatalf("GPUs %+v", h.GPUs)
	}
	g := h.GPUs[0]
	if g.State != placement.Claimed || !strings.Contains(g.Holder, "VM train (u-1) of workspace ml") || g.MemoryGiB != 32 || g.Model != "GA102 [GeForce RTX 3090]" {
		t.Errorf("GPU %+v", g)
	}
	if !slices.Equal(h.PinnedCPUs, []int{4, 5}) || len(h.Nodes) != 2 || h.Nodes[0].FreeHugePages[2048] != 100 || h.Nodes[1].FreeMemoryMiB != 30<<10 {
		t.Errorf("host %+v", h)
	}
	for _, call := range []string{"NUMANodes", "PCINodeDevices", "ListClaims", "Domains"} {
		if f.calls[call] != 1 {
			t.Errorf("%s called %d times, want once", call, f.calls[call])
		}
	}
	if f.calls["CreateClaim"]+f.calls["DeleteClaim"] != 0 {
		t.Errorf("reading capacity changed claims: %v", f.calls)
	}
}

func TestReadHost_handAttachedHeldAndQuarantined(t *testing.T) {
	t.Parallel()
	f := workstation(t)
	f.domains = []claim.Domain{{Name: "handmade", UUID: "u-9", Hostdevs: []vfio.Address{{Bus: 1, Function: 1}}}}
	r := &Reader{Host: func(string) (Host, error) { return f, nil }}
	h, err := r.ReadHost(context.Background(), "ws")
	if err != nil {
		t.Fatal(err)
	}
	if g := h.GPUs[0]; g.State != placement.InUse || g.Holder != "handmade (u-9) (given by hand, no claim)" {
		t.Errorf("hand-attached GPU: %s %q", g.State, g.Holder)
	}
	f.domains = nil
	var asked []holders.Function
	r.Held = func(_ context.Context, _ string, fns []holders.Function) ([]holders.Holder, error) {
		asked = fns
		return []holders.Holder{{Function: gpu, PID: 7, Comm: "Xorg"}}, nil
	}
	if h, err = r.ReadHost(context.Background(), "ws"); err != nil || h.GPUs[0].State != placement.HostHeld || h.GPUs[0].Holder != "process 7 (Xorg)" {
		t.Errorf("held GPU: %+v, %v", h.GPUs, err)
	}
	if len(asked) != 2 || asked[0].Address != gpu || asked[0].Driver != "nvidia" || asked[1].Driver != "snd_hda_intel" {
		t.Errorf("holders asked of %+v, want the GPU and its audio function with their drivers", asked)
	}
	r.Quarantined = func(context.Context, string) (map[vfio.Address]string, error) {
		return map[vfio.Address]string{gpu: "reset failed"}, nil
	}
	if h, err = r.ReadHost(context.Background(), "ws"); err != nil || h.GPUs[0].State != placement.Quarantined {
		t.Errorf("quarantined GPU: %+v, %v", h.GPUs, err)
	}
	r.Host = func(n string) (Host, error) { return nil, fmt.Errorf("host %s: connection refused", n) }
	if _, err := r.ReadHost(context.Background(), "ws"); err == nil {
		t.Error("an unreachable host read")
	}
}

// A GPU whose last VM could not reset it is quarantined with why, read
// from the marker in the claims pool, and the marker is not read as a
// claim.
func TestReadHost_quarantineMarkers(t *testing.T) {
	t.Parallel()
	f := workstation(t)
	hostOf := func(string) (Host, error) { return f, nil }
	from := claim.Holder{VM: "vm-old", UUID: "u-1"}
	if err := (&claim.Claimer{Host: f}).Quarantine(context.Background(), gpu, "no reset method", from); err != nil {
		t.Fatal(err)
	}
	r := &Reader{Host: hostOf, Quarantined: Markers(hostOf)}
	h, err := r.ReadHost(context.Background(), "ws")
	if err != nil {
		t.Fatal(err)
	}
	if g := h.GPUs[0]; g.State != placement.Quarantined || !strings.HasPrefix(g.Holder, "no reset method (given back by VM vm-old (u-1))") {
		t.Errorf("GPU %s %q, want quarantined with the marker's reason", g.State, g.Holder)
	}
}

func TestNode_unknownFreeMemoryCountsAll(t *testing.T) {
	t.Parallel()
	n := Node(virt.NUMANode{ID: 1, CPUs: []int{2, 3}, MemoryMiB: 4096, HugePages: []virt.HugePages{{SizeKiB: 1 << 20, Total: 2}}})
	if n.FreeMemoryMiB != 4096 || n.FreeHugePages[1<<20] != 2 || n.ID != 1 {
		t.Errorf("node %+v", n)
	}
}

// Two applies plan from the same capacity (both see the GPU free), place
// the same VM shape, and claim: the first gets the GPU, the second fails
// naming it before making anything; a third apply reads the claim and
// places nothing on that GPU.
func TestTwoAppliesPlanTheSameGPUAndOneClaimsIt(t *testing.T) {
	t.Parallel()
	f := workstation(t)
	r := &Reader{Host: func(string) (Host, error) { return f, nil }}
	req := &placement.Request{GPU: &placement.GPUAsk{Count: 1, Selector: placement.Selector{VendorID: 0x10de}}, NUMALocal: true, VCPUs: 4, MemoryMiB: 8 << 10}
	ctx := context.Background()
	plan := func(vm string) *placement.Placement {
		rq := *req
		rq.Name = vm
		p, err := placement.NewPlanner(r, []string{"ws"}, placement.Pack).Place(ctx, &rq)
		if err != nil {
			t.Fatalf("%s: %v", vm, err)
		}
		return p
	}
	pa, pb := plan("a"), plan("b")
	if pa.GPUs[0] != gpu || pb.GPUs[0] != gpu {
		t.Fatalf("placements %v and %v, want both on %s", pa.GPUs, pb.GPUs, gpu)
	}
	cl := &claim.Claimer{Host: f}
	a := claim.Holder{VM: "a", UUID: "u-a", Workspace: "one"}
	if _, err := cl.TakeAll(ctx, []claim.Device{{Address: pa.GPUs[0]}}, a); err != nil {
		t.Fatal(err)
	}
	f.domains = append(f.domains, claim.Domain{Name: "a", UUID: "u-a", Hostdevs: []vfio.Address{gpu, {Bus: 1, Function: 1}}})
	_, err := cl.TakeAll(ctx, []claim.Device{{Address: pb.GPUs[0]}}, claim.Holder{VM: "b", UUID: "u-b", Workspace: "two"})
	if err == nil || !strings.Contains(err.Error(), "0000:01:00.0 is claimed by VM a (u-a) of workspace one") {
		t.Fatalf("second apply's claim: %v", err)
	}
	_, err = placement.NewPlanner(r, []string{"ws"}, placement.Pack).Place(ctx, &placement.Request{Name: "c", GPU: req.GPU, VCPUs: 1, MemoryMiB: 1024})
	if err == nil || !strings.Contains(err.Error(), "ws: 0 free GPUs matching vendor 10de of 1 asked (in use: 0000:01:00.0 by a (u-a))") {
		t.Fatalf("third apply's placement: %v", err)
	}
}

// A fleet read reports each host in the order asked; a host that cannot be
// reached is a result with its error, and the others are read all the same.
func TestReadHosts_aHostDownLeavesTheOthers(t *testing.T) {
	t.Parallel()
	f := workstation(t)
	r := &Reader{Host: func(n string) (Host, error) {
		if n == "gpu2" {
			return nil, fmt.Errorf("dialing gpu2: connection refused")
		}
		return f, nil
	}}
	res := r.ReadHosts(context.Background(), []string{"gpu2", "ws"})
	if len(res) != 2 || res[0].Name != "gpu2" || res[0].Err == nil || res[0].Host != nil {
		t.Fatalf("down host: %+v", res)
	}
	if res[1].Name != "ws" || res[1].Err != nil || len(res[1].Host.GPUs) != 1 || res[1].Host.GPUs[0].State != placement.Free {
		t.Fatalf("up host: %+v", res[1])
	}
}
