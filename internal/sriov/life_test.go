package sriov

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func readOne(t *testing.T, h *host) *GPU {
	t.Helper()
	gpus, err := Read(context.Background(), h.inventory(t), h.fs)
	if err != nil || len(gpus) != 1 {
		t.Fatalf("%v, %v", gpus, err)
	}
	return &gpus[0]
}

// A fleet: two L40S hosts (one with a 12Q running), an H100 host running
// 20C, and a T4 whose VFs are not enabled.
func TestOrderPacksWithAStableTieBreak(t *testing.T) {
	busy := l40s()
	k := &kernel{fs: busy.fs}
	g := readOne(t, busy)
	ty, _ := Resolve("L40S-12Q", g.Types)
	if err := SetType(context.Background(), k, g.VFs[0].Address, ty); err != nil {
		t.Fatal(err)
	}
	for _, vf := range g.VFs[1:] { // the driver now lists only 12Q
		busy.fs.Put(CreatablePath(vf.Address), typeList("1161  : NVIDIA L40S-12Q"))
	}
	busy.fs.Put(CreatablePath(g.VFs[0].Address), typesHeader)
	cands := []Candidate{
		{Host: "b", GPU: readOne(t, l40s())},
		{Host: "a", GPU: readOne(t, l40s())},
		{Host: "c", GPU: readOne(t, busy)},
		{Host: "h100", GPU: readOne(t, h100SXM())},
		{Host: "t4", GPU: readOne(t, noFLR())},
	}
	got, err := Order("NVIDIA L40S-12Q", cands)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, c := range got {
		order = append(order, c.Host+" "+c.VF.String())
	}
	want := []string{"c 0000:3d:00.5", "a 0000:3d:00.4", "b 0000:3d:00.4"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("order %v, want %v (the GPU running 12Q first, then hosts by name)", order, want)
	}
	_, err = Order("NVIDIA L40S-24Q", cands[2:])
	var nf *NoFitError
	if !errors.As(err, &nf) || len(nf.Reasons) != 3 {
		t.Fatalf("24Q where 12Q runs: %v", err)
	}
	for _, want := range []string{"c 0000:3d:00.0: its VF 0000:3d:00.4 runs NVIDIA L40S-12Q (1161), and a GPU runs one time-sliced vGPU type at a time", "h100 0000:18:00.0: its VF 0000:18:00.4 runs NVIDIA H100XM-20C (1097)", "t4 0000:05:00.0: no VF offers vGPU types"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
