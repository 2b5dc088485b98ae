package provider

import (
	"context"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/mdev"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

var _ datasource.DataSourceWithConfigure = (*pciDevicesDataSource)(nil)

func newPCIDevicesDataSource() datasource.DataSource { return &pciDevicesDataSource{} }

type pciDevicesDataSource struct {
	configuredDataSource
}

type pciDevicesModel struct {
	Host         types.String      `tfsdk:"host"`
	VendorID     types.String      `tfsdk:"vendor_id"`
	ClassPrefix  types.String      `tfsdk:"class_prefix"`
	ID           types.String      `tfsdk:"id"`
	IOMMUEnabled types.Bool        `tfsdk:"iommu_enabled"`
	Devices      []pciDeviceModel  `tfsdk:"devices"`
	MdevParents  []mdevParentModel `tfsdk:"mdev_parents"`
}

type mdevParentModel struct {
	NodeDevice types.String    `tfsdk:"node_device"`
	Address    types.String    `tfsdk:"address"`
	Types      []mdevTypeModel `tfsdk:"mdev_types"`
}

type mdevTypeModel struct {
	ID                 types.String `tfsdk:"id"`
	Name               types.String `tfsdk:"name"`
	DeviceAPI          types.String `tfsdk:"device_api"`
	AvailableInstances types.Int64  `tfsdk:"available_instances"`
}

type pciDeviceModel struct {
	Address      types.String   `tfsdk:"address"`
	VendorID     types.String   `tfsdk:"vendor_id"`
	VendorName   types.String   `tfsdk:"vendor_name"`
	ProductID    types.String   `tfsdk:"product_id"`
	ProductName  types.String   `tfsdk:"product_name"`
	Class        types.String   `tfsdk:"class"`
	ClassName    types.String   `tfsdk:"class_name"`
	Driver       types.String   `tfsdk:"driver"`
	IOMMUGroup   types.Int64    `tfsdk:"iommu_group"`
	GroupMembers []types.String `tfsdk:"iommu_group_members"`
	NUMANode     types.Int64    `tfsdk:"numa_node"`
	BARs         []pciBARModel  `tfsdk:"bars"`
	ResetMethods []types.String `tfsdk:"reset_methods"`
	MaxVFs       types.Int64    `tfsdk:"max_vfs"`
	VFs          []types.String `tfsdk:"virtual_functions"`
	PF           types.String   `tfsdk:"physical_function"`
	VGPUType     types.Int64    `tfsdk:"vgpu_type"`
	VGPUTypes    []vgpuTypeItem `tfsdk:"creatable_vgpu_types"`
}

type vgpuTypeItem struct {
	ID             types.Int64  `tfsdk:"id"`
	Name           types.String `tfsdk:"name"`
	FramebufferGiB types.Int64  `tfsdk:"framebuffer_gib"`
	MIGSlices      types.Int64  `tfsdk:"mig_slices"`
}

type pciBARModel struct {
	Index        types.Int64 `tfsdk:"index"`
	SizeBytes    types.Int64 `tfsdk:"size_bytes"`
	Is64Bit      types.Bool  `tfsdk:"is_64bit"`
	Prefetchable types.Bool  `tfsdk:"prefetchable"`
	IO           types.Bool  `tfsdk:"io"`
}

var (
	vendorIDRE    = regexp.MustCompile(`^(0x)?[0-9a-fA-F]{4}$`)
	classPrefixRE = regexp.MustCompile(`^(0x)?([0-9a-fA-F]{2}){1,3}$`)
)

func (d *pciDevicesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pci_devices"
}

func (d *pciDevicesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The PCI devices of a libvirt host as libvirt's node-device API reports them, with their " +
			"drivers and IOMMU groups: find a GPU's address and see what else `kohaku_gpu_binding` would have " +
			"to move with it. Filter by vendor and by class.",
		Attributes: map[string]schema.Attribute{
			"host": schema.StringAttribute{
				Optional:    true,
				Description: "Key of the provider's `hosts` map to read. Empty means the provider's default connection.",
			},
			"vendor_id": schema.StringAttribute{
				Optional:    true,
				Description: "Only devices of this PCI vendor, as four hex digits (`10de` NVIDIA, `1002` AMD, `8086` Intel; a `0x` prefix is accepted). Default: every vendor.",
				Validators:  []validator.String{stringvalidator.RegexMatches(vendorIDRE, "must be a PCI vendor id of four hex digits, such as \"10de\"")},
			},
			"class_prefix": schema.StringAttribute{
				Optional: true,
				Description: "Only devices whose six hex digit class code starts with this: `03` any display " +
					"controller, `0300` VGA compatible, `0302` 3D controller (most compute GPUs), `0403` audio. " +
					"Default: every class.",
				Validators: []validator.String{stringvalidator.RegexMatches(classPrefixRE, "must be 2, 4 or 6 hex digits of a PCI class code, such as \"03\" or \"0302\"")},
			},
			"id": schema.StringAttribute{
				Computed:    true,
				Description: "The host key (`default` for the default connection) and the filters, e.g. `default/10de/03`.",
			},
			"iommu_enabled": schema.BoolAttribute{
				Computed:    true,
				Description: "Whether the host has a usable IOMMU, i.e. its PCI devices are in IOMMU groups. Without one `kohaku_gpu_binding` is refused.",
			},
			"devices": schema.ListNestedAttribute{
				Computed:     true,
				Description:  "The matching devices, sorted by address.",
				NestedObject: schema.NestedAttributeObject{Attributes: pciDeviceAttributes()},
			},
			"mdev_parents": schema.ListNestedAttribute{
				Computed: true,
				Description: "Every device of the host that offers mediated devices (vGPU profiles and the like, " +
					"for `kohaku_mdev`), sorted by node-device name, with the types it offers and how many " +
					"instances of each can still be created. The filters do not apply: a parent need not be " +
					"a PCI device. Null when the host's libvirt cannot list them (a warning says why).",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"node_device": schema.StringAttribute{Computed: true, Description: "libvirt's node-device name, e.g. `pci_0000_41_00_0` or `mtty_mtty`: `kohaku_mdev.parent` takes it."},
					"address":     schema.StringAttribute{Computed: true, Description: "The parent's PCI address when it is a PCI device (`kohaku_mdev.parent` takes it too); empty otherwise."},
					"mdev_types": schema.ListNestedAttribute{Computed: true, Description: "The types the parent offers, in the order it lists them.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"id":                  schema.StringAttribute{Computed: true, Description: "The type's id, e.g. `nvidia-35` or `mtty-2`: `kohaku_mdev.type` takes it."},
							"name":                schema.StringAttribute{Computed: true, Description: "The vendor's name for the type, e.g. `GRID T4-16Q`; empty when it gives none."},
							"device_api":          schema.StringAttribute{Computed: true, Description: "The device API the instances offer, e.g. `vfio-pci`."},
							"available_instances": schema.Int64Attribute{Computed: true, Description: "How many more instances of the type the parent can create now."},
						}},
					},
				}},
			},
		},
	}
}

