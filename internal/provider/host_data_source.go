package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var _ datasource.DataSourceWithConfigure = (*hostDataSource)(nil)

func newHostDataSource() datasource.DataSource { return &hostDataSource{} }

type hostDataSource struct {
	configuredDataSource
}

type hostDataSourceModel struct {
	Host              types.String        `tfsdk:"host"`
	AllowUnreachable  types.Bool          `tfsdk:"allow_unreachable"`
	Reachable         types.Bool          `tfsdk:"reachable"`
	Error             types.String        `tfsdk:"error"`
	ID                types.String        `tfsdk:"id"`
	URI               types.String        `tfsdk:"uri"`
	Hostname          types.String        `tfsdk:"hostname"`
	LibvirtVersion    types.String        `tfsdk:"libvirt_version"`
	HypervisorType    types.String        `tfsdk:"hypervisor_type"`
	HypervisorVersion types.String        `tfsdk:"hypervisor_version"`
	Arch              types.String        `tfsdk:"arch"`
	CPUModel          types.String        `tfsdk:"cpu_model"`
	CPUs              types.Int64         `tfsdk:"cpus"`
	MemoryMiB         types.Int64         `tfsdk:"memory_mib"`
	DomainTypes       []types.String      `tfsdk:"domain_types"`
	KVM               types.Bool          `tfsdk:"kvm_available"`
	NUMANodes         []hostNUMANodeModel `tfsdk:"numa_nodes"`
	GPUs              []pciDeviceModel    `tfsdk:"gpus"`
	Pools             []hostPoolModel     `tfsdk:"pools"`
	Networks          []hostNetworkModel  `tfsdk:"networks"`
}

type hostNUMANodeModel struct {
	ID            types.Int64          `tfsdk:"id"`
	CPUs          []types.Int64        `tfsdk:"cpus"`
	CPUSet        types.String         `tfsdk:"cpuset"`
	MemoryMiB     types.Int64          `tfsdk:"memory_mib"`
	FreeMemoryMiB types.Int64          `tfsdk:"free_memory_mib"`
	HugePages     []hostHugePagesModel `tfsdk:"hugepages"`
}

type hostHugePagesModel struct {
	SizeKiB types.Int64 `tfsdk:"size_kib"`
	Total   types.Int64 `tfsdk:"total"`
	Free    types.Int64 `tfsdk:"free"`
}

type hostPoolModel struct {
	Name            types.String `tfsdk:"name"`
	Type            types.String `tfsdk:"type"`
	Path            types.String `tfsdk:"path"`
	Active          types.Bool   `tfsdk:"active"`
	CapacityBytes   types.Int64  `tfsdk:"capacity_bytes"`
	AllocationBytes types.Int64  `tfsdk:"allocation_bytes"`
	AvailableBytes  types.Int64  `tfsdk:"available_bytes"`
}

type hostNetworkModel struct {
	Name    types.String `tfsdk:"name"`
	Bridge  types.String `tfsdk:"bridge"`
	Forward types.String `tfsdk:"forward_mode"`
	Active  types.Bool   `tfsdk:"active"`
}

func (d *hostDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_host"
}

