package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/guestaddr"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// Values of wait_for, on_ready_failure and on_config_mismatch.
const (
	waitAuto        = "auto"
	keepOnFailure   = "keep"
	deleteOnFailure = "destroy"
	mismatchWarn    = "warn"
	mismatchFail    = "fail"
)

// agentPollInterval is how often wait_for = "guest_agent" asks the guest.
const agentPollInterval = 2 * time.Second

var (
	guestAddressAttrTypes = map[string]attr.Type{"interface": types.StringType, "mac": types.StringType, "address": types.StringType}
	guestGPUAttrTypes     = map[string]attr.Type{"name": types.StringType, "driver_version": types.StringType, "memory_mib": types.Int64Type}
	guestRouteAttrTypes   = map[string]attr.Type{"destination": types.StringType, "gateway": types.StringType, "interface": types.StringType}
	guestAttrTypes        = map[string]attr.Type{
		"ready_via":         types.StringType,
		"seconds_to_ready":  types.Float64Type,
		"hostname":          types.StringType,
		"fqdn":              types.StringType,
		"instance_id":       types.StringType,
		"remote_address":    types.StringType,
		"ssh_host_keys":     types.MapType{ElemType: types.StringType},
		"cloud_init_status": types.StringType,
		"cloud_init_errors": types.ListType{ElemType: types.StringType},
		"addresses":         types.ListType{ElemType: types.ObjectType{AttrTypes: guestAddressAttrTypes}},
		"gpus":              types.ListType{ElemType: types.ObjectType{AttrTypes: guestGPUAttrTypes}},
		"routes":            types.ListType{ElemType: types.ObjectType{AttrTypes: guestRouteAttrTypes}},
		"dns_servers":       types.ListType{ElemType: types.StringType},
	}
)

