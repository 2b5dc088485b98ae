package claim

import (
	"context"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

func TestAnnotate(t *testing.T) {
	t.Parallel()
	f := newFake()
	clk := newClock(t0)
	c := claimer(f, clk)
	a := func(bus uint8) vfio.Address { return vfio.Address{Bus: bus} }
	fn1 := func(bus uint8) vfio.Address { return vfio.Address{Bus: bus, Function: 1} }
	var gpus []placement.GPU
	for _, b := range []uint8{1, 2, 3, 4, 5, 6, 7, 8} {
		gpus = append(gpus, placement.GPU{Address: a(b), GroupMembers: []vfio.Address{a(b), fn1(b)}, State: placement.Claimed, Holder: "old"})
	}
	ctx := context.Background()
	for _, x := range []struct {
		bus uint8
		h   Holder
	}{{2, holder(2)}, {3, holder(3)}, {4, holder(4)}, {8, holder(8)}} {
		if _, err := c.Take(ctx, Device{Address: a(x.bus)}, x.h); err != nil {
			t.Fatal(err)
		}
	}
	clk.set(t0.Add(time.Hour)) // claims without domains are stale now
	claims, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	doms := []Domain{
		{Name: "vm-2", UUID: holder(2).UUID, Hostdevs: []vfio.Address{a(2), fn1(2)}},
		{Name: "vm-3", UUID: holder(3).UUID},
		{Name: "handmade", UUID: "u-hand", Hostdevs: []vfio.Address{fn1(5)}},
	}
	held := []holders.Holder{{Function: fn1(6), PID: 42, Comm: "python3"}, {Function: a(6), PID: 42, Comm: "python3"}, {Function: a(8), PID: 7, Comm: "nvidia-persiste"}}
	c.Annotate(gpus, claims, doms, held, map[vfio.Address]string{a(7): "reset failed after vm-x"})
	want := []struct {
		state  placement.State
		holder string
	}{
		{placement.Free, ""},
		{placement.InUse, "vm-2 (" + holder(2).UUID + ")"},
		{placement.Claimed, holder(3).String()},
		{placement.Free, "stale claim of " + holder(4).String() + ", to be taken over"},
		{placement.InUse, "handmade (u-hand) (given by hand, no claim)"},
		{placement.HostHeld, "process 42 (python3)"},
		{placement.Quarantined, "reset failed after vm-x"},
		{placement.HostHeld, "process 7 (nvidia-persiste)"},
	}
	for i, w := range want {
		if gpus[i].State != w.state || gpus[i].Holder != w.holder {
			t.Errorf("GPU %s: %s %q, want %s %q", gpus[i].Address, gpus[i].State, gpus[i].Holder, w.state, w.holder)
		}
	}
}