func (d *hostDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "What a libvirt host offers: versions, CPUs and memory, whether KVM is usable, its NUMA " +
			"nodes with their free memory and huge pages, its GPUs, its storage pools and networks. Read it to " +
			"check the connection, or to choose a host, a pool and a NUMA node for VMs. " +
			"Everything is read over the libvirt connection in a bounded number of calls: versions, node info " +
			"and the capabilities; one free-memory call and one free-huge-pages call for all NUMA nodes " +
			"(one per run of consecutive node ids, should a host number them with gaps); the PCI node " +
			"devices (one list, then one read per PCI function, as `kohaku_pci_devices` does); one call per " +
			"pool and per network.",
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:    true,
				Description: "Key of the provider's `hosts` map to read. Empty means the provider's default connection.",
			},
			"allow_unreachable": schema.BoolAttribute{
				Optional: true,
				Description: "When the host cannot be reached (down, refusing, a failed handshake), read it as " +
					"`reachable = false` with `error` saying why and every other attribute null, and warn, " +
					"instead of failing the plan. Default `false`: a configuration that reads one host usually " +
					"cannot do without it, and failing says so at once. " +
					"Turn it on when reading every host of a fleet, so one host that is down does not stop " +
					"plans for the others. Do not drop unreachable hosts from the `for_each` of resources: " +
					"Terraform would plan to destroy what they hold; keep them in, and only their resources " +
					"fail (see the fleet example). Errors that are not about reaching the host still fail.",
			},
			"reachable":          schema.BoolAttribute{Computed: true, Description: "Whether the host answered. Always `true` unless `allow_unreachable` is set."},
			"error":              schema.StringAttribute{Computed: true, Description: "Why the host could not be reached, when `reachable` is `false`; null otherwise."},
			"id":                 schema.StringAttribute{Computed: true, Description: "The host's UUID as libvirt reports it in its capabilities."},
			"uri":                schema.StringAttribute{Computed: true, Description: "The URI Kohaku connected to (any password removed)."},
			"hostname":           schema.StringAttribute{Computed: true, Description: "The host's hostname."},
			"libvirt_version":    schema.StringAttribute{Computed: true, Description: "Version of the libvirt daemon, e.g. `9.0.0`."},
			"hypervisor_type":    schema.StringAttribute{Computed: true, Description: "The hypervisor driver, e.g. `QEMU`."},
			"hypervisor_version": schema.StringAttribute{Computed: true, Description: "Version of the hypervisor, e.g. `7.2.0` for QEMU 7.2."},
			"arch":               schema.StringAttribute{Computed: true, Description: "The host CPU architecture, e.g. `x86_64`."},
			"cpu_model":          schema.StringAttribute{Computed: true, Description: "The host CPU model as libvirt's node info reports it."},
			"cpus":               schema.Int64Attribute{Computed: true, Description: "Number of active host CPUs."},
			"memory_mib":         schema.Int64Attribute{Computed: true, Description: "Host memory in MiB."},
			"domain_types": schema.ListAttribute{
				Computed:    true,
				ElementType: types.StringType,
				Description: "Domain types libvirt offers for the host's own architecture, sorted, e.g. `[\"kvm\", \"qemu\"]`. Use `qemu` (software emulation) where `kvm` is missing.",
			},
			"kvm_available": schema.BoolAttribute{
				Computed: true,
				Description: "Whether libvirt offers `kvm` domains (hardware virtualisation) on this host. It " +
					"reflects what libvirt sees (`/dev/kvm` usable); a nested host can offer KVM that still " +
					"does not run guests well.",
			},
			"numa_nodes": schema.ListNestedAttribute{
				Computed: true,
				Description: "The host's NUMA nodes (memory and CPUs that sit together, usually one per CPU " +
					"socket), sorted by id, as libvirt's capabilities describe them, with the free memory and " +
					"free huge pages of each read at the same time. " +
					"For placement: a VM performs best with its vCPUs on the CPUs of one node, its memory (and huge pages) on that node, and its GPUs attached to that node (`gpus[*].numa_node`). " +
					"Free amounts are a snapshot taken at plan time; other VMs can take them before apply. Empty when libvirt reports no NUMA topology.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id": schema.Int64Attribute{Computed: true, Description: "NUMA node number, as `gpus[*].numa_node` and `numactl` name it."},
					"cpus": schema.ListAttribute{Computed: true, ElementType: types.Int64Type,
						Description: "Host CPU ids (logical CPUs, hyper-threads included) of the node, sorted. `length(cpus)` is how many vCPUs can be pinned to the node without sharing."},
					"cpuset":     schema.StringAttribute{Computed: true, Description: "The same CPUs as ranges in libvirt's cpuset syntax, e.g. `0-7,16-23`."},
					"memory_mib": schema.Int64Attribute{Computed: true, Description: "Memory of the node in MiB, huge pages included."},
					"free_memory_mib": schema.Int64Attribute{Computed: true, Description: "Memory of the node the " +
						"kernel has free now, in MiB. Reserved huge pages are not in it, used or not: see " +
						"`hugepages`. Null when the host's driver does not report free memory."},
					"hugepages": schema.ListNestedAttribute{
						Computed: true,
						Description: "The node's huge page pools by page size, smallest first (the base page, 4 " +
							"KiB on x86_64, is not listed). A pool with `total = 0` is a size the CPU supports " +
							"but the host reserved none of.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"size_kib": schema.Int64Attribute{Computed: true, Description: "Page size in KiB: `2048` (2 MiB) or `1048576` (1 GiB) on x86_64."},
							"total":    schema.Int64Attribute{Computed: true, Description: "Pages of this size reserved on the node (a count of pages, not KiB)."},
							"free": schema.Int64Attribute{Computed: true, Description: "Pages of this size not in " +
								"use. `free * size_kib / 1024` is the MiB of hugepage-backed VM memory the node " +
								"can still take. Null when the host's driver does not report it."},
						}},
					},
				}},
			},
			"gpus": schema.ListNestedAttribute{
				Computed: true,
				Description: "The host's display-class PCI functions (class `03xxxx`: VGA controllers and 3D " +
					"controllers such as most compute GPUs), sorted by address, with the same attributes as " +
					"`kohaku_pci_devices`. " +
					"The driver does not say whether a GPU is free (one on `vfio-pci` that no VM uses is " +
					"free; one on its host driver that a process has open is not): `kohaku_capacity` reports " +
					"each GPU's state and holder. `numa_node` says which of `numa_nodes` to put the VM's CPUs " +
					"and memory on. " +
					"Each GPU's BARs and reset methods are read from the host's sysfs over local and SSH connections (null over `tcp` and `tls`). " +
					"Null, with a warning, when the host's libvirt has no node-device driver.",
				NestedObject: schema.NestedAttributeObject{Attributes: pciDeviceAttributes()},
			},
			"pools": schema.ListNestedAttribute{
				Computed:    true,
				Description: "Storage pools, sorted by name.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":             schema.StringAttribute{Computed: true, Description: "Pool name."},
					"type":             schema.StringAttribute{Computed: true, Description: "Pool type, e.g. `dir` or `logical`."},
					"path":             schema.StringAttribute{Computed: true, Description: "Target path of the pool."},
					"active":           schema.BoolAttribute{Computed: true, Description: "Whether the pool is active."},
					"capacity_bytes":   schema.Int64Attribute{Computed: true, Description: "Capacity in bytes (0 when the pool is inactive)."},
					"allocation_bytes": schema.Int64Attribute{Computed: true, Description: "Bytes allocated to volumes."},
					"available_bytes":  schema.Int64Attribute{Computed: true, Description: "Bytes free for new volumes."},
				}},
			},
			"networks": schema.ListNestedAttribute{
				Computed:    true,
				Description: "libvirt networks, sorted by name.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":         schema.StringAttribute{Computed: true, Description: "Network name."},
					"bridge":       schema.StringAttribute{Computed: true, Description: "Host bridge device of the network."},
					"forward_mode": schema.StringAttribute{Computed: true, Description: "Forward mode (`nat`, `route`, `bridge`, ...); empty for an isolated network."},
					"active":       schema.BoolAttribute{Computed: true, Description: "Whether the network is active."},
				}},
			},
		},
	}
}