// waitSchema holds the attributes of the readiness wait.
func waitSchema() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"wait_for": schema.StringAttribute{
			Optional: true, Computed: true,
			Default: stringdefault.StaticString(waitAuto),
			Description: "What create waits for after starting the VM, bounded by the create timeout. " +
				"`channel` reads the guest's first-boot report from the VM's `org.kohaku.report.0` " +
				"virtio-serial channel over the libvirt connection itself: it needs no network path from " +
				"the guest to Terraform and no guest agent, so it works wherever libvirt reaches " +
				"(`qemu+ssh` from a laptop, CI behind NAT, Terraform Cloud); the seed needs " +
				"`report_channel` (on by default) and the image python3 and systemd. " +
				"`phone_home` waits for the guest's HTTP call to the provider (the seed's `phone_home`; needs the provider's `phone_home` block and a network path from the guest to it). " +
				"`guest_agent` asks the QEMU guest agent, through libvirt, until cloud-init has written " +
				"`/run/cloud-init/result.json` (needs qemu-guest-agent in the image and `guest_agent = " +
				"true`; polls every 2 s). " +
				"`none` returns as soon as the domain runs. " +
				"`auto` (default) picks, in this order of preference, `channel` when the seed has the " +
				"first-boot reporter, `phone_home` when the seed phones home (the provider then needs its " +
				"`phone_home` block, or the create fails saying so), else `none`; it never picks `guest_agent`. A seed with neither (`report_channel = false`, no " +
				"`phone_home`) warns at plan that VMs using it will not wait, and a VM without `seed_id` " +
				"does not wait. A report of cloud-init errors fails the create, naming each failing module; a " +
				"degraded boot is a warning, and so is a guest that lacks something its seed declared (see " +
				"`on_config_mismatch`). " +
				"Create waits, and so does a move to another host (`host_change`), as after a reboot: " +
				"`channel` for a heartbeat (the seed's `heartbeat_interval`, not `0`), `guest_agent` as " +
				"at create; `phone_home` and `none` do not wait there. A change of `wait_for` itself is " +
				"stored without touching the VM.",
			Validators: []validator.String{stringvalidator.OneOf(waitAuto, string(ready.ModeChannel), string(ready.ModePhoneHome), string(ready.ModeGuestAgent), string(ready.ModeNone))},
		},
		"on_ready_failure": schema.StringAttribute{
			Optional: true, Computed: true,
			Default: stringdefault.StaticString(keepOnFailure),
			Description: "What happens when the wait fails (timeout, or cloud-init reports errors): `keep` " +
				"(default) keeps the VM for inspection and records it as tainted, so the next apply replaces " +
				"it; `destroy` removes the domain and the volumes this create made. Either way the error names " +
				"the VM, how it was waiting (its report channel, the phone-home URL or the guest agent), how " +
				"long it waited, what it last saw, whether the domain still runs, and the serial console: its " +
				"last lines when the host is this machine, else the log's path on the host.",
			Validators: []validator.String{stringvalidator.OneOf(keepOnFailure, deleteOnFailure)},
		},
		"on_config_mismatch": schema.StringAttribute{
			Optional: true, Computed: true,
			Default: stringdefault.StaticString(mismatchWarn),
			Description: "What create does when the guest is not configured as its seed declared. The seed's " +
				"first-boot reporter compares what the seed declared with what the guest has: each declared " +
				"address on the interface with the declared MAC (a DHCP NIC needs an address of that family), " +
				"an IPv4 and IPv6 default route via each declared gateway, the declared nameservers and search " +
				"domains in use (`/etc/resolv.conf`, or systemd-resolved's), the hostname, each shared folder " +
				"mounted, and, when the seed installs the NVIDIA driver (`nvidia_driver`), that `nvidia-smi` " +
				"reports that driver version (cloud-init goes on past a failed install, so this is where it " +
				"shows). " +
				"`warn` (default): a mismatch makes the readiness degraded, a warning that names what is missing (e.g. `no IPv4 default route via 10.0.2.2 on enp1s0 (52:54:00:12:34:56)`), and create succeeds. " +
				"`fail`: a mismatch fails the create like a cloud-init error, and `on_ready_failure` decides whether the VM is kept (tainted) or destroyed. " +
				"Applies when the seed has the first-boot reporter, whichever way its report comes (`channel`, " +
				"`phone_home`, or `guest_agent`, which reads the reporter's `/run/kohaku/report.json` too); " +
				"`wait_for = \"none\"` checks nothing, so `fail` is refused with it. Only create checks: a " +
				"change is stored without touching the VM.",
			Validators: []validator.String{stringvalidator.OneOf(mismatchWarn, mismatchFail)},
		},
		"guest": schema.SingleNestedAttribute{
			Computed:      true,
			PlanModifiers: []planmodifier.Object{objectplanmodifier.UseStateForUnknown()},
			Description: "What the guest reported when it became ready, set by create. Refresh renews `addresses` " +
				"through the guest agent where it answers; the rest stays as create recorded it. Null when create did " +
				"not wait and no agent has answered a refresh since (then only `addresses` is set once one does).",
			Attributes: map[string]schema.Attribute{
				"ready_via":        schema.StringAttribute{Computed: true, Description: "`channel`, `phone_home` or `guest_agent`."},
				"seconds_to_ready": schema.Float64Attribute{Computed: true, Description: "Seconds from starting the domain to the guest's report."},
				"hostname":         schema.StringAttribute{Computed: true, Description: "The guest's hostname."},
				"fqdn":             schema.StringAttribute{Computed: true, Description: "The guest's fully qualified name."},
				"instance_id":      schema.StringAttribute{Computed: true, Description: "The cloud-init instance id the guest booted with."},
				"remote_address":   schema.StringAttribute{Computed: true, Description: "The address the phone-home call came from (`ip:port`); empty for the other ways."},
				"ssh_host_keys":    schema.MapAttribute{Computed: true, ElementType: types.StringType, Description: "The guest's SSH host public keys by type, each `type base64`, ready for a known_hosts line."},
				"cloud_init_status": schema.StringAttribute{Computed: true, Description: "cloud-init's status as the " +
					"guest reported it (`done`, `degraded done`, ...); empty with cloud-init's own phone_home " +
					"module, which reports none."},
				"cloud_init_errors": schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "Recoverable errors cloud-init reported (warnings, deprecations)."},
				"addresses": schema.ListNestedAttribute{Computed: true, Description: "Addresses on the guest's interfaces " +
					"but loopback: as the first-boot reporter saw them, then as the guest agent tells them on each refresh " +
					"of a running VM (asked for at most 2 seconds, so an agent that does not answer never slows a plan; " +
					"the previous value stays then).",
					NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"interface": schema.StringAttribute{Computed: true, Description: "Interface name in the guest."},
						"mac":       schema.StringAttribute{Computed: true, Description: "Its MAC address."},
						"address":   schema.StringAttribute{Computed: true, Description: "Address with prefix length, e.g. `10.0.2.15/24`."},
					}}},
				"routes": schema.ListNestedAttribute{Computed: true, Description: "The guest's routes of both " +
					"families (main table, without loopback), as the first-boot reporter saw them; a default " +
					"route has destination `0.0.0.0/0` or `::/0`.",
					NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"destination": schema.StringAttribute{Computed: true, Description: "Destination prefix, e.g. `0.0.0.0/0` or `10.0.2.0/24`."},
						"gateway":     schema.StringAttribute{Computed: true, Description: "Next hop; empty for a directly connected network."},
						"interface":   schema.StringAttribute{Computed: true, Description: "Interface name in the guest."},
					}}},
				"dns_servers": schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "Nameservers the guest uses, " +
					"from `/etc/resolv.conf` or, behind systemd-resolved's stub, from resolved."},
				"gpus": schema.ListNestedAttribute{Computed: true, Description: "GPUs the guest sees through nvidia-smi (empty without the NVIDIA driver).",
					NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"name":           schema.StringAttribute{Computed: true, Description: "GPU name."},
						"driver_version": schema.StringAttribute{Computed: true, Description: "Driver version in the guest."},
						"memory_mib":     schema.Int64Attribute{Computed: true, Description: "GPU memory in MiB."},
					}}},
			},
		},
	}
}

