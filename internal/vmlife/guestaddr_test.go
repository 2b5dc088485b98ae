package vmlife

import (
	"context"
	"errors"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/guestaddr"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

type fakeAgent struct {
	calls  int
	asked  virt.DomainRef
	ifaces []guestaddr.Interface
	err    error
}

func (f *fakeAgent) GuestInterfaces(_ context.Context, ref virt.DomainRef) ([]guestaddr.Interface, error) {
	f.calls++
	f.asked = ref
	return f.ifaces, f.err
}

// Only a running domain with the agent's channel is asked; what it says
// becomes the guest's addresses, and an agent that fails tells nothing.
func TestGuestAddresses(t *testing.T) {
	t.Parallel()
	ref := virt.DomainRef{UUID: "6c3f5d1e-8f0a-4a55-9d43-0b0b2f6b7a11", Name: "vm"}
	view := func(active, agent bool) *View {
		return &View{
			Status:   &virt.DomainStatus{DomainRef: ref, Active: active},
			Observed: domain.Observed{Spec: domain.Spec{NoGuestAgent: !agent}},
		}
	}
	eth := []guestaddr.Interface{
		{Name: "lo", IPs: []guestaddr.IP{{Addr: "127.0.0.1", Prefix: 8}}},
		{Name: "eth0", MAC: "52:54:00:00:00:01", IPs: []guestaddr.IP{{Addr: "10.0.2.15", Prefix: 24}}},
	}
	for _, tc := range []struct {
		name      string
		view      *View
		err       error
		wantCalls int
		wantOK    bool
	}{
		{"running with the agent", view(true, true), nil, 1, true},
		{"agent not answering", view(true, true), errors.New("QEMU guest agent is not connected"), 1, false},
		{"shut off", view(false, true), nil, 0, false},
		{"no agent channel", view(true, false), nil, 0, false},
		{"no domain", nil, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &fakeAgent{ifaces: eth, err: tc.err}
			addrs, ok := GuestAddresses(context.Background(), a, tc.view)
			if a.calls != tc.wantCalls || ok != tc.wantOK {
				t.Fatalf("%d calls, ok %v; want %d, %v", a.calls, ok, tc.wantCalls, tc.wantOK)
			}
			if !ok {
				return
			}
			if a.asked != ref {
				t.Errorf("asked %v, want %v", a.asked, ref)
			}
			if len(addrs) != 1 || addrs[0] != (guestaddr.Address{Interface: "eth0", MAC: "52:54:00:00:00:01", Address: "10.0.2.15/24"}) {
				t.Errorf("addresses %+v", addrs)
			}
		})
	}
}
