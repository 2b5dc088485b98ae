package provider

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/guestaddr"
	"github.com/kohaku/terraform-provider-kohaku/internal/health"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

var _ datasource.DataSourceWithConfigure = (*vmHealthDataSource)(nil)

func newVMHealthDataSource() datasource.DataSource { return &vmHealthDataSource{} }

type vmHealthDataSource struct {
	configuredDataSource
}

// defaultHealthTimeout bounds a read: a reporting guest answers within a
// second of the channel being opened.
const defaultHealthTimeout = 15 * time.Second

type vmHealthModel struct {
	Host               types.String  `tfsdk:"host"`
	Name               types.String  `tfsdk:"name"`
	Timeout            types.String  `tfsdk:"timeout"`
	AllowSilent        types.Bool    `tfsdk:"allow_silent"`
	Reporting          types.Bool    `tfsdk:"reporting"`
	ReportedAt         types.String  `tfsdk:"reported_at"`
	AgeSeconds         types.Float64 `tfsdk:"age_seconds"`
	Sequence           types.Int64   `tfsdk:"sequence"`
	IntervalSeconds    types.Int64   `tfsdk:"interval_seconds"`
	InstanceID         types.String  `tfsdk:"instance_id"`
	Hostname           types.String  `tfsdk:"hostname"`
	UptimeSeconds      types.Int64   `tfsdk:"uptime_seconds"`
	LoadAverage        types.List    `tfsdk:"load_average"`
	CPUs               types.Int64   `tfsdk:"cpus"`
	MemoryTotalMiB     types.Int64   `tfsdk:"memory_total_mib"`
	MemoryAvailableMiB types.Int64   `tfsdk:"memory_available_mib"`
	DiskTotalMiB       types.Int64   `tfsdk:"disk_total_mib"`
	DiskFreeMiB        types.Int64   `tfsdk:"disk_free_mib"`
	CloudInitStatus    types.String  `tfsdk:"cloud_init_status"`
	GPUs               types.List    `tfsdk:"gpus"`
	AgentCPUSeconds    types.Float64 `tfsdk:"agent_cpu_seconds"`
	AgentStartedAt     types.String  `tfsdk:"agent_started_at"`
	HeartbeatBytes     types.Int64   `tfsdk:"heartbeat_bytes"`
	Addresses          types.List    `tfsdk:"addresses"`
}

var healthGPUType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"index":               types.Int64Type,
	"name":                types.StringType,
	"driver_version":      types.StringType,
	"utilization_percent": types.Float64Type,
	"memory_used_mib":     types.Int64Type,
	"memory_total_mib":    types.Int64Type,
	"temperature_c":       types.Float64Type,
	"power_watts":         types.Float64Type,
}}

func (d *vmHealthDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vm_health"
}