// validateWaitConfig refuses at plan a setting that could never act:
// on_config_mismatch = "fail" with a wait that gets no report to check.
func validateWaitConfig(cfg *vmModel, diags *diag.Diagnostics) {
	if cfg.OnConfigMismatch.ValueString() != mismatchFail || cfg.WaitFor.IsUnknown() {
		return
	}
	if w := cfg.WaitFor.ValueString(); w == string(ready.ModeNone) {
		diags.AddAttributeError(path.Root("on_config_mismatch"), "Invalid on_config_mismatch",
			fmt.Sprintf("on_config_mismatch = \"fail\" fails the create when the first-boot reporter finds the "+
				"guest not configured as its seed declared, but wait_for = %q gets no such report, so nothing "+
				"would be checked. "+
				"Use wait_for = \"auto\" (or \"channel\", \"guest_agent\") with a seed that has report_channel = true, for example:\n  wait_for           = \"channel\"\n  on_config_mismatch = \"fail\"", w))
	}
}

// vmWait is a readiness wait set up before the domain starts, so that a
// guest that is quick cannot report before anyone listens.
type vmWait struct {
	mode   ready.Mode
	url    string
	token  string // the seed's report token (channel and guest agent)
	waiter *phonehome.Waiter
	// failOnMismatch turns a guest that lacks what its seed declared into
	// a failed wait (on_config_mismatch = "fail").
	failOnMismatch bool
}

func (w *vmWait) close() {
	if w != nil && w.waiter != nil {
		w.waiter.Close()
	}
}

// prepareWait resolves wait_for against the seed and registers the
// phone-home waiter. warn receives notes for the user.
func (r *vmResource) prepareWait(plan *vmModel, in *seed.Inspection, warn func(string)) (*vmWait, error) {
	mode := plan.WaitFor.ValueString()
	if mode == "" || mode == waitAuto {
		mode = string(autoWait(in))
	}
	w := &vmWait{mode: ready.Mode(mode), failOnMismatch: plan.OnConfigMismatch.ValueString() == mismatchFail}
	if in != nil {
		// The guest agent reads the reporter's report too, when there is one.
		w.token = in.ReportToken
	}
	switch w.mode {
	case ready.ModeChannel:
		if in == nil || in.ReportToken == "" {
			return nil, fmt.Errorf("wait_for = \"channel\", but seed %s has no first-boot reporter to write to "+
				"the channel: set report_channel = true (the default) or phone_home = true on the kohaku_seed, "+
				"or use wait_for = \"guest_agent\"", plan.SeedID.ValueString())
		}
		w.token = in.ReportToken
		return w, nil
	case ready.ModePhoneHome:
	default:
		return w, nil
	}
	if in == nil || in.PhoneHomeURL == "" {
		return nil, fmt.Errorf("wait_for = \"phone_home\", but seed %s does not phone home: set phone_home = true on the kohaku_seed, or use wait_for = \"channel\"", plan.SeedID.ValueString())
	}
	ph := r.data.phoneHome
	if ph == nil {
		return nil, errors.New("the seed phones home, but the provider has no phone_home block to listen with: " +
			"add phone_home = { listen_address = \"127.0.0.1:8787\", base_url = \"http://10.0.2.2:8787\" } (the " +
			"base_url the seed was made with), or set wait_for = \"channel\", \"guest_agent\" or \"none\"")
	}
	w.url = in.PhoneHomeURL
	if !phonehome.Under(w.url, ph.baseURL) {
		warn(fmt.Sprintf("The seed phones home to %s, but this provider's phone_home.base_url is %s: the call may not reach this provider.", phonehome.Redact(w.url), ph.baseURL))
	}
	waiter, err := ph.server().Register(phonehome.TokenOf(w.url))
	if err != nil {
		return nil, fmt.Errorf("listening for the guest on %s: %w", ph.listen, err)
	}
	w.waiter = waiter
	return w, nil
}

