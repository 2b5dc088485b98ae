package gpubind

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

func TestPlacedBindsTheGroupAndGivesBackWhatItMoved(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	p := Placed{Binder: Binder{Host: h}, Machine: machine{fakeHost: h}}
	target := mustAddr("0000:03:00.0")
	all, moved, err := p.BindGPU(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || !slices.Equal(all, moved) || h.drivers() != "vfio-pci,vfio-pci" {
		t.Fatalf("all %v moved %v drivers %s: want the group of two moved", all, moved, h.drivers())
	}
	// A second VM's bind of a group already on vfio-pci moves nothing, so
	// its give-back would leave it there.
	all2, moved2, err := p.BindGPU(context.Background(), target)
	if err != nil || len(all2) != 2 || len(moved2) != 0 {
		t.Fatalf("rebind: all %v moved %v err %v", all2, moved2, err)
	}
	h.users = map[string][]string{"0000:03:00.1": {"vm-a"}}
	if err := p.GiveBackGPU(context.Background(), moved); err == nil || !strings.Contains(err.Error(), "vm-a") {
		t.Fatalf("give-back while vm-a runs with it: %v", err)
	}
	if h.drivers() != "vfio-pci,vfio-pci" {
		t.Fatalf("drivers %s after a refused give-back", h.drivers())
	}
	h.users = nil
	if err := p.GiveBackGPU(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	if h.drivers() == "vfio-pci,vfio-pci" || strings.Contains(h.drivers(), "vfio-pci") {
		t.Errorf("drivers %s after give-back", h.drivers())
	}
}

func TestPlacedBindRefusesAGroupADomainUses(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.users = map[string][]string{"0000:03:00.1": {"other-vm"}}
	p := Placed{Binder: Binder{Host: h}, Machine: machine{fakeHost: h}}
	_, moved, err := p.BindGPU(context.Background(), mustAddr("0000:03:00.0"))
	var inUse *InUseError
	if !errors.As(err, &inUse) || len(moved) != 0 || strings.Contains(h.drivers(), "vfio-pci") {
		t.Fatalf("err %v moved %v drivers %s", err, moved, h.drivers())
	}
	if err := p.GiveBackGPU(context.Background(), []vfio.Address{}); err != nil {
		t.Errorf("giving back nothing: %v", err)
	}
}