func (d *vmHealthDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A VM's live health, read from its guest over the libvirt connection: the latest heartbeat " +
			"of the health agent that `kohaku_seed` installs (`heartbeat_interval`), written to the VM's " +
			"`org.kohaku.report.0` channel. No network path to the guest is needed, so it works over every " +
			"transport and for hosts of the provider's `hosts` map. " +
			"The guest writes a heartbeat as soon as the channel is opened, so a read takes about a second; the " +
			"values are the guest's own view (its memory, load, disk, GPUs), telemetry rather than " +
			"configuration: `kohaku_vm` never shows them as changes. A guest that sends nothing within " +
			"`timeout` fails the read with a diagnostic, or with `allow_silent` gives `reporting = false` " +
			"and nulls.",
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:    true,
				Description: "Key of the provider's `hosts` map the VM is on. Empty means the provider's default connection.",
			},
			"name": schema.StringAttribute{
				Required:    true,
				Description: "Name of the VM's domain, e.g. `kohaku_vm.gpu.name`.",
			},
			"timeout": schema.StringAttribute{
				Optional:    true,
				Validators:  []validator.String{positiveDuration},
				Description: "How long to wait for a heartbeat, a Go duration. Default `15s`.",
			},
			"allow_silent": schema.BoolAttribute{
				Optional: true,
				Description: "When the VM sends no heartbeat within `timeout` (or is not running), give " +
					"`reporting = false` and null values instead of an error. Default `false`. A VM that does " +
					"not exist is an error either way.",
			},
			"reporting":   schema.BoolAttribute{Computed: true, Description: "Whether a heartbeat arrived."},
			"reported_at": schema.StringAttribute{Computed: true, Description: "When the guest wrote the heartbeat, by the guest's clock (RFC 3339)."},
			"age_seconds": schema.Float64Attribute{Computed: true, Description: "How old the heartbeat was " +
				"when it was read: the provider's clock against the guest's (0 when the guest's clock is ahead)."},
			"sequence":             schema.Int64Attribute{Computed: true, Description: "Number of the heartbeat since the agent started."},
			"interval_seconds":     schema.Int64Attribute{Computed: true, Description: "The agent's heartbeat interval (the seed's `heartbeat_interval`)."},
			"instance_id":          schema.StringAttribute{Computed: true, Description: "cloud-init instance id the guest runs as."},
			"hostname":             schema.StringAttribute{Computed: true, Description: "The guest's hostname."},
			"uptime_seconds":       schema.Int64Attribute{Computed: true, Description: "Seconds since the guest booted."},
			"load_average":         schema.ListAttribute{Computed: true, ElementType: types.Float64Type, Description: "Load averages over 1, 5 and 15 minutes."},
			"cpus":                 schema.Int64Attribute{Computed: true, Description: "CPUs online in the guest."},
			"memory_total_mib":     schema.Int64Attribute{Computed: true, Description: "Memory the guest kernel manages (MemTotal), MiB: a little below the VM's `memory_mib`."},
			"memory_available_mib": schema.Int64Attribute{Computed: true, Description: "Memory available to new work (MemAvailable), MiB."},
			"disk_total_mib":       schema.Int64Attribute{Computed: true, Description: "Size of the guest's root file system, MiB."},
			"disk_free_mib":        schema.Int64Attribute{Computed: true, Description: "Space left on the root file system for unprivileged users, MiB."},
			"cloud_init_status":    schema.StringAttribute{Computed: true, Description: "`done`, `error` (cloud-init finished with errors) or `running`."},
			"gpus": schema.ListNestedAttribute{
				Computed:    true,
				Description: "Each GPU as `nvidia-smi` in the guest reports it; empty without the NVIDIA driver. A value `nvidia-smi` cannot give (`[N/A]`) is -1.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"index":               schema.Int64Attribute{Computed: true, Description: "nvidia-smi's index."},
					"name":                schema.StringAttribute{Computed: true, Description: "Product name."},
					"driver_version":      schema.StringAttribute{Computed: true, Description: "Driver version in the guest."},
					"utilization_percent": schema.Float64Attribute{Computed: true, Description: "GPU utilization, percent."},
					"memory_used_mib":     schema.Int64Attribute{Computed: true, Description: "GPU memory in use, MiB."},
					"memory_total_mib":    schema.Int64Attribute{Computed: true, Description: "GPU memory, MiB."},
					"temperature_c":       schema.Float64Attribute{Computed: true, Description: "GPU temperature, degrees Celsius."},
					"power_watts":         schema.Float64Attribute{Computed: true, Description: "Power draw, watts."},
				}},
			},
			"agent_cpu_seconds": schema.Float64Attribute{Computed: true, Description: "CPU time the health agent has used in the guest since it started: what the heartbeats cost the guest."},
			"agent_started_at":  schema.StringAttribute{Computed: true, Description: "When the agent started, by the guest's clock (RFC 3339)."},
			"heartbeat_bytes":   schema.Int64Attribute{Computed: true, Description: "Size of the heartbeat line as written, bytes."},
			"addresses": schema.ListNestedAttribute{
				Computed: true,
				Description: "Addresses on the guest's interfaces but loopback, read through the QEMU guest agent " +
					"(not the heartbeat), asked for at most 2 seconds; null when the agent does not answer, " +
					"whether or not a heartbeat came.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"interface": schema.StringAttribute{Computed: true, Description: "Interface name in the guest."},
					"mac":       schema.StringAttribute{Computed: true, Description: "Its MAC address."},
					"address":   schema.StringAttribute{Computed: true, Description: "Address with prefix length, e.g. `10.0.2.15/24`."},
				}},
			},
		},
	}
}

