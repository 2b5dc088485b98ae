package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// The values of host_change.
const (
	hostChangeMove    = "move"
	hostChangeReplace = "replace"
	hostChangeLive    = "live"
)

// moveReachTimeout bounds the plan's check that the old host answers.
const moveReachTimeout = 15 * time.Second

// hostChangeReplaces makes a host change replace the VM only when
// host_change says so; a move is an in-place update.
func hostChangeReplaces(ctx context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
	var hc types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("host_change"), &hc)...)
	resp.RequiresReplace = hc.ValueString() == hostChangeReplace
}

// moving reports whether the plan moves the VM: its host changes and
// host_change does not replace it.
func moving(plan, state *vmModel) bool {
	return state != nil && !plan.Host.IsUnknown() && plan.Host.ValueString() != state.Host.ValueString() &&
		plan.HostChange.ValueString() != hostChangeReplace
}

// planMove refuses at plan a host change that cannot be a move: live
// migration (not built yet), disks Kohaku did not make, devices passed
// through, an old host that does not answer.
func (r *vmResource) planMove(ctx context.Context, plan, state *vmModel, diags *diag.Diagnostics) {
	if !moving(plan, state) {
		return
	}
	from, to := hostLabel(state.Host.ValueString()), hostLabel(plan.Host.ValueString())
	summary := fmt.Sprintf("VM %s cannot move from %s to %s", state.Name.ValueString(), from, to)
	if plan.HostChange.ValueString() == hostChangeLive {
		diags.AddAttributeError(path.Root("host_change"), summary,
			"host_change = \"live\" (migration with the guest running) is not available yet. Use \"move\" "+
				"(the default: a cold move, with a clean shutdown and a restart on the new host) or \"replace\".")
		return
	}
	if why := unmovable(ctx, state, diags); len(why) > 0 {
		diags.AddAttributeError(path.Root("host"), summary, fmt.Sprintf("A cold move brings along only what "+
			"Kohaku made and the host does not hold, and this VM has:\n\n  - %s\n\nMoves of VMs with devices "+
			"passed through are a later step of Kohaku. To move it, first remove those from the VM "+
			"(an existing volume: copy it to %s yourself and point the VM at the copy), or set "+
			"host_change = \"replace\" to destroy the VM and create it anew on %s, or keep host as it is.",
			strings.Join(why, "\n  - "), to, to))
		return
	}
	if r.data == nil {
		return
	}
	c := r.data.client(state.Host.ValueString(), diags)
	if c == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, moveReachTimeout)
	defer cancel()
	_, err := c.ReadDomain(cctx, hosts.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()})
	if _, down := hosts.Unreachable(err); down || (err != nil && cctx.Err() != nil) {
		diags.AddAttributeError(path.Root("host"), summary, fmt.Sprintf("The VM's current host %s does not "+
			"answer (%v), and a cold move copies the VM's disks from it. Bring it back and plan again; if it "+
			"is gone for good, its disks are too: remove the VM from the state (terraform state rm) and "+
			"create it anew on %s.", from, err, to))
	}
}

// unmovable says what of the VM a cold move cannot bring along.
func unmovable(ctx context.Context, m *vmModel, diags *diag.Diagnostics) []string {
	var why []string
	if d := m.disk(ctx, diags); d != nil && !d.overlay() && !d.Volume.IsNull() {
		why = append(why, fmt.Sprintf("a boot disk that is an existing volume (disk.volume = %q)", d.Volume.ValueString()))
	}
	for _, d := range m.dataDisks(ctx, diags) {
		if d.SizeGiB.IsNull() && !d.Volume.IsNull() {
			why = append(why, fmt.Sprintf("a data disk that is an existing volume (data_disks volume = %q)", d.Volume.ValueString()))
		}
	}
	for _, a := range []struct {
		name string
		set  types.Set
	}{{"gpus", m.GPUs}, {"hostdevs", m.Hostdevs}, {"mdevs", m.Mdevs}} {
		if !a.set.IsNull() && len(a.set.Elements()) > 0 {
			why = append(why, a.name+" passed through")
		}
	}
	if !m.PlacedGPUs.IsNull() && len(m.PlacedGPUs.Elements()) > 0 {
		why = append(why, "GPUs placement chose (placed_gpus)")
	}
	return why
}

func hostLabel(h string) string {
	if h == "" {
		return "the default host"
	}
	return fmt.Sprintf("host %q", h)
}

