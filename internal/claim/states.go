package claim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Annotate sets the State and Holder of a host's GPUs from what holds
// them, each GPU by any function of its IOMMU group:
//
//   - quarantined (a GPU that could not be reset, with why) first;
//   - then in use: a domain has a function as a hostdev. The holder is
//     the domain, and "(given by hand, no claim)" when no claim names it:
//     a GPU attached with virsh counts as taken;
//   - then claimed: a claim names a VM. A stale claim (its VM's domain is
//     gone and it is older than StaleAfter) leaves the GPU free, with the
//     holder saying the claim will be taken over;
//   - then held by a host process (a CUDA job, nvidia-persistenced);
//   - free otherwise.
//
// claims, doms and held are what List, Host.Domains and holders.Find
// returned for the host.
func (c *Claimer) Annotate(gpus []placement.GPU, claims []Record, doms []Domain, held []holders.Holder, quarantined map[vfio.Address]string) {
	claimOf := map[vfio.Address]*Record{}
	for i := range claims {
		claimOf[claims[i].Address()] = &claims[i]
	}
	for i := range gpus {
		g := &gpus[i]
		fns := g.GroupMembers
		if !slices.Contains(fns, g.Address) {
			fns = append(slices.Clone(fns), g.Address)
		}
		g.State, g.Holder = placement.Free, ""
		if why, ok := quarantined[g.Address]; ok {
			g.State, g.Holder = placement.Quarantined, why
			continue
		}
		rec := claimOf[g.Address]
		if dom := domainWith(doms, fns); dom != nil {
			g.State, g.Holder = placement.InUse, fmt.Sprintf("%s (%s)", dom.Name, dom.UUID)
			if rec == nil || !strings.EqualFold(rec.UUID, dom.UUID) {
				g.Holder += " (given by hand, no claim)"
			}
			continue
		}
		if rec != nil {
			if c.Stale(rec, doms) {
				g.Holder = fmt.Sprintf("stale claim of %s, to be taken over", rec.Holder)
			} else {
				g.State, g.Holder = placement.Claimed, rec.String()
			}
			if g.State == placement.Claimed {
				continue
			}
		}
		if hs := heldBy(held, fns); len(hs) > 0 {
			g.State, g.Holder = placement.HostHeld, strings.Join(hs, ", ")
		}
	}
}

func domainWith(doms []Domain, fns []vfio.Address) *Domain {
	for i := range doms {
		for _, a := range doms[i].Hostdevs {
			if slices.Contains(fns, a) {
				return &doms[i]
			}
		}
	}
	return nil
}

func heldBy(held []holders.Holder, fns []vfio.Address) []string {
	var out []string
	for _, h := range held {
		if !slices.Contains(fns, h.Function) {
			continue
		}
		s := fmt.Sprintf("process %d (%s)", h.PID, h.Comm)
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