func (d *hostDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m hostDataSourceModel
	c := d.data.modelClient(ctx, req.Config, &m, &m.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	info, err := c.HostInfo(ctx)
	var inv *vfio.Inventory
	if err == nil {
		inv, err = newBinder(ctx, c).Inventory(ctx)
		if hosts.Unsupported(err) {
			// A host without libvirt's node-device driver: everything
			// else is known, the GPUs are not.
			resp.Diagnostics.AddWarning("No GPU list from "+c.Endpoint().Redacted(),
				fmt.Sprintf("The host's libvirt does not list node devices (%v), so gpus is null. Install and start libvirt's node-device driver (virtnodedevd, or libvirtd with it built in) to read them.", err))
			inv, err = nil, nil
		}
	}
	if host, unreachable := hosts.Unreachable(err); err != nil && m.AllowUnreachable.ValueBool() && unreachable {
		resp.Diagnostics.AddWarning("Host "+host+" is unreachable",
			fmt.Sprintf("Read as reachable = false (allow_unreachable): %v. Resources placed on it fail until it is back; the others go ahead.", err))
		m.Reachable = types.BoolValue(false)
		m.Error = types.StringValue(err.Error())
		m.URI = types.StringValue(c.Endpoint().Redacted())
		m.ID = types.StringNull()
		resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, "Reading the host", err)
		return
	}
	m.Reachable = types.BoolValue(true)
	m.Error = types.StringNull()
	m.ID = types.StringValue(info.UUID)
	m.URI = types.StringValue(c.Endpoint().Redacted())
	m.Hostname = types.StringValue(info.Hostname)
	m.LibvirtVersion = types.StringValue(info.LibvirtVersion)
	m.HypervisorType = types.StringValue(info.HypervisorType)
	m.HypervisorVersion = types.StringValue(info.HypervisorVersion)
	m.Arch = types.StringValue(info.Arch)
	m.CPUModel = types.StringValue(info.CPUModel)
	m.CPUs = types.Int64Value(info.CPUs)
	m.MemoryMiB = types.Int64Value(info.MemoryMiB)
	m.KVM = types.BoolValue(info.KVM())
	m.DomainTypes = make([]types.String, 0, len(info.DomainTypes))
	for _, t := range info.DomainTypes {
		m.DomainTypes = append(m.DomainTypes, types.StringValue(t))
	}
	m.NUMANodes = make([]hostNUMANodeModel, 0, len(info.NUMANodes))
	for _, n := range info.NUMANodes {
		m.NUMANodes = append(m.NUMANodes, hostNUMANodeFrom(n))
	}
	m.GPUs = nil
	if inv != nil {
		m.GPUs = pciDevicesFrom(ctx, c, inv.Filter("", displayClass))
	}
	m.Pools = make([]hostPoolModel, 0, len(info.Pools))
	for _, p := range info.Pools {
		m.Pools = append(m.Pools, hostPoolModel{
			Name: types.StringValue(p.Name), Type: types.StringValue(p.Type), Path: types.StringValue(p.Path),
			Active: types.BoolValue(p.Active), CapacityBytes: types.Int64Value(p.CapacityBytes),
			AllocationBytes: types.Int64Value(p.AllocationBytes), AvailableBytes: types.Int64Value(p.AvailableBytes),
		})
	}
	m.Networks = make([]hostNetworkModel, 0, len(info.Networks))
	for _, n := range info.Networks {
		m.Networks = append(m.Networks, hostNetworkModel{
			Name: types.StringValue(n.Name), Bridge: types.StringValue(n.Bridge),
			Forward: types.StringValue(n.Forward), Active: types.BoolValue(n.Active),
		})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// displayClass is the PCI base class of display controllers: VGA (0300),
// XGA (0301), 3D controllers (0302, most compute GPUs) and others (0380).
const displayClass = "03"

func hostNUMANodeFrom(n hosts.NUMANode) hostNUMANodeModel {
	out := hostNUMANodeModel{
		ID:            types.Int64Value(int64(n.ID)),
		CPUs:          make([]types.Int64, 0, len(n.CPUs)),
		CPUSet:        types.StringValue(n.CPUSet()),
		MemoryMiB:     types.Int64Value(n.MemoryMiB),
		FreeMemoryMiB: types.Int64Value(n.FreeMemoryMiB),
		HugePages:     make([]hostHugePagesModel, 0, len(n.HugePages)),
	}
	if !n.FreeKnown {
		out.FreeMemoryMiB = types.Int64Null()
	}
	for _, c := range n.CPUs {
		out.CPUs = append(out.CPUs, types.Int64Value(int64(c)))
	}
	for _, p := range n.HugePages {
		out.HugePages = append(out.HugePages, hostHugePagesModel{
			SizeKiB: types.Int64Value(int64(p.SizeKiB)), Total: types.Int64Value(int64(p.Total)), Free: types.Int64Value(int64(p.Free)),
		})
		if !n.FreeKnown {
			out.HugePages[len(out.HugePages)-1].Free = types.Int64Null()
		}
	}
	return out
}
