package provider

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/netpool"
)

var (
	_ resource.ResourceWithConfigure      = (*networkResource)(nil)
	_ resource.ResourceWithImportState    = (*networkResource)(nil)
	_ resource.ResourceWithValidateConfig = (*networkResource)(nil)
)

func newNetworkResource() resource.Resource { return &networkResource{} }

type networkResource struct {
	configuredResource
}

type networkModel struct {
	ID          types.String `tfsdk:"id"`
	Host        types.String `tfsdk:"host"`
	Name        types.String `tfsdk:"name"`
	Mode        types.String `tfsdk:"mode"`
	Bridge      types.String `tfsdk:"bridge"`
	IPv4Address types.String `tfsdk:"ipv4_address"`
	DHCPStart   types.String `tfsdk:"dhcp_start"`
	DHCPEnd     types.String `tfsdk:"dhcp_end"`
	IPv6Address types.String `tfsdk:"ipv6_address"`
	DHCPHosts   types.Set    `tfsdk:"dhcp_hosts"`
	Autostart   types.Bool   `tfsdk:"autostart"`
	Active      types.Bool   `tfsdk:"active"`
}

type dhcpHostModel struct {
	MAC  types.String `tfsdk:"mac"`
	IP   types.String `tfsdk:"ip"`
	Name types.String `tfsdk:"name"`
}

var dhcpHostType = types.ObjectType{AttrTypes: map[string]attr.Type{"mac": types.StringType, "ip": types.StringType, "name": types.StringType}}

var macRegexp = regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)

func (r *networkResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_network"
}

