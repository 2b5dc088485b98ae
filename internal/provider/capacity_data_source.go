package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/capacity"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var _ datasource.DataSourceWithConfigure = (*capacityDataSource)(nil)

func newCapacityDataSource() datasource.DataSource { return &capacityDataSource{} }

type capacityDataSource struct {
	configuredDataSource
}

type capacityDataSourceModel struct {
	Hosts    []types.String               `tfsdk:"hosts"`
	ID       types.String                 `tfsdk:"id"`
	Capacity map[string]hostCapacityModel `tfsdk:"capacity"`
}

type hostCapacityModel struct {
	Up            types.Bool              `tfsdk:"up"`
	Drained       types.Bool              `tfsdk:"drained"`
	Error         types.String            `tfsdk:"error"`
	CPUs          types.Int64             `tfsdk:"cpus"`
	PinnedCPUs    types.Int64             `tfsdk:"pinned_cpus"`
	FreeMemoryMiB types.Int64             `tfsdk:"free_memory_mib"`
	NUMANodes     []capacityNodeModel     `tfsdk:"numa_nodes"`
	GPUModels     []capacityGPUModelModel `tfsdk:"gpu_models"`
	GPUs          []capacityGPUModel      `tfsdk:"gpus"`
	SRIOVGPUs     []capacitySRIOVModel    `tfsdk:"sriov_gpus"`
}

type capacitySRIOVModel struct {
	Address   types.String            `tfsdk:"address"`
	Model     types.String            `tfsdk:"model"`
	MaxVFs    types.Int64             `tfsdk:"max_vfs"`
	NumVFs    types.Int64             `tfsdk:"num_vfs"`
	Mechanism types.String            `tfsdk:"mechanism"`
	VGPUTypes []capacityVGPUTypeModel `tfsdk:"vgpu_types"`
	VFs       []capacityVFModel       `tfsdk:"vfs"`
}

type capacityVGPUTypeModel struct {
	ID             types.Int64  `tfsdk:"id"`
	Name           types.String `tfsdk:"name"`
	FramebufferGiB types.Int64  `tfsdk:"framebuffer_gib"`
	MIGSlices      types.Int64  `tfsdk:"mig_slices"`
	InUse          types.Int64  `tfsdk:"in_use"`
	Available      types.Int64  `tfsdk:"available"`
}

type capacityVFModel struct {
	Address  types.String `tfsdk:"address"`
	VGPUType types.String `tfsdk:"vgpu_type"`
	Driver   types.String `tfsdk:"driver"`
	UsedBy   types.String `tfsdk:"used_by"`
}

type capacityNodeModel struct {
	ID            types.Int64              `tfsdk:"id"`
	CPUs          types.Int64              `tfsdk:"cpus"`
	PinnedCPUs    types.Int64              `tfsdk:"pinned_cpus"`
	FreeMemoryMiB types.Int64              `tfsdk:"free_memory_mib"`
	FreeHugePages []capacityHugePagesModel `tfsdk:"free_hugepages"`
}

type capacityHugePagesModel struct {
	SizeKiB types.Int64 `tfsdk:"size_kib"`
	Free    types.Int64 `tfsdk:"free"`
}

type capacityGPUModelModel struct {
	Model       types.String `tfsdk:"model"`
	Total       types.Int64  `tfsdk:"total"`
	Free        types.Int64  `tfsdk:"free"`
	Claimed     types.Int64  `tfsdk:"claimed"`
	InUse       types.Int64  `tfsdk:"in_use"`
	HostProcess types.Int64  `tfsdk:"host_process"`
	Quarantined types.Int64  `tfsdk:"quarantined"`
	VGPUs       types.Int64  `tfsdk:"vgpus"`
}

type capacityGPUModel struct {
	Address   types.String            `tfsdk:"address"`
	Model     types.String            `tfsdk:"model"`
	VendorID  types.String            `tfsdk:"vendor_id"`
	DeviceID  types.String            `tfsdk:"device_id"`
	MemoryGiB types.Int64             `tfsdk:"memory_gib"`
	NUMANode  types.Int64             `tfsdk:"numa_node"`
	State     types.String            `tfsdk:"state"`
	Holder    types.String            `tfsdk:"holder"`
	MdevTypes []capacityMdevTypeModel `tfsdk:"mdev_types"`
}

