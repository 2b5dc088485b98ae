package netpool

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// PoolLister is what listing a host's storage pools needs. *virt.Client is
// one.
type PoolLister interface {
	PoolNames(ctx context.Context) ([]string, error)
	PoolDefinition(ctx context.Context, name string) (*hostapi.Definition, error)
}

// NetworkLister is what listing a host's networks needs. *virt.Client is
// one.
type NetworkLister interface {
	NetworkNames(ctx context.Context) ([]string, error)
	NetworkDefinition(ctx context.Context, name string) (*hostapi.Definition, error)
}

// Modelled reports whether kohaku_pool models p: a directory pool. A pool of
// another type (LVM, iSCSI, a disk) is not one, since destroying a
// kohaku_pool deletes its target, which for those is a volume group or a
// disk.
func (p Pool) Modelled() bool { return p.Type == "dir" }

// Modelled reports whether kohaku_network models n: one of Modes, with
// the addresses and DHCP that mode takes (what NetworkSpec.Validate
// accepts), so an adopted network plans no change.
func (n Network) Modelled() bool {
	return slices.Contains(Modes, n.Mode) && len(n.Validate()) == 0
}

// ListPools reads every storage pool of the host whose name starts with
// prefix and that kohaku_pool models, started or not, sorted by name,
// whoever made it. A pool removed while the host is listed is left out.
func ListPools(ctx context.Context, h PoolLister, prefix string) ([]Pool, error) {
	names, err := h.PoolNames(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing storage pools: %w", err)
	}
	slices.Sort(names)
	var out []Pool
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		d, err := h.PoolDefinition(ctx, name)
		if err != nil || d == nil {
			if err != nil {
				return nil, fmt.Errorf("reading storage pool %s: %w", name, err)
			}
			continue
		}
		p, err := ParsePool(*d)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", name, err)
		}
		if p.Modelled() {
			out = append(out, p)
		}
	}
	return out, nil
}

// ListNetworks reads every network of the host whose name starts with
// prefix and that kohaku_network models, started or not, sorted by name, whoever made it, with its DHCP
// reservations sorted as state keeps them. A network removed while the
// host is listed is left out, and so is one whose XML cannot be read as a
// kohaku_network (an address that is not one).
func ListNetworks(ctx context.Context, h NetworkLister, prefix string) ([]Network, error) {
	names, err := h.NetworkNames(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing networks: %w", err)
	}
	slices.Sort(names)
	var out []Network
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		d, err := h.NetworkDefinition(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("reading network %s: %w", name, err)
		}
		if d == nil {
			continue
		}
		if n, err := ParseNetwork(*d); err == nil && n.Modelled() {
			SortHosts(n.Hosts)
			out = append(out, n)
		}
	}
	return out, nil
}