func (d *pciDevicesDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m pciDevicesModel
	c := d.data.modelClient(ctx, req.Config, &m, &m.Host, &resp.Diagnostics)
	if c == nil {
		return
	}
	inv, err := newBinder(ctx, c).Inventory(ctx)
	if err != nil {
		addError(&resp.Diagnostics, "Reading the host's PCI devices", err)
		return
	}
	host := m.Host.ValueString()
	if host == "" {
		host = "default"
	}
	m.ID = types.StringValue(fmt.Sprintf("%s/%s/%s", host, m.VendorID.ValueString(), m.ClassPrefix.ValueString()))
	m.IOMMUEnabled = types.BoolValue(inv.HasIOMMU())
	m.Devices = pciDevicesFrom(ctx, c, inv.Filter(m.VendorID.ValueString(), m.ClassPrefix.ValueString()))
	parents, err := mdev.Manager{Host: c}.Parents(ctx)
	if err != nil {
		resp.Diagnostics.AddWarning("Cannot list the host's mediated device parents", err.Error()+"\n\nmdev_parents is null.")
	} else {
		m.MdevParents = mdevParentsFrom(parents)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// pciDeviceAttributes describes one PCI function, as kohaku_pci_devices and
// kohaku_host's gpus list it.
func pciDeviceAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"address":      schema.StringAttribute{Computed: true, Description: "PCI address `DDDD:BB:SS.F`, as `kohaku_gpu_binding.address` takes it."},
		"vendor_id":    schema.StringAttribute{Computed: true, Description: "PCI vendor id, four hex digits."},
		"vendor_name":  schema.StringAttribute{Computed: true, Description: "Vendor name from the host's PCI id database; empty when the host does not know it."},
		"product_id":   schema.StringAttribute{Computed: true, Description: "PCI product id, four hex digits."},
		"product_name": schema.StringAttribute{Computed: true, Description: "Product name from the host's PCI id database; empty when the host does not know it."},
		"class":        schema.StringAttribute{Computed: true, Description: "PCI class code, six hex digits, e.g. `030000`."},
		"class_name":   schema.StringAttribute{Computed: true, Description: "The class as lspci names it, e.g. `VGA compatible controller`."},
		"driver": schema.StringAttribute{Computed: true, Description: "The host driver bound now " +
			"(`nvidia`, `amdgpu`, `vfio-pci`, ...); empty when none is. `vfio-pci` means the function is held " +
			"for passthrough (by `kohaku_gpu_binding` or by hand) rather than used by the host."},
		"iommu_group": schema.Int64Attribute{Computed: true,
			Description: "IOMMU group number; null on a host without a usable IOMMU."},
		"iommu_group_members": schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "Every function of the device's IOMMU group, itself included, sorted: what `kohaku_gpu_binding` moves together."},
		"numa_node": schema.Int64Attribute{Computed: true, Description: "NUMA node the device is attached to; null when the host reports none."},
		"bars": schema.ListNestedAttribute{Computed: true,
			Description: "The function's base address registers that the host has sized, by index, read from " +
				"its sysfs `resource` file (libvirt does not report them). A 64-bit BAR takes two registers, so " +
				"a data-centre GPU lists 0, 1 and 3. `kohaku_vm` sizes its 64-bit PCI window from the 64-bit " +
				"prefetchable ones. Null when the host's files cannot be read (`qemu+tcp` and `qemu+tls` " +
				"connections), since only local and SSH connections can read them.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"index":        schema.Int64Attribute{Computed: true, Description: "The BAR's number, 0 to 5."},
				"size_bytes":   schema.Int64Attribute{Computed: true, Description: "The region's size in bytes, e.g. 137438953472 for 128 GiB."},
				"is_64bit":     schema.BoolAttribute{Computed: true, Description: "Whether the BAR is 64-bit: it can be placed above 4 GiB."},
				"prefetchable": schema.BoolAttribute{Computed: true, Description: "Whether the region is prefetchable memory (a GPU's frame buffer is)."},
				"io":           schema.BoolAttribute{Computed: true, Description: "Whether the region is I/O ports rather than memory."},
			}},
		},
		"reset_methods": schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "How the host's kernel can reset the function, in the order it tries them, from its " +
				"sysfs `reset_method` file: `flr` (function-level reset, the reliable one), `af_flr`, `pm` " +
				"(a D3hot power cycle), `bus` (resets everything behind the same bridge) and device-specific " +
				"ones. A GPU without `flr` may come back from a VM in a state its driver cannot use. Empty " +
				"when the kernel has no way to reset it (or is older than Linux 5.15, which has no such " +
				"file); null when the host's files cannot be read (`qemu+tcp`, `qemu+tls`)."},
		"max_vfs": schema.Int64Attribute{Computed: true, Description: "How many SR-IOV virtual functions the " +
			"function can have (`sriov_totalvfs`, as libvirt reports it); 0 when it has no SR-IOV capability."},
		"virtual_functions": schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "Its SR-IOV virtual functions enabled now (`kohaku_gpu_sriov`), sorted; empty when none are."},
		"physical_function": schema.StringAttribute{Computed: true, Description: "For a virtual function, the " +
			"address of its physical function (the GPU); null for any other function."},
		"vgpu_type": schema.Int64Attribute{Computed: true, Description: "For a virtual function with the vendor's " +
			"vGPU files (NVIDIA's `nvidia/current_vgpu_type`), the id of the vGPU type set on it, 0 for none; " +
			"null for other functions and where the host's files cannot be read."},
		"creatable_vgpu_types": schema.ListNestedAttribute{Computed: true,
			Description: "For such a virtual function, the vGPU types it can take now, as the vendor lists " +
				"them (`nvidia/creatable_vgpu_types`: nothing while it has a type; only the running type once " +
				"another VF of a time-sliced GPU has one). Null for other functions and where the host's files " +
				"cannot be read. `kohaku_vgpu.type` takes a name or an id.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"id":              schema.Int64Attribute{Computed: true, Description: "The type's id."},
				"name":            schema.StringAttribute{Computed: true, Description: "The vendor's name, e.g. `NVIDIA L40S-12Q`."},
				"framebuffer_gib": schema.Int64Attribute{Computed: true, Description: "Memory of one instance, from the name; null when the name does not say."},
				"mig_slices":      schema.Int64Attribute{Computed: true, Description: "Compute slices of a MIG-backed type; 0 for a time-sliced type."},
			}},
		},
	}
}