// move runs the cold move of an update whose host changes. It reports
// false after a diagnostic, with the state naming the host that holds the
// VM now.
func (r *vmResource) move(ctx context.Context, plan, state *vmModel, resp *resource.UpdateResponse) bool {
	summary := fmt.Sprintf("Moving VM %s from %s to %s", state.Name.ValueString(), hostLabel(state.Host.ValueString()), hostLabel(plan.Host.ValueString()))
	src := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	dst := r.data.client(plan.Host.ValueString(), &resp.Diagnostics)
	if src == nil || dst == nil {
		return false
	}
	grace, err := time.ParseDuration(plan.ShutdownTimeout.ValueString())
	if err != nil {
		grace, _ = time.ParseDuration(vmDefaultShutdownTimeout)
	}
	_, err = vmlife.Move(ctx, src, dst, vmlife.Moving{
		Ref:     hosts.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()},
		Overlay: volumeRef(state.OverlayVolume),
		Running: plan.Running.ValueBool(), Autostart: plan.Autostart.ValueBool(), Grace: grace,
		Wait: func(ctx context.Context, _ vmlife.Host, ref hosts.DomainRef) error {
			return waitAfterMove(ctx, dst, plan, ref, func(note string) { resp.Diagnostics.AddWarning(summary, note) })
		},
		ForcedOff: func(g time.Duration) {
			resp.Diagnostics.AddWarning(summary+": the guest was forced off", vmlife.ForcedOffNote(grace, g))
		},
		Progress: func(step string) { tflog.Info(ctx, "moving the VM", map[string]any{"step": step}) },
	})
	var me *vmlife.MoveError
	switch {
	case errors.As(err, &me):
		where := hostLabel(state.Host.ValueString())
		if me.OnTarget {
			where = hostLabel(plan.Host.ValueString())
			// The VM lives on the new host now: the state says so, and the
			// next apply finishes the move's cleanup there.
			state.Host = plan.Host
			resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
		}
		next := "Apply again to finish the move."
		switch me.Step {
		case vmlife.MoveStepStart:
			next = "Nothing of it is left on the old host. Apply again to start it there and set its autostart."
		case vmlife.MoveStepWait:
			next = "It runs there and nothing of it is left on the old host; only the wait for its guest failed."
		case vmlife.MoveStepCleanup:
			next = "Delete what is left on the old host (named above) by hand, and apply again to start it on the new one."
		}
		addError(&resp.Diagnostics, fmt.Sprintf("%s failed at step %q", summary, me.Step), me.Err,
			fmt.Sprintf("The VM is whole on %s. %s", where, next))
		return false
	case err != nil:
		addError(&resp.Diagnostics, summary, err)
		return false
	}
	state.Host = plan.Host
	return true
}

// waitAfterMove waits for the guest the move started on its new host, as
// after a reboot: wait_for = "channel" (or "auto" with a seed that has the
// reporter) waits for a heartbeat on the report channel, which the
// reporter's agent writes on every boot when the seed's
// heartbeat_interval is not 0; "guest_agent" waits until the agent reads
// cloud-init's result of this boot. The first-boot report is written once
// per instance, so a seed without heartbeats, phone_home and "none" are
// not waited for; note says why.
func waitAfterMove(ctx context.Context, h hosts.Host, plan *vmModel, ref hosts.DomainRef, note func(string)) error {
	mode := ready.Mode(plan.WaitFor.ValueString())
	var in *seed.Inspection
	if pool, vol, ok := parseVolumeID(plan.SeedID.ValueString()); ok && mode != ready.ModeNone {
		var err error
		if in, err = vmlife.InspectSeed(ctx, h, pool, vol); err != nil {
			return fmt.Errorf("reading the seed on the new host to know how to wait for the guest: %w", err)
		}
	}
	if mode == "" || mode == waitAuto {
		mode = autoWait(in)
	}
	switch {
	case mode == ready.ModeChannel && in != nil && in.ReportToken != "" && in.HeartbeatSeconds > 0:
		return vmlife.WaitReport(ctx, h, ref.Name, func(line string) { tflog.Info(ctx, line) })
	case mode == ready.ModeChannel:
		note("The move did not wait for the guest to come up on the new host: its seed's reporter writes " +
			"nothing after the first boot (heartbeat_interval = 0). Set a heartbeat_interval on the kohaku_seed, " +
			"or wait_for = \"guest_agent\", for moves that wait.")
	case mode == ready.ModeGuestAgent:
		_, err := ready.PollGuestAgent(ctx, h, ref.Name, agentPollInterval)
		return err
	case mode == ready.ModePhoneHome:
		note("The move did not wait for the guest to come up on the new host: a guest phones home once, on " +
			"its first boot. Use wait_for = \"channel\" with a seed that has heartbeats, or \"guest_agent\", " +
			"for moves that wait.")
	}
	return nil
}

// findMoved looks for a VM its state's host no longer has on the other
// hosts of the fleet: a move cut off between the define on the new host and
// the state's write leaves it there. Only a domain with the state's UUID
// counts. It returns the host's key, or false.
func (r *vmResource) findMoved(ctx context.Context, state *vmModel) (string, hosts.Host, bool) {
	if r.data == nil || state.UUID.ValueString() == "" {
		return "", nil, false
	}
	ref := hosts.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()}
	for _, name := range r.data.fleetNames() {
		if name == state.Host.ValueString() {
			continue
		}
		c, err := r.data.fleet.Host(name)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, moveReachTimeout)
		_, err = c.ReadDomain(cctx, ref)
		cancel()
		if err == nil {
			return name, c, true
		}
	}
	return "", nil, false
}
