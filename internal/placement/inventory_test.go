package placement

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// An H100's sysfs resource file: BAR0 16 MiB (32-bit), BAR1 128 GiB and
// BAR3 32 MiB (64-bit prefetchable), then the ROM and unset lines.
const h100Resource = `0x00000000e2000000 0x00000000e2ffffff 0x0000000000040200
0x0000220000000000 0x0000221fffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000222000000000 0x0000222001ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x00000000e3000000 0x00000000e307ffff 0x0000000000046200
`

func TestGPUsFromInventory_workstation(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "vfio", "testdata", "workstation", "*.xml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var docs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	inv, err := vfio.ParseInventory(docs)
	if err != nil {
		t.Fatal(err)
	}
	gpu := vfio.Address{Bus: 1}
	bars, err := vfio.ParseResource([]byte(h100Resource))
	if err != nil {
		t.Fatal(err)
	}
	gpus := GPUsFromInventory(inv, map[vfio.Address][]vfio.BAR{gpu: bars})
	if len(gpus) != 1 {
		t.Fatalf("GPUs %+v, want the one display function", gpus)
	}
	g := gpus[0]
	if g.Address != gpu || g.VendorID != 0x10de || g.DeviceID != 0x2204 || g.Model != "GA102 [GeForce RTX 3090]" ||
		g.NUMANode != 0 || g.Group != 13 || g.State != Free || g.MemoryGiB != 128 {
		t.Errorf("GPU %+v", g)
	}
	if want := []vfio.Address{gpu, {Bus: 1, Function: 1}}; !slices.Equal(g.GroupMembers, want) {
		t.Errorf("group members %v, want %v", g.GroupMembers, want)
	}
	if !(Selector{Model: "rtx 3090"}).Matches(&g) || (Selector{Model: "RTX 3090", ModelExact: true}).Matches(&g) {
		t.Error("model match: substring is case-insensitive, exact is whole")
	}
}

func TestMemoryGiBFromBARs(t *testing.T) {
	t.Parallel()
	if got := MemoryGiBFromBARs(nil); got != 0 {
		t.Errorf("no BARs: %d GiB", got)
	}
	small := []vfio.BAR{{Size: 256 << 20, Is64: true, Prefetchable: true}, {Size: 64 << 30, Is64: true}}
	if got := MemoryGiBFromBARs(small); got != 0 {
		t.Errorf("a 256 MiB prefetchable BAR and a non-prefetchable one: %d GiB, want 0 (unknown)", got)
	}
}
