package vmlife

import (
	"context"

	"github.com/kohaku/terraform-provider-kohaku/internal/guestaddr"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// GuestAgent asks a domain's QEMU guest agent for the guest's interfaces;
// *virt.Client is one.
type GuestAgent interface {
	GuestInterfaces(ctx context.Context, ref hostapi.DomainRef) ([]guestaddr.Interface, error)
}

// GuestAddresses reads the guest's addresses fresh through its agent, for a
// refresh: only a running domain that has the agent's channel is asked (a
// stopped one, or one without the channel, costs no call), and the asking
// is bounded by guestaddr.DefaultBound. ok false means there is nothing
// fresh to tell: the caller keeps what it had.
func GuestAddresses(ctx context.Context, a GuestAgent, view *View) (addrs []guestaddr.Address, ok bool) {
	if view == nil || view.Status == nil || !view.Status.Active || view.Observed.Spec.NoGuestAgent {
		return nil, false
	}
	ref := view.Status.DomainRef
	return guestaddr.Read(ctx, guestaddr.DefaultBound, func(ctx context.Context) ([]guestaddr.Interface, error) {
		return a.GuestInterfaces(ctx, ref)
	})
}