type capacityMdevTypeModel struct {
	Type      types.String `tfsdk:"type"`
	Name      types.String `tfsdk:"name"`
	Available types.Int64  `tfsdk:"available"`
}

func (d *capacityDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_capacity"
}

func (d *capacityDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "What the fleet's hosts have free now: per host and per NUMA node the CPUs and those VMs " +
			"have pinned, the free memory and free huge pages; the GPUs by model with how many are free, " +
			"claimed, in use or held by a host process, and each GPU with its state and who holds it; the " +
			"vGPU (mdev) types each GPU can still create. " +
			"It is read fresh on every plan, so it is a snapshot: another apply can take what it shows as " +
			"free before yours runs. Use it to look at the fleet (outputs, dashboards, checks), not to " +
			"choose hosts or GPUs in HCL: a choice made from it changes from plan to plan as the fleet " +
			"fills and would move VMs. To have Kohaku choose and claim, use `kohaku_vm`'s `placement`. " +
			"Each host is read in one pass over its libvirt connection (NUMA nodes, PCI node devices, " +
			"claims, domains), all hosts at the same time; over local and SSH connections the GPUs' BARs " +
			"and the host's processes holding GPUs are read too. A host that cannot be read is reported " +
			"with `up = false` and the error, with a warning, instead of failing the read.",
		Attributes: map[string]schema.Attribute{
			"hosts": schema.ListAttribute{
				Optional:    true,
				Computed:    true,
				ElementType: types.StringType,
				Description: "Hosts to read: keys of the provider's `hosts` map, and `\"\"` for the provider's " +
					"default connection. Default: every host the provider knows, the default connection " +
					"first, then the `hosts` map's keys sorted. A name that is not a host of the provider " +
					"fails the read.",
			},
			"id": schema.StringAttribute{Computed: true, Description: "The hosts read, joined by commas."},
			"capacity": schema.MapNestedAttribute{
				Computed: true,
				Description: "Each host's capacity, keyed by its name in `hosts` (`\"\"` for the default " +
					"connection).",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"up": schema.BoolAttribute{Computed: true, Description: "Whether the host was read. `false` " +
						"when it could not be reached or a read failed; `error` says why, the numbers are null " +
						"and the lists empty."},
					"drained": schema.BoolAttribute{Computed: true, Description: "Whether the provider drains the " +
						"host (`drain = true`): placement chooses it for no new VM, and moves the VMs it placed there."},
					"error": schema.StringAttribute{Computed: true, Description: "Why the host could not be read, " +
						"when `up` is `false`; null otherwise."},
					"cpus": schema.Int64Attribute{Computed: true, Description: "Host CPUs (logical CPUs, " +
						"hyper-threads included) over all NUMA nodes."},
					"pinned_cpus": schema.Int64Attribute{Computed: true, Description: "Host CPUs that a VM on the " +
						"host (Kohaku's or not) has a vCPU pinned to one to one (`vcpupin`)."},
					"free_memory_mib": schema.Int64Attribute{Computed: true, Description: "Free memory over all " +
						"NUMA nodes, in MiB."},
					"numa_nodes": schema.ListNestedAttribute{
						Computed:    true,
						Description: "The host's NUMA nodes, sorted by id. Empty when libvirt reports no NUMA topology.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"id":   schema.Int64Attribute{Computed: true, Description: "NUMA node number, as `gpus[*].numa_node` names it."},
							"cpus": schema.Int64Attribute{Computed: true, Description: "Host CPUs of the node."},
							"pinned_cpus": schema.Int64Attribute{Computed: true, Description: "CPUs of the node that " +
								"a VM has a vCPU pinned to."},
							"free_memory_mib": schema.Int64Attribute{Computed: true, Description: "Memory the kernel " +
								"has free on the node, in MiB; reserved huge pages are not in it. Where the host's " +
								"driver does not report free memory, the node's whole memory."},
							"free_hugepages": schema.ListNestedAttribute{
								Computed:    true,
								Description: "Free huge pages of the node by page size, smallest first.",
								NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
									"size_kib": schema.Int64Attribute{Computed: true, Description: "Page size in KiB: `2048` or `1048576` on x86_64."},
									"free":     schema.Int64Attribute{Computed: true, Description: "Free pages of this size (a count of pages)."},
								}},
							},
						}},
					},
					"sriov_gpus": capacitySRIOVSchema(),
					"gpu_models": schema.ListNestedAttribute{
						Computed:    true,
						Description: "The host's GPUs counted by model and state, sorted by model.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"model":        schema.StringAttribute{Computed: true, Description: "Model name as the host reports it, e.g. `GH100 [H100 SXM5 80GB]`."},
							"total":        schema.Int64Attribute{Computed: true, Description: "GPUs of the model."},
							"free":         schema.Int64Attribute{Computed: true, Description: "GPUs of the model in state `free`."},
							"claimed":      schema.Int64Attribute{Computed: true, Description: "GPUs of the model in state `claimed`."},
							"in_use":       schema.Int64Attribute{Computed: true, Description: "GPUs of the model in state `in_use`."},
							"host_process": schema.Int64Attribute{Computed: true, Description: "GPUs of the model in state `host_process`."},
							"quarantined":  schema.Int64Attribute{Computed: true, Description: "GPUs of the model in state `quarantined`."},
							"vgpus":        schema.Int64Attribute{Computed: true, Description: "GPUs of the model in state `vgpus`."},
						}},
					},
					"gpus": schema.ListNestedAttribute{
						Computed: true,
						Description: "The host's GPUs (display-class PCI functions that are not bridges, each " +
							"standing for its IOMMU group), sorted by address.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"address":   schema.StringAttribute{Computed: true, Description: "PCI address `DDDD:BB:SS.F` of the GPU's function."},
							"model":     schema.StringAttribute{Computed: true, Description: "Model name as the host reports it."},
							"vendor_id": schema.StringAttribute{Computed: true, Description: "PCI vendor id, four hex digits, e.g. `10de`."},
							"device_id": schema.StringAttribute{Computed: true, Description: "PCI device id, four hex digits."},
							"memory_gib": schema.Int64Attribute{Computed: true, Description: "The card's memory in GiB " +
								"as its largest 64-bit prefetchable BAR gives it (an upper bound: an H100 80 GB shows " +
								"128). Null where the host's files cannot be read (tcp and tls connections) or it is unknown."},
							"numa_node": schema.Int64Attribute{Computed: true, Description: "NUMA node the GPU is attached to; null when the host does not say."},
							"state": schema.StringAttribute{Computed: true, Description: "What the GPU is doing now: " +
								"`free` (no VM, claim or host process has it; a GPU on `vfio-pci` that no VM uses is " +
								"free), `claimed` (a Kohaku claim on the host names a VM: some VM's apply holds it, " +
								"the VM may still be being created), `in_use` (a domain on the host has it as a " +
								"hostdev, given by Kohaku or by hand), `host_process` (a process on the host has it " +
								"open: a CUDA job, a display server, nvidia-persistenced), `quarantined` (it " +
								"could not be reset after its last VM; placement does not hand it out until an " +
								"operator returns it with the `kohaku_gpu_reset` action or by deleting its marker, " +
								"see the GPU guide) or `vgpus` (its SR-IOV virtual functions are enabled: its host " +
								"driver serves them as vGPUs, `sriov_gpus` shows them, and it is not passed through whole)."},
							"holder": schema.StringAttribute{Computed: true, Description: "Who holds it: the VM " +
								"(name and domain UUID, and for a claim its workspace), the host processes (PID " +
								"and command), or why it is quarantined. A `free` GPU whose claim is stale (its VM " +
								"is gone) says so here. Null when nothing does."},
							"mdev_types": schema.ListNestedAttribute{
								Computed:    true,
								Description: "The vGPU (mediated device) types the GPU offers; empty when it offers none.",
								NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
									"type":      schema.StringAttribute{Computed: true, Description: "Type id, e.g. `nvidia-592`."},
									"name":      schema.StringAttribute{Computed: true, Description: "The vendor's name of the type, e.g. `NVIDIA H100-20C`."},
									"available": schema.Int64Attribute{Computed: true, Description: "Instances of the type the GPU can still create."},
								}},
							},
						}},
					},
				}},
			},
		},
	}
}

