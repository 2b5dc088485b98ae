package guestaddr

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// DefaultBound is how long a refresh waits for a guest's agent: it answers
// within milliseconds when it runs, and libvirt itself waits 5 s for one
// that does not.
const DefaultBound = 2 * time.Second

// Interface is one network interface as the guest agent lists it.
type Interface struct {
	Name string
	MAC  string
	IPs  []IP
}

// IP is an address of an interface with its prefix length.
type IP struct {
	Addr   string
	Prefix uint
}

// Address is one address as Kohaku reports it.
type Address struct {
	Interface string
	MAC       string
	Address   string // with prefix length: 10.0.2.15/24, fe80::1/64
}

// Addresses lists every address of every interface but loopback, in the
// agent's order (the guest kernel's), MACs lower-case and addresses in
// canonical form. Loopback addresses on other interfaces and text that is
// not an address are left out.
func Addresses(ifaces []Interface) []Address {
	out := []Address{}
	for _, i := range ifaces {
		if i.Name == "lo" {
			continue
		}
		for _, ip := range i.IPs {
			a, err := netip.ParseAddr(strings.TrimSpace(ip.Addr))
			if err != nil || a.IsLoopback() || int(ip.Prefix) > a.BitLen() {
				continue
			}
			out = append(out, Address{
				Interface: i.Name,
				MAC:       strings.ToLower(i.MAC),
				Address:   a.WithZone("").String() + "/" + strconv.FormatUint(uint64(ip.Prefix), 10),
			})
		}
	}
	return out
}

// Ask asks the guest agent for the guest's interfaces; ctx bounds it.
type Ask func(ctx context.Context) ([]Interface, error)

// Read asks within bound and returns the addresses, or ok false when the
// agent did not answer in time or answered with an error (not running, not
// installed, still starting): a caller keeps what it knew before. The call
// is abandoned, not waited for, at the bound.
func Read(ctx context.Context, bound time.Duration, ask Ask) (addrs []Address, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	type answer struct {
		ifaces []Interface
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		i, err := ask(ctx)
		done <- answer{i, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			return nil, false
		}
		return Addresses(a.ifaces), true
	case <-ctx.Done():
		return nil, false
	}
}