func (d *vmHealthDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m vmHealthModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	bound := validatedDuration(m.Timeout, defaultHealthTimeout)
	c := d.data.client(m.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	name := m.Name.ValueString()
	hb, err := health.Read(ctx, c, name, phonehome.ReportChannel, bound)
	var silent *health.SilentError
	switch {
	case errors.As(err, &silent) && m.AllowSilent.ValueBool():
		out := silentHealth(m)
		out.Addresses = healthAddresses(ctx, c, name)
		resp.Diagnostics.Append(resp.State.Set(ctx, out)...)
		return
	case errors.As(err, &silent):
		resp.Diagnostics.AddAttributeError(path.Root("name"), "No heartbeat from VM "+name,
			err.Error()+". Set allow_silent = true to read a silent VM as reporting = false instead of failing.")
		return
	case err != nil:
		addError(&resp.Diagnostics, "Reading the health of VM "+name, err)
		return
	}
	out, diags := healthModel(m, hb)
	resp.Diagnostics.Append(diags...)
	out.Addresses = healthAddresses(ctx, c, name)
	resp.Diagnostics.Append(resp.State.Set(ctx, out)...)
}

// healthAddresses reads the guest's addresses through its agent, within
// guestaddr.DefaultBound; null when the agent does not answer.
func healthAddresses(ctx context.Context, c hosts.Host, name string) types.List {
	null := types.ListNull(types.ObjectType{AttrTypes: guestAddressAttrTypes})
	ref, err := c.LookupDomain(ctx, name)
	if err != nil {
		return null
	}
	addrs, ok := guestaddr.Read(ctx, guestaddr.DefaultBound, func(ctx context.Context) ([]guestaddr.Interface, error) {
		return c.GuestInterfaces(ctx, ref)
	})
	if !ok {
		return null
	}
	return guestAddressList(addrs)
}

// silentHealth is the result for a VM that sent nothing: the inputs, with
// reporting false and every value null.
func silentHealth(in vmHealthModel) *vmHealthModel {
	return &vmHealthModel{
		Host: in.Host, Name: in.Name, Timeout: in.Timeout, AllowSilent: in.AllowSilent,
		Reporting:   types.BoolValue(false),
		LoadAverage: types.ListNull(types.Float64Type),
		GPUs:        types.ListNull(healthGPUType),
	}
}

// healthModel translates a heartbeat into the data source's values.
func healthModel(in vmHealthModel, hb *health.Heartbeat) (*vmHealthModel, diag.Diagnostics) {
	var diags diag.Diagnostics
	m := &vmHealthModel{
		Host: in.Host, Name: in.Name, Timeout: in.Timeout, AllowSilent: in.AllowSilent,
		Reporting:          types.BoolValue(true),
		ReportedAt:         types.StringValue(hb.Time.UTC().Format(time.RFC3339Nano)),
		AgeSeconds:         types.Float64Value(hb.Age().Seconds()),
		Sequence:           types.Int64Value(hb.Seq),
		IntervalSeconds:    types.Int64Value(int64(hb.Interval / time.Second)),
		InstanceID:         types.StringValue(hb.InstanceID),
		Hostname:           types.StringValue(hb.Hostname),
		UptimeSeconds:      types.Int64Value(int64(hb.Uptime / time.Second)),
		CPUs:               types.Int64Value(hb.CPUs),
		MemoryTotalMiB:     types.Int64Value(hb.MemoryTotalKiB / 1024),
		MemoryAvailableMiB: types.Int64Value(hb.MemoryAvailableKiB / 1024),
		DiskTotalMiB:       types.Int64Value(hb.DiskTotalBytes >> 20),
		DiskFreeMiB:        types.Int64Value(hb.DiskFreeBytes >> 20),
		CloudInitStatus:    types.StringValue(hb.CloudInit),
		AgentCPUSeconds:    types.Float64Value(hb.AgentCPU.Seconds()),
		AgentStartedAt:     types.StringNull(),
		HeartbeatBytes:     types.Int64Value(int64(hb.Bytes)),
	}
	if !hb.AgentStarted.IsZero() {
		m.AgentStartedAt = types.StringValue(hb.AgentStarted.UTC().Format(time.RFC3339))
	}
	load := make([]attr.Value, 0, 3)
	for _, l := range hb.Load {
		load = append(load, types.Float64Value(l))
	}
	var d diag.Diagnostics
	m.LoadAverage, d = types.ListValue(types.Float64Type, load)
	diags.Append(d...)
	gpus := make([]attr.Value, 0, len(hb.GPUs))
	for _, g := range hb.GPUs {
		o, d := types.ObjectValue(healthGPUType.AttrTypes, map[string]attr.Value{
			"index":               types.Int64Value(g.Index),
			"name":                types.StringValue(g.Name),
			"driver_version":      types.StringValue(g.DriverVersion),
			"utilization_percent": types.Float64Value(g.UtilizationPercent),
			"memory_used_mib":     types.Int64Value(g.MemoryUsedMiB),
			"memory_total_mib":    types.Int64Value(g.MemoryTotalMiB),
			"temperature_c":       types.Float64Value(g.TemperatureC),
			"power_watts":         types.Float64Value(g.PowerW),
		})
		diags.Append(d...)
		gpus = append(gpus, o)
	}
	m.GPUs, d = types.ListValue(healthGPUType, gpus)
	diags.Append(d...)
	if hb.CloudInit == "" {
		m.CloudInitStatus = types.StringNull()
	}
	return m, diags
}