func (d *capacityDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m capacityDataSourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if d.data == nil {
		d.data.client("", &resp.Diagnostics) // says the provider is not configured
		return
	}
	var names []string
	if m.Hosts == nil {
		names = append([]string{""}, d.data.fleet.Names()...)
	} else {
		for _, h := range m.Hosts {
			names = append(names, h.ValueString())
		}
	}
	m.Hosts = nil
	for _, n := range names {
		if d.data.client(n, &resp.Diagnostics) == nil {
			return
		}
		m.Hosts = append(m.Hosts, types.StringValue(n))
	}
	results := capacity.ForClients(d.data.fleet.Host).ReadHosts(ctx, names)
	m.ID = types.StringValue(strings.Join(names, ","))
	m.Capacity = map[string]hostCapacityModel{}
	for _, r := range results {
		if r.Err != nil {
			resp.Diagnostics.AddWarning(fmt.Sprintf("Host %q is down", r.Name),
				fmt.Sprintf("Its capacity reads as up = false: %v.", r.Err))
		}
		hc := hostCapacityFrom(r)
		hc.Drained = types.BoolValue(d.data.drained(r.Name))
		m.Capacity[r.Name] = hc
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// hostCapacityFrom converts one host's read.
func hostCapacityFrom(r capacity.Result) hostCapacityModel {
	out := hostCapacityModel{
		Up: types.BoolValue(r.Err == nil), Error: types.StringNull(),
		CPUs: types.Int64Null(), PinnedCPUs: types.Int64Null(), FreeMemoryMiB: types.Int64Null(),
		NUMANodes: []capacityNodeModel{}, GPUModels: []capacityGPUModelModel{}, GPUs: []capacityGPUModel{},
		SRIOVGPUs: []capacitySRIOVModel{},
	}
	if r.Err != nil || r.Host == nil {
		out.Up = types.BoolValue(false)
		if r.Err != nil {
			out.Error = types.StringValue(r.Err.Error())
		}
		return out
	}
	h := r.Host
	pinned := map[int]bool{}
	for _, c := range h.PinnedCPUs {
		pinned[c] = true
	}
	var cpus, free int64
	nodes := slices.Clone(h.Nodes)
	slices.SortFunc(nodes, func(a, b placement.Node) int { return a.ID - b.ID })
	for _, n := range nodes {
		var np int64
		for _, c := range n.CPUs {
			if pinned[c] {
				np++
			}
		}
		pages := []capacityHugePagesModel{}
		sizes := make([]uint64, 0, len(n.FreeHugePages))
		for s := range n.FreeHugePages {
			sizes = append(sizes, s)
		}
		slices.Sort(sizes)
		for _, s := range sizes {
			pages = append(pages, capacityHugePagesModel{SizeKiB: types.Int64Value(int64(s)), Free: types.Int64Value(int64(n.FreeHugePages[s]))})
		}
		out.NUMANodes = append(out.NUMANodes, capacityNodeModel{
			ID: types.Int64Value(int64(n.ID)), CPUs: types.Int64Value(int64(len(n.CPUs))), PinnedCPUs: types.Int64Value(np),
			FreeMemoryMiB: types.Int64Value(n.FreeMemoryMiB), FreeHugePages: pages,
		})
		cpus += int64(len(n.CPUs))
		free += n.FreeMemoryMiB
	}
	out.CPUs, out.PinnedCPUs, out.FreeMemoryMiB = types.Int64Value(cpus), types.Int64Value(int64(len(pinned))), types.Int64Value(free)
	byModel := map[string]*capacityGPUModelModel{}
	counts := map[string]map[placement.State]int64{}
	for _, g := range h.GPUs {
		out.GPUs = append(out.GPUs, capacityGPUFrom(g))
		if counts[g.Model] == nil {
			counts[g.Model] = map[placement.State]int64{}
			byModel[g.Model] = &capacityGPUModelModel{Model: types.StringValue(g.Model)}
		}
		counts[g.Model][g.State]++
	}
	models := make([]string, 0, len(byModel))
	for k := range byModel {
		models = append(models, k)
	}
	slices.Sort(models)
	for _, k := range models {
		c := counts[k]
		mm := byModel[k]
		mm.Total = types.Int64Value(c[placement.Free] + c[placement.Claimed] + c[placement.InUse] + c[placement.HostHeld] + c[placement.Quarantined] + c[placement.VGPUs])
		mm.Free, mm.Claimed, mm.InUse = types.Int64Value(c[placement.Free]), types.Int64Value(c[placement.Claimed]), types.Int64Value(c[placement.InUse])
		mm.HostProcess, mm.Quarantined = types.Int64Value(c[placement.HostHeld]), types.Int64Value(c[placement.Quarantined])
		mm.VGPUs = types.Int64Value(c[placement.VGPUs])
		out.GPUModels = append(out.GPUModels, *mm)
	}
	for _, g := range h.SRIOV {
		out.SRIOVGPUs = append(out.SRIOVGPUs, capacitySRIOVFrom(g, h.VFUsers))
	}
	return out
}

func capacitySRIOVSchema() schema.ListNestedAttribute {
	return schema.ListNestedAttribute{
		Computed: true,
		Description: "The host's SR-IOV GPUs (a display controller that can have virtual functions, or any " +
			"function whose VFs carry vGPU types), with their VFs and the vGPU types those offer now, sorted " +
			"by address. Empty where the host's files cannot be read (tcp and tls connections).",
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"address":   schema.StringAttribute{Computed: true, Description: "PCI address of the GPU (its physical function)."},
			"model":     schema.StringAttribute{Computed: true, Description: "Model name as the host reports it."},
			"max_vfs":   schema.Int64Attribute{Computed: true, Description: "The most VFs it can have (`sriov_totalvfs`)."},
			"num_vfs":   schema.Int64Attribute{Computed: true, Description: "VFs enabled now (`kohaku_gpu_sriov`)."},
			"mechanism": schema.StringAttribute{Computed: true, Description: "How its vGPUs are made: `sriov-vf` (a VF given a type, `kohaku_vgpu`), `sriov-mdev` (a mediated device on a VF, `kohaku_mdev` with the VF as parent: an A100 with vGPU 16 and earlier) or `\"\"` (no VF offers vGPU types: none enabled, or the vendor's vGPU manager not loaded)."},
			"vgpu_types": schema.ListNestedAttribute{
				Computed:    true,
				Description: "The vGPU types its VFs list or run, by id.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":              schema.Int64Attribute{Computed: true, Description: "The type's id, what `current_vgpu_type` takes."},
					"name":            schema.StringAttribute{Computed: true, Description: "The vendor's name, e.g. `NVIDIA L40S-12Q`."},
					"framebuffer_gib": schema.Int64Attribute{Computed: true, Description: "Memory of one instance, from the name; null when the name does not say."},
					"mig_slices":      schema.Int64Attribute{Computed: true, Description: "Compute slices of a MIG-backed type (`H100XM-1-10C`: 1); 0 for a time-sliced type."},
					"in_use":          schema.Int64Attribute{Computed: true, Description: "VFs that run the type now."},
					"available": schema.Int64Attribute{Computed: true, Description: "Instances that can still be made: free VFs " +
						"that list the type, bounded by the GPU's framebuffer while no type runs; 0 when the type cannot run " +
						"beside what runs (one time-sliced type per GPU). The driver has the last word when the type is set."},
				}},
			},
			"vfs": schema.ListNestedAttribute{
				Computed:    true,
				Description: "The enabled VFs, sorted.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"address":   schema.StringAttribute{Computed: true, Description: "PCI address of the VF."},
					"vgpu_type": schema.StringAttribute{Computed: true, Description: "The type set on it (its name, or its id where no VF lists the name); null when none is."},
					"driver":    schema.StringAttribute{Computed: true, Description: "Its host driver now (`vfio-pci` once a `kohaku_vgpu` has it); null when none."},
					"used_by":   schema.StringAttribute{Computed: true, Description: "The domain that passes it through; null when none does."},
				}},
			},
		}},
	}
}

