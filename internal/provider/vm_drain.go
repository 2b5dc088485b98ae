package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
)

// drainedReason is what placement says of a drained host.
const drainedReason = "drained (drain = true in the provider's configuration): it takes no new placed VMs"

// drained reports whether the provider drains host ("" the default host).
func (pd *providerData) drained(host string) bool {
	return pd != nil && pd.drain[host]
}

// drainSource is a capacity source that reads a drained host as not
// schedulable, so that placement never chooses it.
type drainSource struct {
	placement.Source
	drain map[string]bool
}

func (s drainSource) ReadHost(ctx context.Context, name string) (*placement.Host, error) {
	h, err := s.Source.ReadHost(ctx, name)
	if err == nil && h != nil && s.drain[name] {
		h.Schedulable, h.Reason = false, drainedReason
	}
	return h, err
}

// planDrain plans a placed VM on a drained host: moved to the first host
// by name, among the others its request allows, that fits it, shown as a change of host
// with a warning saying why; or, when it cannot move (devices passed
// through, disks Kohaku did not make, NUMA-local or pinned placement, no
// other host that fits), kept where it is with a warning saying why.
// handled is false when the VM's host is not drained.
func (r *vmResource) planDrain(ctx context.Context, plan, state *vmModel, req *placement.Request, resp *resource.ModifyPlanResponse) (handled bool) {
	if state == nil || state.PlacedGPUs.IsNull() || !r.data.drained(state.Host.ValueString()) || !plan.Host.Equal(state.Host) {
		return false
	}
	from := hostLabel(state.Host.ValueString())
	stay := func(why string) bool {
		resp.Diagnostics.AddAttributeWarning(path.Root("host"), fmt.Sprintf("VM %s stays on drained %s", plan.Name.ValueString(), from),
			why+" Move it yourself (set placement.hosts, or replace it), or undo the drain.")
		return true
	}
	if plan.HostChange.ValueString() == hostChangeReplace {
		return stay("host_change = \"replace\": Kohaku moves a VM off a drained host only where host_change allows a move.")
	}
	if why := unmovable(ctx, state, &resp.Diagnostics); len(why) > 0 {
		return stay("A cold move cannot bring along its " + strings.Join(why, ", ") + ".")
	}
	if req.NUMALocal || req.PinCPUs {
		return stay("Its placement binds it to a NUMA node (numa_local or pin_cpus) of this host, which a move does not carry over.")
	}
	other := *req
	other.Hosts = nil
	allowed := req.Hosts
	if len(allowed) == 0 {
		allowed = r.data.fleetNames()
	}
	for _, h := range allowed {
		if !r.data.drained(h) {
			other.Hosts = append(other.Hosts, h)
		}
	}
	if len(other.Hosts) == 0 {
		return stay("Every host its placement allows is drained.")
	}
	// The first host by name that fits: a choice that the plan made at
	// apply (Terraform plans each resource again then) repeats, whatever
	// else the apply places meanwhile.
	slices.Sort(other.Hosts)
	var to string
	var misses []string
	for _, h := range other.Hosts {
		snap := r.data.planner().Snapshots(ctx, []string{h})[0]
		one := other
		one.Hosts = []string{h}
		if _, err := placement.Place(&one, []*placement.Host{snap.Clone()}, placement.Pack); err != nil {
			misses = append(misses, err.Error())
			continue
		}
		to = h
		break
	}
	if len(misses) == len(other.Hosts) {
		return stay("No other host can take it now: " + strings.Join(misses, "; ") + ".")
	}
	plan.Host = types.StringValue(to)
	resp.Diagnostics.AddAttributeWarning(path.Root("host"), fmt.Sprintf("VM %s moves off drained %s", plan.Name.ValueString(), from),
		fmt.Sprintf("%s is drained, so the plan moves the VM to %s (chosen by its placement among %s): a cold move, "+
			"with a clean shutdown, its disks copied and a restart there, as a change of host does.",
			strings.ToUpper(from[:1])+from[1:], hostLabel(to), strings.Join(quoted(other.Hosts), ", ")))
	return true
}

func quoted(hs []string) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%q", h)
	}
	slices.Sort(out)
	return out
}