// readPCISysfs reads the BARs and reset methods of the devices from the
// host's sysfs where the connection can read its files; nil (unknown)
// elsewhere, or when the read fails, which is logged.
func readPCISysfs(ctx context.Context, c hosts.Host, devs []*vfio.Device) map[vfio.Address]vfio.Function {
	if !c.ReadsHostFiles() || len(devs) == 0 {
		return nil
	}
	addrs := make([]vfio.Address, 0, len(devs))
	for _, d := range devs {
		addrs = append(addrs, d.Address)
	}
	fns, err := vfio.ReadFunctions(ctx, c, addrs)
	if err != nil {
		tflog.Warn(ctx, "reading the PCI functions' sysfs files failed; bars and reset_methods are null", map[string]any{"error": err.Error()})
		return nil
	}
	return fns
}

// pciDevicesFrom converts the devices for pciDeviceAttributes, with what
// the host's sysfs says of them where it can be read; never nil.
func pciDevicesFrom(ctx context.Context, c hosts.Host, devs []*vfio.Device) []pciDeviceModel {
	out := []pciDeviceModel{}
	sysfs := readPCISysfs(ctx, c, devs)
	vgpus := readVFTypes(ctx, c, devs)
	for _, dev := range devs {
		m := pciDeviceFrom(dev, sysfs)
		if t, ok := vgpus[dev.Address]; ok {
			m.VGPUType = types.Int64Value(int64(t.Current))
			m.VGPUTypes = []vgpuTypeItem{}
			for _, ty := range t.Creatable {
				fb := types.Int64Null()
				if ty.FramebufferGiB > 0 {
					fb = types.Int64Value(int64(ty.FramebufferGiB))
				}
				m.VGPUTypes = append(m.VGPUTypes, vgpuTypeItem{ID: types.Int64Value(int64(ty.ID)), Name: types.StringValue(ty.Name),
					FramebufferGiB: fb, MIGSlices: types.Int64Value(int64(ty.MIGSlices))})
			}
		}
		out = append(out, m)
	}
	return out
}