func (r *networkResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A libvirt network: a bridge the host makes, with its address and libvirt's dnsmasq for DHCP " +
			"and DNS, forwarded by NAT (`nat`), routed (`route`, or `open` without firewall rules of libvirt's) or not at all (`isolated`); or a host bridge " +
			"that already exists (`bridge`, e.g. `br0` on the LAN). Create defines the network, starts it and " +
			"marks it to start with the host, so a bare host needs no `virsh net-define`. A `kohaku_vm` joins it " +
			"with `network_interface = [{ type = \"network\", source = kohaku_network.<name>.name }]`.\n\n" +
			"DHCP reservations (`dhcp_hosts`) are added and removed on the running network one by one (libvirt's " +
			"`virNetworkUpdate`, live and in the definition): the network is not restarted and guests on it keep " +
			"their connectivity and leases. Reservations are compared with what the host has: one added by hand " +
			"shows as a change and apply removes it. A network found gone from the host is removed from state and " +
			"created again by the next apply; one found stopped shows as a change of `active`, and apply starts " +
			"it in place. A change of `host`, `name`, `mode`, `bridge` or any address or DHCP range replaces the " +
			"network (its guests lose connectivity until it is back); `dhcp_hosts` and `autostart` change in " +
			"place. Destroy stops and undefines the network.\n\n" +
			"A network made without Kohaku (libvirt's `default`, virsh net-define's) is adopted by an import by name " +
			"(`<host>/<name>` for a host of the `hosts` map) or by identity (`host` and `name`), or through the " +
			"kohaku_network list resource and `terraform query`. Adopting never redefines the network, and no later " +
			"change does: what Kohaku does not model (DNS entries, MTU, domain, port groups, a second address range) " +
			"stays as it is.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The network's id: its `name`, or `<host>/<name>` when `host` is set.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"host": schema.StringAttribute{
				Optional: true,
				Description: "Key of the provider's `hosts` map whose network this is; empty means the default " +
					"connection. A change replaces the network.",
				PlanModifiers: replace,
			},
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "The network's name on the host, as `kohaku_vm` NICs and `virsh net-list` use it. A change replaces the network.",
				Validators:    []validator.String{stringvalidator.LengthAtLeast(1), stringvalidator.NoneOf(".", "..")},
				PlanModifiers: replace,
			},
			"mode": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Default:  stringdefault.StaticString(netpool.ModeNAT),
				Description: "How the network reaches beyond the host: `nat` (guests reach out through the host's " +
					"address, the usual choice), `route` (the subnet is routed; the LAN must route it back), `isolated` " +
					"(guests reach only each other and the host), `open` (routed like `route`, but libvirt adds no firewall " +
					"rules: the host's own firewall, or none, decides; for hosts without iptables or nftables) or `bridge` (guests join the existing host bridge " +
					"named by `bridge` and get their addresses from that LAN; no addresses or DHCP here). Default: " +
					"`nat`. A change replaces the network.",
				Validators:    []validator.String{stringvalidator.OneOf(netpool.Modes...)},
				PlanModifiers: replace,
			},
			"bridge": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Description: "The host bridge. In mode `bridge`, required: the existing bridge to join, e.g. `br0`. " +
					"In the other modes, the name of the bridge libvirt makes for the network; default: one " +
					"libvirt chooses (`virbr1`, ...). At most 15 characters. A change replaces the network.",
				Validators: []validator.String{stringvalidator.LengthBetween(1, 15),
					stringvalidator.RegexMatches(regexp.MustCompile(`^[^\s/:]+$`), "must be an interface name, without spaces, / or :")},
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
			},
			"ipv4_address": schema.StringAttribute{
				Optional: true,
				Description: "The host's IPv4 address on the network with the subnet's prefix length, e.g. " +
					"`192.168.131.1/24`: the guests' gateway and DNS server. Required except in mode `bridge`, where it " +
					"must be unset. A change replaces the network.",
				Validators:    []validator.String{prefixValidator{v6: false}},
				PlanModifiers: replace,
			},
			"dhcp_start": schema.StringAttribute{
				Optional: true,
				Description: "First address of the DHCP range, inside the `ipv4_address` subnet, e.g. `192.168.131.100`. " +
					"Set with `dhcp_end`; unset (the default) means no DHCP on the network. A change replaces the network.",
				Validators:    []validator.String{addrValidator{}, stringvalidator.AlsoRequires(path.MatchRoot("dhcp_end"))},
				PlanModifiers: replace,
			},
			"dhcp_end": schema.StringAttribute{
				Optional:      true,
				Description:   "Last address of the DHCP range, inside the subnet and not before `dhcp_start`. A change replaces the network.",
				Validators:    []validator.String{addrValidator{}, stringvalidator.AlsoRequires(path.MatchRoot("dhcp_start"))},
				PlanModifiers: replace,
			},
			"ipv6_address": schema.StringAttribute{
				Optional: true,
				Description: "The host's IPv6 address on the network with its prefix length, e.g. `fd00:131::1/64`; " +
					"libvirt then announces the prefix to the guests. Default: no IPv6. A change replaces the network.",
				Validators:    []validator.String{prefixValidator{v6: true}},
				PlanModifiers: replace,
			},
			"dhcp_hosts": schema.SetNestedAttribute{
				Optional: true,
				Description: "DHCP reservations: the address (and optionally host name) the network's DHCP gives " +
					"the NIC with each MAC. Each MAC and each address at most once, inside the subnet; needs " +
					"`dhcp_start`/`dhcp_end`. Added and removed in place on the running network, without restarting it. " +
					"Default: none.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"mac": schema.StringAttribute{
						Required:    true,
						Description: "The NIC's MAC address in lower case, e.g. `52:54:00:12:34:56`.",
						Validators: []validator.String{stringvalidator.RegexMatches(macRegexp,
							"must be a MAC address in lower case, such as 52:54:00:12:34:56")},
					},
					"ip": schema.StringAttribute{
						Required:    true,
						Description: "The IPv4 address reserved for it, inside the `ipv4_address` subnet.",
						Validators:  []validator.String{addrValidator{}},
					},
					"name": schema.StringAttribute{
						Optional:    true,
						Description: "The host name DHCP gives it and the network's DNS answers for. Default: none.",
						Validators:  []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,62})$`), "must be a host name label: letters, digits and -")},
					},
				}},
			},
			"autostart": schema.BoolAttribute{
				Optional:    true,
				Computed:    true,
				Default:     booldefault.StaticBool(true),
				Description: "Whether the host starts the network at boot. Default: `true`. Changes in place.",
			},
			"active": schema.BoolAttribute{
				Computed: true,
				Default:  booldefault.StaticBool(true),
				Description: "Whether the network is started, as the last refresh found it. Always planned `true`: a " +
					"network stopped behind Terraform's back shows as a change, and apply starts it again.",
			},
		},
	}
}

// ValidateConfig refuses, at plan time and on the attribute at fault, what
// no single attribute's validator can see: DHCP ranges and reservations
// outside the subnet, duplicates, a bridge mode without a bridge.
func (r *networkResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m networkModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !req.Config.Raw.IsFullyKnown() {
		return
	}
	if m.Mode.IsNull() {
		m.Mode = types.StringValue(netpool.ModeNAT)
	}
	s, ok := networkSpec(ctx, m, &diag.Diagnostics{})
	if !ok {
		return // each attribute's own validator says what is wrong
	}
	for _, p := range s.Validate() {
		resp.Diagnostics.AddAttributeError(path.Root(p.Attribute), "Invalid network", p.Msg)
	}
}

// networkSpec converts the model; false (with errors in diags) when a
// value does not parse.
func networkSpec(ctx context.Context, m networkModel, diags *diag.Diagnostics) (netpool.NetworkSpec, bool) {
	s := netpool.NetworkSpec{Name: m.Name.ValueString(), Mode: m.Mode.ValueString(), Bridge: m.Bridge.ValueString(), Autostart: m.Autostart.ValueBool()}
	if m.Autostart.IsNull() || m.Autostart.IsUnknown() {
		s.Autostart = true
	}
	ok := true
	parse := func(v types.String, what string, fn func(string) error) {
		if v.IsNull() || v.IsUnknown() {
			return
		}
		if err := fn(v.ValueString()); err != nil {
			diags.AddAttributeError(path.Root(what), "Invalid network", err.Error())
			ok = false
		}
	}
	parse(m.IPv4Address, "ipv4_address", func(v string) (err error) { s.IPv4, err = netip.ParsePrefix(v); return })
	parse(m.IPv6Address, "ipv6_address", func(v string) (err error) { s.IPv6, err = netip.ParsePrefix(v); return })
	parse(m.DHCPStart, "dhcp_start", func(v string) (err error) { s.DHCPStart, err = netip.ParseAddr(v); return })
	parse(m.DHCPEnd, "dhcp_end", func(v string) (err error) { s.DHCPEnd, err = netip.ParseAddr(v); return })
	var hosts []dhcpHostModel
	diags.Append(m.DHCPHosts.ElementsAs(ctx, &hosts, false)...)
	for _, h := range hosts {
		ip, err := netip.ParseAddr(h.IP.ValueString())
		if err != nil {
			diags.AddAttributeError(path.Root("dhcp_hosts"), "Invalid network", err.Error())
			ok = false
			continue
		}
		s.Hosts = append(s.Hosts, netpool.DHCPHost{MAC: h.MAC.ValueString(), IP: ip, Name: h.Name.ValueString()})
	}
	netpool.SortHosts(s.Hosts)
	return s, ok && !diags.HasError()
}

// setNetworkState records what the host has.
func setNetworkState(ctx context.Context, m *networkModel, n netpool.Network, diags *diag.Diagnostics) {
	m.ID = types.StringValue(hostScopedID(m.Host.ValueString(), n.Name))
	m.Name = types.StringValue(n.Name)
	m.Mode = types.StringValue(n.Mode)
	m.Bridge = optString(n.Bridge)
	m.IPv4Address = samePrefix(m.IPv4Address, n.IPv4)
	m.IPv6Address = samePrefix(m.IPv6Address, n.IPv6)
	m.DHCPStart, m.DHCPEnd = optAddr(n.DHCPStart), optAddr(n.DHCPEnd)
	m.Autostart = types.BoolValue(n.Autostart)
	m.Active = types.BoolValue(n.Active)
	if len(n.Hosts) == 0 && (m.DHCPHosts.IsNull() || m.DHCPHosts.IsUnknown()) {
		m.DHCPHosts = types.SetNull(dhcpHostType)
		return
	}
	hosts := make([]dhcpHostModel, 0, len(n.Hosts))
	for _, h := range n.Hosts {
		hosts = append(hosts, dhcpHostModel{MAC: types.StringValue(h.MAC), IP: types.StringValue(h.IP.String()), Name: optString(h.Name)})
	}
	var d diag.Diagnostics
	m.DHCPHosts, d = types.SetValueFrom(ctx, dhcpHostType, hosts)
	diags.Append(d...)
}

func optString(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

func optPrefix(p netip.Prefix) types.String {
	if !p.IsValid() {
		return types.StringNull()
	}
	return types.StringValue(p.String())
}

// samePrefix is the host's prefix, in the spelling of prior when it is the
// same one (fd00:131:0::1/64 stays as written).
func samePrefix(prior types.String, p netip.Prefix) types.String {
	if q, err := netip.ParsePrefix(prior.ValueString()); err == nil && q == p {
		return prior
	}
	return optPrefix(p)
}

func optAddr(a netip.Addr) types.String {
	if !a.IsValid() {
		return types.StringNull()
	}
	return types.StringValue(a.String())
}

// networkHost is the network host of the model's host; nil (with the error
// in diags) when the host cannot be reached.
func (r *networkResource) networkHost(m networkModel, diags *diag.Diagnostics) netpool.NetworkHost {
	if c := r.data.client(m.Host.ValueString(), diags); c != nil {
		return c
	}
	return nil
}

func (r *networkResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.apply(ctx, req.Plan, &resp.State, &resp.Diagnostics, "Creating", netpool.CreateNetwork)
}

// Update changes the reservations and autostart in place and starts a
// network found stopped; every other attribute replaces the network.
func (r *networkResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.apply(ctx, req.Plan, &resp.State, &resp.Diagnostics, "Updating", netpool.UpdateNetwork)
}

type stateSetter interface {
	Set(context.Context, any) diag.Diagnostics
}

func (r *networkResource) apply(ctx context.Context, from modelGetter, state stateSetter,
	diags *diag.Diagnostics, verb string, op func(context.Context, netpool.NetworkHost, netpool.NetworkSpec) (netpool.Network, error)) {
	var plan networkModel
	diags.Append(from.Get(ctx, &plan)...)
	if diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, netpoolTimeout)
	defer cancel()
	s, ok := networkSpec(ctx, plan, diags)
	if !ok {
		return
	}
	h := r.networkHost(plan, diags)
	if h == nil {
		return
	}
	n, err := op(ctx, h, s)
	if err != nil {
		addError(diags, fmt.Sprintf("%s network %s failed", verb, s.Name), err)
		return
	}
	setNetworkState(ctx, &plan, n, diags)
	diags.Append(state.Set(ctx, &plan)...)
}

func (r *networkResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state networkModel
	h := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if h == nil {
		return
	}
	n, err := netpool.ReadNetwork(ctx, h, state.Name.ValueString())
	if !foundOnHost(ctx, resp, "network", state.Name.ValueString(), n != nil, err) {
		return
	}
	setNetworkState(ctx, &state, *n, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *networkResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state networkModel
	h := r.data.modelClient(ctx, req.State, &state, &state.Host, &resp.Diagnostics)
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, netpoolTimeout)
	defer cancel()
	if err := netpool.DeleteNetwork(ctx, h, state.Name.ValueString()); err != nil {
		addError(&resp.Diagnostics, "Removing network "+state.Name.ValueString()+" failed", err)
	}
}

func (r *networkResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, "network", "lab", req, resp)
}

// prefixValidator checks an address with prefix length of one family, such
// as 192.168.131.1/24.
type prefixValidator struct{ v6 bool }

var _ validator.String = prefixValidator{}

func (v prefixValidator) Description(context.Context) string {
	if v.v6 {
		return "must be an IPv6 address with a prefix length, such as fd00:131::1/64"
	}
	return "must be an IPv4 address with a prefix length, such as 192.168.131.1/24"
}

func (v prefixValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v prefixValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	raw := req.ConfigValue.ValueString()
	p, err := netip.ParsePrefix(raw)
	if err == nil && p.Addr().Is6() == v.v6 && !p.Addr().Is4In6() && p.Addr().Zone() == "" {
		return
	}
	msg := v.Description(ctx)
	if err != nil && !strings.Contains(raw, "/") {
		msg += " (the prefix length is missing)"
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Invalid address", fmt.Sprintf("%q %s", raw, msg))
}

// addrValidator checks an IPv4 address.
type addrValidator struct{}

var _ validator.String = addrValidator{}

func (addrValidator) Description(context.Context) string {
	return "must be an IPv4 address, such as 192.168.131.10"
}

func (v addrValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v addrValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if a, err := netip.ParseAddr(req.ConfigValue.ValueString()); err == nil && a.Is4() {
		return
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Invalid address", fmt.Sprintf("%q %s", req.ConfigValue.ValueString(), v.Description(ctx)))
}