// autoWait is what wait_for = "auto" means for a seed: the channel when the
// seed has the first-boot reporter (it works wherever libvirt reaches),
// else phone home when the seed phones home (cloud-init's own phone_home
// module), else no wait.
func autoWait(in *seed.Inspection) ready.Mode {
	switch {
	case in == nil:
		return ready.ModeNone
	case in.ReportToken != "":
		return ready.ModeChannel
	case in.PhoneHomeURL != "":
		return ready.ModePhoneHome
	}
	return ready.ModeNone
}

// wait blocks until the guest is ready or ctx ends; a failed wait comes back
// as a *ready.WaitError filled with what the host can tell.
func (w *vmWait) wait(ctx context.Context, c hosts.Host, name, serialLog string) (*ready.Outcome, error) {
	var out *ready.Outcome
	var err error
	if w.mode == ready.ModeNone || w.mode == "" {
		return nil, nil
	}
	// Reports are taken only from this domain: one captured from a VM
	// this one replaced (same seed, same token) names another UUID.
	ref, err := c.LookupDomain(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading the UUID of domain %s to wait for its report: %w", name, err)
	}
	switch w.mode {
	case ready.ModePhoneHome:
		w.waiter.ExpectDomain(ref.UUID)
		out, err = ready.WaitPhoneHome(ctx, w.waiter)
	case ready.ModeGuestAgent:
		out, err = ready.PollGuestAgentReport(ctx, c, name, ref.UUID, agentPollInterval, w.token)
	case ready.ModeChannel:
		out, err = ready.WaitChannel(ctx, c, name, ref.UUID, phonehome.ReportChannel, w.token)
	default:
		return nil, nil
	}
	if out != nil {
		logReport(ctx, name, out.Report)
	}
	if err == nil {
		err = w.mismatch(name, out)
	}
	return out, ready.Story(ctx, err, c, name, w.url, serialLog, hosts.Local(c))
}

// logReport records when the guest's report came: the host's clock when it
// arrived and, from a reporter that stamps it, the guest's clock when the
// guest wrote it; transit_seconds is the difference, which includes the
// offset between the two clocks.
func logReport(ctx context.Context, vm string, rep *phonehome.Report) {
	if rep == nil {
		return
	}
	f := map[string]any{"vm": vm, "via": rep.Via, "received_at": rep.ReceivedAt.UTC().Format(time.RFC3339Nano)}
	if !rep.SentAt.IsZero() {
		f["sent_at"] = rep.SentAt.UTC().Format(time.RFC3339Nano)
	}
	if d, ok := rep.Transit(); ok {
		f["transit_seconds"] = d.Seconds()
	}
	if st := rep.CloudInit; st != nil {
		f["cloud_init_status"] = st.Status
	}
	tflog.Info(ctx, "guest report received", f)
}

// mismatch is the failed wait of on_config_mismatch = "fail" when the guest
// lacks what its seed declared; nil otherwise (create's ready.Check then
// turns a mismatch into a warning). cloud-init's own errors are left to
// ready.Check, so they are reported first.
func (w *vmWait) mismatch(name string, out *ready.Outcome) error {
	if !w.failOnMismatch || out == nil {
		return nil
	}
	if _, err := ready.Check(name, out.Report); err != nil {
		return nil //nolint:nilerr // cloud-init's own errors are ready.Check's to report, as documented
	}
	return ready.CheckDeclared(name, out.Report)
}