// readVFTypes reads the vendor's vGPU files of the devices that are VFs,
// where the connection can read the host's files; nil elsewhere, or when
// the read fails, which is logged.
func readVFTypes(ctx context.Context, c hosts.Host, devs []*vfio.Device) map[vfio.Address]sriov.VFTypes {
	var vfs []vfio.Address
	for _, d := range devs {
		if d.IsVF() {
			vfs = append(vfs, d.Address)
		}
	}
	if !c.ReadsHostFiles() || len(vfs) == 0 {
		return nil
	}
	got, err := sriov.ReadVFTypes(ctx, c, vfs)
	if err != nil {
		tflog.Warn(ctx, "reading the VFs' vGPU files failed; vgpu_type and creatable_vgpu_types are null", map[string]any{"error": err.Error()})
		return nil
	}
	return got
}

// pciDeviceFrom converts a parsed node device for pciDeviceAttributes,
// with what sysfs says of it when sysfs was read.
func pciDeviceFrom(dev *vfio.Device, sysfs map[vfio.Address]vfio.Function) pciDeviceModel {
	out := pciDeviceModel{
		Address:      types.StringValue(dev.Address.String()),
		VendorID:     types.StringValue(fmt.Sprintf("%04x", dev.VendorID)),
		VendorName:   types.StringValue(dev.VendorName),
		ProductID:    types.StringValue(fmt.Sprintf("%04x", dev.ProductID)),
		ProductName:  types.StringValue(dev.ProductName),
		Class:        types.StringValue(dev.ClassHex()),
		ClassName:    types.StringValue(dev.ClassName()),
		Driver:       types.StringValue(dev.Driver),
		IOMMUGroup:   types.Int64Null(),
		GroupMembers: []types.String{},
		NUMANode:     types.Int64Null(),
		MaxVFs:       types.Int64Value(int64(dev.MaxVFs)),
		VFs:          []types.String{},
		PF:           types.StringNull(),
		VGPUType:     types.Int64Null(),
	}
	for _, a := range dev.VFs {
		out.VFs = append(out.VFs, types.StringValue(a.String()))
	}
	if dev.PhysFunction != nil {
		out.PF = types.StringValue(dev.PhysFunction.String())
	}
	if dev.HasIOMMU() {
		out.IOMMUGroup = types.Int64Value(int64(dev.Group))
		for _, a := range dev.GroupMembers {
			out.GroupMembers = append(out.GroupMembers, types.StringValue(a.String()))
		}
	}
	if dev.NUMANode >= 0 {
		out.NUMANode = types.Int64Value(int64(dev.NUMANode))
	}
	if fn, ok := sysfs[dev.Address]; ok {
		out.BARs = []pciBARModel{}
		for _, b := range fn.BARs {
			out.BARs = append(out.BARs, pciBARModel{
				Index: types.Int64Value(int64(b.Index)), SizeBytes: types.Int64Value(int64(b.Size)),
				Is64Bit: types.BoolValue(b.Is64), Prefetchable: types.BoolValue(b.Prefetchable), IO: types.BoolValue(b.IO),
			})
		}
		out.ResetMethods = []types.String{}
		for _, r := range fn.ResetMethods {
			out.ResetMethods = append(out.ResetMethods, types.StringValue(r))
		}
	}
	return out
}

func mdevParentsFrom(ps []mdev.Parent) []mdevParentModel {
	out := make([]mdevParentModel, 0, len(ps))
	for _, p := range ps {
		pm := mdevParentModel{NodeDevice: types.StringValue(p.Name), Address: types.StringValue(mdev.ParentAddress(p.Name)), Types: []mdevTypeModel{}}
		for _, t := range p.Types {
			pm.Types = append(pm.Types, mdevTypeModel{
				ID: types.StringValue(t.ID), Name: types.StringValue(t.Name), DeviceAPI: types.StringValue(t.DeviceAPI),
				AvailableInstances: types.Int64Value(int64(t.Available)),
			})
		}
		out = append(out, pm)
	}
	return out
}