func capacitySRIOVFrom(g sriov.GPU, users map[vfio.Address]string) capacitySRIOVModel {
	out := capacitySRIOVModel{
		Address: types.StringValue(g.Address.String()), Model: types.StringValue(g.Model),
		MaxVFs: types.Int64Value(int64(g.MaxVFs)), NumVFs: types.Int64Value(int64(g.NumVFs)),
		Mechanism: types.StringValue(g.Mechanism), VGPUTypes: []capacityVGPUTypeModel{}, VFs: []capacityVFModel{},
	}
	for _, o := range g.Offers() {
		fb := types.Int64Null()
		if o.Type.FramebufferGiB > 0 {
			fb = types.Int64Value(int64(o.Type.FramebufferGiB))
		}
		out.VGPUTypes = append(out.VGPUTypes, capacityVGPUTypeModel{
			ID: types.Int64Value(int64(o.Type.ID)), Name: types.StringValue(o.Type.Name), FramebufferGiB: fb,
			MIGSlices: types.Int64Value(int64(o.Type.MIGSlices)), InUse: types.Int64Value(int64(o.InUse)), Available: types.Int64Value(int64(o.Available)),
		})
	}
	for _, vf := range g.VFs {
		m := capacityVFModel{Address: types.StringValue(vf.Address.String()), VGPUType: types.StringNull(), Driver: types.StringNull(), UsedBy: types.StringNull()}
		if vf.Current != 0 {
			t := g.TypeByID(vf.Current)
			if t.Name != "" {
				m.VGPUType = types.StringValue(t.Name)
			} else {
				m.VGPUType = types.StringValue(fmt.Sprint(t.ID))
			}
		}
		if vf.Driver != "" {
			m.Driver = types.StringValue(vf.Driver)
		}
		if u, ok := users[vf.Address]; ok {
			m.UsedBy = types.StringValue(u)
		}
		out.VFs = append(out.VFs, m)
	}
	return out
}