// guestValue turns the guest's report into the guest attribute.
func guestValue(mode ready.Mode, out *ready.Outcome) types.Object {
	rep := out.Report
	keys := map[string]attr.Value{}
	for k, v := range rep.HostKeys {
		keys[k] = types.StringValue(v)
	}
	var addrs, gpus, routes []attr.Value
	for _, a := range rep.Addresses {
		addrs = append(addrs, types.ObjectValueMust(guestAddressAttrTypes, map[string]attr.Value{
			"interface": types.StringValue(a.Interface), "mac": types.StringValue(a.MAC), "address": types.StringValue(a.Address),
		}))
	}
	for _, g := range rep.GPUs {
		gpus = append(gpus, types.ObjectValueMust(guestGPUAttrTypes, map[string]attr.Value{
			"name": types.StringValue(g.Name), "driver_version": types.StringValue(g.DriverVersion), "memory_mib": types.Int64Value(int64(g.MemoryMiB)),
		}))
	}
	for _, r := range rep.Routes {
		routes = append(routes, types.ObjectValueMust(guestRouteAttrTypes, map[string]attr.Value{
			"destination": types.StringValue(r.Destination), "gateway": types.StringValue(r.Gateway), "interface": types.StringValue(r.Interface),
		}))
	}
	status, recoverable := "", []string{}
	if st := rep.CloudInit; st != nil {
		status = st.ExtendedStatus
		if status == "" {
			status = st.Status
		}
		recoverable = append(recoverable, st.RecoverableErrors...)
	}
	sort.Strings(recoverable)
	return types.ObjectValueMust(guestAttrTypes, map[string]attr.Value{
		"ready_via":         types.StringValue(string(mode)),
		"seconds_to_ready":  types.Float64Value(out.Waited.Seconds()),
		"hostname":          types.StringValue(rep.Hostname),
		"fqdn":              types.StringValue(rep.FQDN),
		"instance_id":       types.StringValue(rep.InstanceID),
		"remote_address":    types.StringValue(rep.RemoteAddr),
		"ssh_host_keys":     types.MapValueMust(types.StringType, keys),
		"cloud_init_status": types.StringValue(status),
		"cloud_init_errors": stringList(recoverable),
		"addresses":         types.ListValueMust(types.ObjectType{AttrTypes: guestAddressAttrTypes}, addrs),
		"gpus":              types.ListValueMust(types.ObjectType{AttrTypes: guestGPUAttrTypes}, gpus),
		"routes":            types.ListValueMust(types.ObjectType{AttrTypes: guestRouteAttrTypes}, routes),
		"dns_servers":       stringList(append([]string{}, rep.DNSServers...)),
	})
}

func nullGuest() types.Object { return types.ObjectNull(guestAttrTypes) }

// guestAddressList is the guest.addresses value of addresses.
func guestAddressList(addrs []guestaddr.Address) types.List {
	vals := make([]attr.Value, 0, len(addrs))
	for _, a := range addrs {
		vals = append(vals, types.ObjectValueMust(guestAddressAttrTypes, map[string]attr.Value{
			"interface": types.StringValue(a.Interface), "mac": types.StringValue(a.MAC), "address": types.StringValue(a.Address),
		}))
	}
	return types.ListValueMust(types.ObjectType{AttrTypes: guestAddressAttrTypes}, vals)
}

// withGuestAddresses is guest with addresses read fresh (a refresh through
// the guest agent). A guest create did not wait for (null) gets an object
// with only its addresses known.
func withGuestAddresses(guest types.Object, addrs []guestaddr.Address) types.Object {
	attrs := map[string]attr.Value{
		"ready_via": types.StringNull(), "seconds_to_ready": types.Float64Null(), "hostname": types.StringNull(),
		"fqdn": types.StringNull(), "instance_id": types.StringNull(), "remote_address": types.StringNull(),
		"ssh_host_keys": types.MapNull(types.StringType), "cloud_init_status": types.StringNull(),
		"cloud_init_errors": types.ListNull(types.StringType), "dns_servers": types.ListNull(types.StringType),
		"gpus":   types.ListNull(types.ObjectType{AttrTypes: guestGPUAttrTypes}),
		"routes": types.ListNull(types.ObjectType{AttrTypes: guestRouteAttrTypes}),
	}
	if !guest.IsNull() && !guest.IsUnknown() {
		maps.Copy(attrs, guest.Attributes())
	}
	attrs["addresses"] = guestAddressList(addrs)
	return types.ObjectValueMust(guestAttrTypes, attrs)
}
