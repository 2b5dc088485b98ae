package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Source reads one host's capacity: its NUMA nodes, GPUs with their state
// and holders, and pinned CPUs. A host that cannot be read is an error;
// the planner counts it as down, with the error as the reason.
type Source interface {
	ReadHost(ctx context.Context, name string) (*Host, error)
}

// Planner places the VMs of one apply against one snapshot of each host:
// a host is read through the Source the first time a request could go
// there, never again, and each placement is deducted from the snapshot so
// the next request sees what is left. It is not safe for concurrent use;
// an apply places its VMs one after another.
type Planner struct {
	src    Source
	fleet  []string
	policy Policy
	hosts  map[string]*Host
}

// NewPlanner makes a planner over the fleet's host names.
func NewPlanner(src Source, fleet []string, policy Policy) *Planner {
	names := slices.Clone(fleet)
	slices.Sort(names)
	return &Planner{src: src, fleet: slices.Compact(names), policy: policy, hosts: map[string]*Host{}}
}

// Snapshot returns the planner's copy of a host, reading it on first use.
// It reflects every placement made so far.
func (p *Planner) Snapshot(ctx context.Context, name string) *Host {
	if h, ok := p.hosts[name]; ok {
		return h
	}
	h, err := p.src.ReadHost(ctx, name)
	switch {
	case err != nil:
		h = &Host{Name: name, Reason: fmt.Sprintf("reading its capacity failed: %v", err)}
	case h == nil:
		h = &Host{Name: name, Reason: "its capacity reads as nothing"}
	default:
		h = h.Clone()
		h.Name = name
	}
	p.hosts[name] = h
	return h
}

// Place places r on the fleet and deducts what it takes from the
// snapshot. Requests are placed in the order they come, so the same
// requests in the same order over the same snapshot give the same answer.
func (p *Planner) Place(ctx context.Context, r *Request) (*Placement, error) {
	if err := ValidateRequest(r); err != nil {
		return nil, err
	}
	for _, name := range r.Hosts {
		if !slices.Contains(p.fleet, name) {
			return nil, &AttributeError{Attribute: "hosts", Err: fmt.Errorf("host %q is not in the provider's hosts (%s)", name, strings.Join(p.fleet, ", "))}
		}
	}
	var hosts []*Host
	for _, name := range p.fleet {
		if allowed(r, name) {
			hosts = append(hosts, p.Snapshot(ctx, name))
		}
	}
	policy := p.policy
	if r.Policy != "" {
		policy = r.Policy
	}
	pl, err := Place(r, hosts, policy)
	if err != nil {
		return nil, err
	}
	Deduct(p.hosts[pl.Host], r, pl)
	return pl, nil
}

// Deduct takes what pl gives r out of h: its GPUs become claimed by r's
// VM, its vGPU instances are used, its memory, huge pages and pinned CPUs
// are gone.
func Deduct(h *Host, r *Request, pl *Placement) {
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if slices.Contains(pl.GPUs, g.Address) {
			g.State, g.Holder = Claimed, r.Name
		}
		for _, m := range pl.Mdevs {
			if m.Parent == g.Address {
				if t := g.mdevType(m.Type); t != nil && t.Available > 0 {
					t.Available--
				}
			}
		}
	}
	for id, mib := range pl.MemoryMiB {
		nd := h.node(id)
		if nd == nil {
			continue
		}
		if r.HugePageKiB > 0 && nd.FreeHugePages != nil {
			pages := uint64(mib) << 10 / r.HugePageKiB
			nd.FreeHugePages[r.HugePageKiB] -= min(pages, nd.FreeHugePages[r.HugePageKiB])
		} else {
			nd.FreeMemoryMiB -= mib
		}
	}
	h.PinnedCPUs = append(h.PinnedCPUs, pl.CPUs...)
	slices.Sort(h.PinnedCPUs)
}

// Shared is a Planner that the resources of one provider process place
// through together: Terraform creates resources side by side, and each
// request must see what the ones before it took.
type Shared struct {
	mu sync.Mutex
	p  *Planner
}

// NewShared makes a shared planner over the fleet's host names.
func NewShared(src Source, fleet []string, policy Policy) *Shared {
	return &Shared{p: NewPlanner(src, fleet, policy)}
}

// Place places r (Planner.Place), one request at a time.
func (s *Shared) Place(ctx context.Context, r *Request) (*Placement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Place(ctx, r)
}

// Snapshots returns the planner's copies of the named hosts, reading
// those not read yet: what a plan checks a request against.
func (s *Shared) Snapshots(ctx context.Context, names []string) []*Host {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Host, 0, len(names))
	for _, n := range names {
		out = append(out, s.p.Snapshot(ctx, n).Clone())
	}
	return out
}