func capacityGPUFrom(g placement.GPU) capacityGPUModel {
	out := capacityGPUModel{
		Address:   types.StringValue(g.Address.String()),
		Model:     types.StringValue(g.Model),
		VendorID:  types.StringValue(fmt.Sprintf("%04x", g.VendorID)),
		DeviceID:  types.StringValue(fmt.Sprintf("%04x", g.DeviceID)),
		MemoryGiB: types.Int64Null(),
		NUMANode:  types.Int64Null(),
		State:     types.StringValue(gpuStateName(g.State)),
		Holder:    types.StringNull(),
		MdevTypes: []capacityMdevTypeModel{},
	}
	if g.MemoryGiB > 0 {
		out.MemoryGiB = types.Int64Value(int64(g.MemoryGiB))
	}
	if g.NUMANode >= 0 {
		out.NUMANode = types.Int64Value(int64(g.NUMANode))
	}
	if g.Holder != "" {
		out.Holder = types.StringValue(g.Holder)
	}
	for _, t := range g.MdevTypes {
		out.MdevTypes = append(out.MdevTypes, capacityMdevTypeModel{Type: types.StringValue(t.ID), Name: types.StringValue(t.Name), Available: types.Int64Value(int64(t.Available))})
	}
	return out
}

// gpuStateName is a GPU state as the schema spells it.
func gpuStateName(s placement.State) string {
	switch s {
	case placement.Free:
		return "free"
	case placement.Claimed:
		return "claimed"
	case placement.InUse:
		return "in_use"
	case placement.HostHeld:
		return "host_process"
	case placement.Quarantined:
		return "quarantined"
	case placement.VGPUs:
		return "vgpus"
	}
	return s.String()
}
