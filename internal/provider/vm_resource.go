package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

var (
	_ resource.ResourceWithConfigure      = (*vmResource)(nil)
	_ resource.ResourceWithImportState    = (*vmResource)(nil)
	_ resource.ResourceWithValidateConfig = (*vmResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*vmResource)(nil)
)

// Default operation timeouts; the timeouts block overrides them.
const (
	vmCreateTimeout = 10 * time.Minute
	vmUpdateTimeout = 10 * time.Minute
	vmDeleteTimeout = 5 * time.Minute
	// vmCleanupTimeout bounds the rollback of a failed create, which runs
	// even when the create's own deadline has passed.
	vmCleanupTimeout = 2 * time.Minute
)

// privateDomainGone marks, in private state, a VM whose domain was removed
// outside Terraform while a volume it created is still there: the next plan
// replaces the VM so the leftover volume is deleted and made anew.
const privateDomainGone = "domain_gone"

var objectAsOptions = basetypes.ObjectAsOptions{}

func newVMResource() resource.Resource { return &vmResource{} }

type vmResource struct {
	data *providerData
}

func (r *vmResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vm"
}

func (r *vmResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A VM: a libvirt domain with a boot disk (a qcow2 overlay on a base image, an existing volume, or direct kernel boot), an optional cloud-init seed as a read-only CD-ROM, network interfaces, shared folders and PCI devices passed through with VFIO. " +
			"Create defines the domain and starts it; a failure rolls back everything the create made. Changes to hardware (vCPUs, memory, interfaces, shared folders, PCI devices) are made in place by redefining the domain with the same UUID and restarting it if it runs. " +
			"Destroy shuts the guest down (ACPI, then forced off after `shutdown_timeout`), undefines the domain with its NVRAM, and deletes the volumes this resource created - never the base image or the seed.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The domain's UUID.",
				PlanModifiers: keep,
			},
			"uuid": schema.StringAttribute{
				Computed:      true,
				Description:   "The domain's UUID, chosen by libvirt when the VM is created. It stays the same across in-place updates.",
				PlanModifiers: keep,
			},
			"host": schema.StringAttribute{
				Optional:      true,
				Description:   "Key of the provider's `hosts` map to create the VM on. Empty means the provider's default connection. Changing it replaces the VM.",
				PlanModifiers: replace,
			},
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "Domain name, unique on the host: letters, digits, `.`, `_` and `-`, at most 63 characters, starting with a letter or digit. Create fails if a domain of that name already exists. Changing it replaces the VM.",
				PlanModifiers: replace,
			},
			"type": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				Default:       stringdefault.StaticString(string(domain.TypeKVM)),
				Description:   "Domain type: `kvm` (hardware virtualisation, the default) or `qemu` (software emulation with TCG, for hosts where KVM is missing or does not work, such as nested hosts). Changing it replaces the VM.",
				PlanModifiers: replace,
			},
			"vcpu": schema.Int64Attribute{
				Optional:    true,
				Computed:    true,
				Default:     int64default.StaticInt64(vmDefaultVCPU),
				Description: fmt.Sprintf("Number of virtual CPUs, 1 to %d. Default `%d`. Changed in place: the domain is redefined and, if it runs, restarted.", domain.MaxVCPU, vmDefaultVCPU),
			},
			"memory_mib": schema.Int64Attribute{
				Optional:    true,
				Computed:    true,
				Default:     int64default.StaticInt64(vmDefaultMemoryMiB),
				Description: fmt.Sprintf("Memory in MiB, at least %d. Default `%d`. Changed in place: the domain is redefined and, if it runs, restarted.", domain.MinMemoryMiB, vmDefaultMemoryMiB),
			},
			"machine": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				Default:       stringdefault.StaticString(string(domain.MachineQ35)),
				Description:   "QEMU machine family: `q35` (PCI Express, the default; needed for GPU passthrough) or `pc` (legacy i440fx). libvirt picks the newest version of the family the host has. Changing it replaces the VM.",
				PlanModifiers: replace,
			},
			"firmware": schema.StringAttribute{
				Optional:      true,
				Computed:      true,
				Default:       stringdefault.StaticString(string(domain.FirmwareBIOS)),
				Description:   "Firmware: `bios` (SeaBIOS, the default) or `uefi` (OVMF chosen by libvirt, secure boot off, with a per-VM NVRAM file that destroy removes). Changing it replaces the VM.",
				PlanModifiers: replace,
			},
			"cpu_mode": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Description: "CPU model the guest sees: `host-passthrough` (the default for `kvm`), `host-model`, or `maximum` (everything the accelerator offers; the default for `qemu`, which cannot pass the host CPU through). Changed in place: the domain is redefined and, if it runs, restarted.",
			},
			"disk": schema.SingleNestedAttribute{
				Optional: true,
				Description: "The boot disk, attached as virtio `vda`. Either `base_volume`: the VM gets its own qcow2 overlay volume `<name>-root.qcow2` in `pool`, backed by the base image, which stays untouched and can be shared by many VMs; destroy deletes the overlay. " +
					"Or `volume`: an existing volume in `pool` is used as it is and never deleted. Without a disk the VM boots `kernel` and `initrd` alone. Any change to the disk replaces the VM.",
				PlanModifiers: []planmodifier.Object{objectplanmodifier.RequiresReplace()},
				Attributes: map[string]schema.Attribute{
					"base_volume": schema.StringAttribute{
						Optional:    true,
						Description: "Name of the base image volume (for example a cloud image in qcow2 or raw) the overlay is backed by. Exactly one of `base_volume` and `volume` is set.",
						Validators:  []validator.String{stringvalidator.LengthAtLeast(1)},
					},
					"base_pool": schema.StringAttribute{
						Optional:    true,
						Computed:    true,
						Default:     stringdefault.StaticString(vmDefaultPool),
						Description: "Storage pool of `base_volume`. Default `default`.",
						Validators:  []validator.String{stringvalidator.LengthAtLeast(1)},
					},
					"volume": schema.StringAttribute{
						Optional:    true,
						Description: "Name of an existing volume in `pool` to boot from as it is (qcow2 or raw, as libvirt reports it). The VM writes to it, and destroy leaves it in place.",
						Validators:  []validator.String{stringvalidator.LengthAtLeast(1)},
					},
					"pool": schema.StringAttribute{
						Optional:    true,
						Computed:    true,
						Default:     stringdefault.StaticString(vmDefaultPool),
						Description: "Storage pool the overlay is created in, or that holds `volume`. Default `default`.",
						Validators:  []validator.String{stringvalidator.LengthAtLeast(1)},
					},
					"size_gib": schema.Int64Attribute{
						Optional:    true,
						Description: "Virtual size of the overlay in GiB, at least the base image's size; the guest grows its filesystem into the extra space (cloud-init's growpart does). Default: the base image's size. Only with `base_volume`.",
						Validators:  []validator.Int64{int64validator.AtLeast(1)},
					},
				},
			},
			"kernel": schema.StringAttribute{
				Optional:    true,
				Description: "Absolute host path of a kernel to boot directly (direct kernel boot), with or without a disk. Changed in place: the domain is redefined and, if it runs, restarted.",
			},
			"initrd": schema.StringAttribute{
				Optional:    true,
				Description: "Absolute host path of the initrd for `kernel`; required when there is no disk. Changed in place like `kernel`.",
			},
			"cmdline": schema.StringAttribute{
				Optional:    true,
				Description: "Kernel command line for `kernel`, for example `root=/dev/vda rw console=ttyS0`. Changed in place like `kernel`.",
			},
			"seed_id": schema.StringAttribute{
				Optional: true,
				Description: "The `id` of a `kohaku_seed` (`<pool>/<volume>`): the cloud-init seed ISO, attached as a read-only CD-ROM on the machine's natural bus (SATA on `q35`, IDE on `pc`). " +
					"Network interfaces without a `mac` take the MAC addresses the seed's network configuration matches, in order. The seed volume is never deleted by this resource. Changing it replaces the VM.",
				PlanModifiers: replace,
				Validators:    []validator.String{volumeIDValidator{what: "a kohaku_seed id"}},
			},
			"network_interface": schema.ListNestedAttribute{
				Optional:    true,
				Description: "Network interfaces, in guest order. Changed in place: the domain is redefined and, if it runs, restarted.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"type": schema.StringAttribute{
						Required:    true,
						Description: "`network` (a libvirt virtual network named by `source`), `bridge` (a host bridge named by `source`) or `user` (user-mode networking: no setup on the host, outbound only, the host is 10.0.2.2).",
					},
					"source": schema.StringAttribute{
						Optional:    true,
						Description: "The libvirt network or host bridge name; not set for `user`.",
					},
					"model": schema.StringAttribute{
						Optional:    true,
						Computed:    true,
						Default:     stringdefault.StaticString("virtio"),
						Description: "Emulated device: `virtio` (the default), `e1000e`, `e1000` or `rtl8139`.",
					},
					"mac": schema.StringAttribute{
						Optional:    true,
						Computed:    true,
						Description: "MAC address. Default: the seed's MAC for this interface when `seed_id` is set and the seed names one, otherwise the address libvirt assigns (52:54:00:...), which is read back. An interface keeps its address when others are added or removed.",
					},
				}},
			},
			"shared_folder": schema.ListNestedAttribute{
				Optional:    true,
				Description: "Host directories the guest mounts by tag (for example `mount -t 9p -o trans=virtio,version=9p2000.L kohaku_shared /mnt`). Changed in place: the domain is redefined and, if it runs, restarted.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"source": schema.StringAttribute{
						Required:    true,
						Description: "Absolute path of the host directory. On a local host (`qemu:///system`) it must exist when the VM is created or updated.",
					},
					"tag": schema.StringAttribute{
						Required:    true,
						Description: fmt.Sprintf("Mount tag the guest uses, unique per VM: at most %d bytes for 9p, %d for virtiofs.", domain.Max9pTagLen, domain.MaxVirtiofsTagLen),
					},
					"driver": schema.StringAttribute{
						Optional:    true,
						Computed:    true,
						Default:     stringdefault.StaticString(string(domain.Share9p)),
						Description: "`9p` (virtio-9p, the default) or `virtiofs` (needs virtiofsd on the host; Kohaku adds the shared memory backing it needs).",
					},
					"access_mode": schema.StringAttribute{
						Optional:    true,
						Computed:    true,
						Default:     stringdefault.StaticString(string(domain.AccessPassthrough)),
						Description: "How guest file ownership maps onto the host: `passthrough` (the default; the only mode virtiofs has), `mapped` (ownership kept in extended attributes) or `squash`.",
					},
					"read_only": schema.BoolAttribute{
						Optional:    true,
						Computed:    true,
						Default:     booldefault.StaticBool(false),
						Description: "Export the directory read-only (9p only). Default `false`.",
					},
				}},
			},
			"gpus": schema.SetAttribute{
				Optional:    true,
				ElementType: types.StringType,
				Description: "`id`s of `kohaku_gpu_binding` resources (`<pci address>` or `<host>/<pci address>`). Each binding is passed through whole: create and update read the device's IOMMU group from the host and add one `<hostdev managed='no'>` (the binding, not libvirt, moves devices to vfio-pci) for every function of the group that is on vfio-pci, such as a GPU and its HDMI audio, so the other functions need no `hostdevs` entry. PCI bridges in the group stay out, as the binding leaves them on their own driver. " +
					"A device that is not on vfio-pci is refused: bind it with `kohaku_gpu_binding` first. Refresh reports the group's functions under their `gpus` entry, not in `hostdevs`. Changed in place: the domain is redefined and, if it runs, restarted.",
			},
			"hostdevs": schema.SetAttribute{
				Optional:    true,
				ElementType: types.StringType,
				Description: "Further host PCI functions to pass through, as `DDDD:BB:SS.F` (for example `0000:01:00.1`), attached like `gpus` but one function each and unchecked: something else must bind them to vfio-pci first. The functions a `gpus` entry brings need no entry here (one listed in both is passed through once). After an import every passed-through device shows here; moving the devices of a binding to `gpus` then changes nothing on the host. Changed in place like `gpus`.",
			},
			"guest_agent": schema.BoolAttribute{
				Optional:    true,
				Computed:    true,
				Default:     booldefault.StaticBool(true),
				Description: "Add the virtio-serial channel the QEMU guest agent talks on. Default `true`. Changed in place: the domain is redefined and, if it runs, restarted.",
			},
			"serial_log_path": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Description: "Host file the serial console is appended to. Default `/var/log/libvirt/qemu/<name>-serial.log`. Changed in place: the domain is redefined and, if it runs, restarted.",
			},
			"autostart": schema.BoolAttribute{
				Optional:    true,
				Computed:    true,
				Default:     booldefault.StaticBool(false),
				Description: "Start the VM when the host's libvirt starts. Default `false`. Changed in place.",
			},
			"running": schema.BoolAttribute{
				Optional:    true,
				Computed:    true,
				Default:     booldefault.StaticBool(true),
				Description: "Whether the VM should run. Default `true`. Changed in place: `false` shuts the guest down (ACPI, forced off after `shutdown_timeout`), `true` starts it. A VM stopped outside Terraform shows as a change back to `true`.",
			},
			"shutdown_timeout": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Default:     stringdefault.StaticString(vmDefaultShutdownTimeout),
				Description: "How long the guest gets to power off after an ACPI shutdown request (when it is stopped, restarted for an update, or destroyed) before it is forced off, as a Go duration. `0s` forces it off at once. Always bounded by the operation's timeout. Default `30s`. Changed in place.",
				Validators:  []validator.String{nonNegativeDurationValidator{}},
			},
			"overlay_volume": schema.StringAttribute{
				Computed:      true,
				Description:   "`<pool>/<volume>` of the overlay volume this resource created for the disk, which destroy deletes. Unset when the VM has none (an existing `volume`, or no disk).",
				PlanModifiers: keep,
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{
				Create: true, Update: true, Delete: true,
				CreateDescription: "How long creating may take, including starting the VM. Default `10m`.",
				UpdateDescription: "How long an update may take, including a restart. Default `10m`.",
				DeleteDescription: "How long destroying may take, including the graceful shutdown. Default `5m`.",
			}),
		},
	}
	for name, a := range waitSchema() {
		resp.Schema.Attributes[name] = a
	}
}

func (r *vmResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

// ModifyPlan fills the defaults that depend on other attributes, and plans a
// replacement when the domain was removed outside Terraform but a volume it
// owned remains.
func (r *vmResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan, config vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if config.CPUMode.IsNull() {
		if plan.Type.IsUnknown() {
			plan.CPUMode = types.StringUnknown()
		} else {
			plan.CPUMode = types.StringValue(string(domain.DefaultCPUMode(domain.Type(plan.Type.ValueString()))))
		}
	}
	if config.SerialLogPath.IsNull() {
		if plan.Name.IsUnknown() {
			plan.SerialLogPath = types.StringUnknown()
		} else {
			plan.SerialLogPath = types.StringValue(domain.DefaultSerialLogPath(plan.Name.ValueString()))
		}
	}
	if !req.State.Raw.IsNull() {
		var state vmModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if resp.Diagnostics.HasError() {
			return
		}
		plan.NetworkInterfaces = keepNICMACs(ctx, plan.NetworkInterfaces, config.NetworkInterfaces, state.NetworkInterfaces, &resp.Diagnostics)
		if gone, _ := req.Private.GetKey(ctx, privateDomainGone); len(gone) > 0 {
			plan.ID, plan.UUID = types.StringUnknown(), types.StringUnknown()
			resp.RequiresReplace = append(resp.RequiresReplace, path.Root("id"))
			resp.Diagnostics.AddWarning("VM was removed outside Terraform",
				fmt.Sprintf("The domain %s no longer exists, but the volume it was created with (%s) does. The plan replaces the VM: the leftover volume is deleted and the VM created anew. To keep the volume's data, copy it before applying.", plan.Name.ValueString(), plan.OverlayVolume.ValueString()))
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// keepNICMACs plans the MAC of each interface whose mac is not configured:
// the address of the same interface in state, so interfaces keep their MACs
// when others are added, removed or reordered. An interface is the same when
// type, source and model match; an interface with no match gets a new address
// at apply (unknown in the plan).
func keepNICMACs(ctx context.Context, plan, config, state types.List, diags *diag.Diagnostics) types.List {
	if plan.IsNull() || plan.IsUnknown() || config.IsUnknown() || state.IsNull() || state.IsUnknown() {
		return plan
	}
	var p, c, s []vmNICModel
	diags.Append(plan.ElementsAs(ctx, &p, false)...)
	diags.Append(config.ElementsAs(ctx, &c, false)...)
	diags.Append(state.ElementsAs(ctx, &s, false)...)
	if diags.HasError() || len(c) != len(p) {
		return plan
	}
	same := func(a, b vmNICModel) bool {
		return a.Type.Equal(b.Type) && a.Source.Equal(b.Source) && a.Model.Equal(b.Model)
	}
	taken := map[string]bool{} // MACs configured explicitly
	for i := range p {
		if !c[i].MAC.IsNull() && !c[i].MAC.IsUnknown() {
			taken[strings.ToLower(c[i].MAC.ValueString())] = true
		}
	}
	used := make([]bool, len(s))
	assign := func(i, j int) bool {
		mac := s[j].MAC
		if used[j] || mac.IsNull() || mac.IsUnknown() || taken[strings.ToLower(mac.ValueString())] || !same(p[i], s[j]) {
			return false
		}
		used[j], p[i].MAC = true, mac
		return true
	}
	var open []int
	for i := range p {
		if !c[i].MAC.IsNull() {
			continue // configured (or unknown until apply)
		}
		p[i].MAC = types.StringUnknown()
		if i < len(s) && assign(i, i) { // the same position first
			continue
		}
		open = append(open, i)
	}
	for _, i := range open {
		for j := range s {
			if assign(i, j) {
				break
			}
		}
	}
	out, d := types.ListValueFrom(ctx, types.ObjectType{AttrTypes: vmNICAttrTypes}, p)
	diags.Append(d...)
	return out
}

// vmCreate records what a create has made, so a failure can undo it.
type vmCreate struct {
	c       *virt.Client
	name    string
	overlay *domain.VolumeRef
	defined *virt.DomainRef
	// maybeDefined is set when defining failed in a way that leaves its
	// outcome unknown (the connection was lost mid-call): rollback then looks
	// the domain up by name, which was checked to be free before.
	maybeDefined bool
}

// rollback removes everything this create made, with its own deadline so it
// runs even after the create's timeout. It returns what it did and what it
// could not undo.
func (vc *vmCreate) rollback(ctx context.Context) (done []string, left []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), vmCleanupTimeout)
	defer cancel()
	// A host that cannot be reached (libvirtd restarting) is waited for:
	// each undo step runs again until libvirt answers, for a while.
	retry := func(fn func() error) error { return virt.WhileUnreachable(ctx, virt.Unreachable, fn) }
	if vc.defined == nil && vc.maybeDefined {
		var ref virt.DomainRef
		err := retry(func() (err error) { ref, err = vc.c.LookupDomain(ctx, vc.name); return err })
		if err == nil {
			vc.defined = &ref
		} else if !errors.Is(err, virt.ErrDomainNotFound) {
			left = append(left, fmt.Sprintf("domain %s may have been defined (%v): virsh undefine --nvram %s", vc.name, err, vc.name))
		}
	}
	if vc.defined != nil {
		if err := retry(func() error { _, err := vc.c.StopDomain(ctx, *vc.defined, 0); return err }); err != nil {
			left = append(left, fmt.Sprintf("domain %s is still running (%v): virsh destroy %s; virsh undefine --nvram %s", vc.name, err, vc.name, vc.name))
		} else if err := retry(func() error { return vc.c.UndefineDomain(ctx, *vc.defined) }); err != nil {
			left = append(left, fmt.Sprintf("domain %s is still defined (%v): virsh undefine --nvram %s", vc.name, err, vc.name))
		} else {
			done = append(done, "undefined domain "+vc.name)
		}
	}
	if vc.overlay != nil {
		if err := retry(func() error { return vc.c.RemoveVolume(ctx, vc.overlay.Pool, vc.overlay.Volume) }); err != nil {
			left = append(left, fmt.Sprintf("overlay volume %s/%s is still there (%v): virsh vol-delete --pool %s %s", vc.overlay.Pool, vc.overlay.Volume, err, vc.overlay.Pool, vc.overlay.Volume))
		} else {
			done = append(done, fmt.Sprintf("deleted overlay volume %s/%s", vc.overlay.Pool, vc.overlay.Volume))
		}
	}
	return done, left
}

func (r *vmResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Create(ctx, vmCreateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := r.data.client(plan.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	in := plan.specFrom(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	spec := in.Spec
	vc := &vmCreate{c: c, name: spec.Name}
	summary := fmt.Sprintf("Creating VM %s", spec.Name)
	// Calls that make something run to completion even when the create
	// timeout ends meanwhile (each is still bounded by the provider's
	// call_timeout): a call abandoned halfway would leave an object this
	// create cannot account for. The timeout is checked between them.
	steady := context.WithoutCancel(ctx)
	expired := func() error {
		if ctx.Err() != nil {
			return fmt.Errorf("the create timeout (%s) ran out; raise timeouts.create if the host is slow", timeout)
		}
		return nil
	}

	// fail reports a failed step. Before anything was made there is nothing
	// to undo; afterwards everything is rolled back, and what could not be is
	// kept in state (tainted) so destroy can finish the job.
	fail := func(step string, err error) {
		if vc.overlay == nil && vc.defined == nil && !vc.maybeDefined {
			addError(&resp.Diagnostics, fmt.Sprintf("%s failed at step %q", summary, step), fmt.Errorf("%w\n\nNothing was created.", err))
			return
		}
		done, left := vc.rollback(ctx)
		msg := fmt.Sprintf("%v\n\nRolled back: %s.", err, strings.Join(done, "; "))
		if len(left) > 0 {
			msg += "\n\nCould not undo, remove by hand or run terraform destroy: " + strings.Join(left, "; ") + "."
			plan.fillUnknowns(vc)
			resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
		}
		addError(&resp.Diagnostics, fmt.Sprintf("%s failed at step %q", summary, step), errors.New(msg))
	}

	// 1. Checks that need the host, before anything is made.
	if ref, err := c.LookupDomain(ctx, spec.Name); err == nil {
		fail("check the name", fmt.Errorf("a domain named %s already exists (UUID %s) and this resource did not create it. Choose another name, remove that domain (virsh undefine --nvram %s), or bring it under Terraform with terraform import", spec.Name, ref.UUID, spec.Name))
		return
	} else if !errors.Is(err, virt.ErrDomainNotFound) {
		fail("check the name", err)
		return
	}
	if p, err := checkShareSources(c, in.Spec.SharedFolders); err != nil {
		resp.Diagnostics.AddAttributeError(p, summary+" failed at step \"check shared folders\"", err.Error()+"\n\nNothing was created.")
		return
	}
	// Each gpus entry brings the functions of its IOMMU group that its
	// binding moved to vfio-pci (a GPU and its HDMI audio).
	groups, ok := expandPlanGPUs(ctx, c, &plan, summary, "Nothing was created.", &resp.Diagnostics)
	if !ok {
		return
	}
	spec.Hostdevs = groups.hostdevs(spec.Hostdevs)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateGPUGroups, groups.privateBytes())...)
	var seedInfo *seed.Inspection
	if spec.Seed != nil {
		if _, err := c.VolumeInfo(ctx, spec.Seed.Pool, spec.Seed.Volume); err != nil {
			fail("look up the seed", fmt.Errorf("seed_id %s: %w", plan.SeedID.ValueString(), err))
			return
		}
		if needsSeedMACs(&spec) || plan.Running.ValueBool() && plan.WaitFor.ValueString() != string(ready.ModeNone) {
			var err error
			if seedInfo, err = inspectSeed(ctx, c, spec.Seed.Pool, spec.Seed.Volume); err != nil {
				fail("read the seed", fmt.Errorf("%w. Set mac on every network_interface and wait_for = \"none\" or \"guest_agent\" to skip reading the seed", err))
				return
			}
			applySeedMACs(&spec, seedInfo.MACs)
		}
	}
	// The wait is set up before anything is made: a guest can be quick,
	// and a setup error should leave nothing behind.
	wait, err := r.prepareWait(&plan, seedInfo, func(w string) { resp.Diagnostics.AddWarning(summary, w) })
	if err != nil {
		fail("prepare the readiness wait", err)
		return
	}
	defer wait.close()
	disk := plan.disk(ctx, &resp.Diagnostics)
	if in.DiskMode == "volume" {
		vol, err := c.VolumeInfo(ctx, spec.Disk.Pool, spec.Disk.Volume)
		if err != nil {
			fail("look up the disk volume", err)
			return
		}
		f, err := diskFormat(vol)
		if err != nil {
			fail("look up the disk volume", err)
			return
		}
		spec.Disk.Format = f
	}

	// 2. The overlay volume.
	if in.DiskMode == "base_volume" {
		size := disk.SizeGiB.ValueInt64() << 30
		if err := expired(); err != nil {
			fail("create the overlay volume", err)
			return
		}
		vol, err := c.CreateOverlay(steady, spec.Disk.Pool, spec.Disk.Volume, disk.BasePool.ValueString(), disk.BaseVolume.ValueString(), size)
		var lost *virt.ConnectionError
		if errors.As(err, &lost) {
			// The outcome is unknown; the name was free when the call
			// checked, so deleting it is safe (and a no-op if absent).
			vc.overlay = &domain.VolumeRef{Pool: spec.Disk.Pool, Volume: spec.Disk.Volume}
		}
		if err != nil {
			fail("create the overlay volume", err)
			return
		}
		vc.overlay = &domain.VolumeRef{Pool: vol.Pool, Volume: vol.Name}
		spec.Owner.Volumes = []domain.VolumeRef{*vc.overlay}
		tflog.Debug(ctx, "created overlay volume", map[string]any{"volume": vol.Pool + "/" + vol.Name, "backing": vol.BackingPath})
	}

	// 3. Define.
	xml, err := domain.Marshal(spec)
	if err != nil {
		fail("build the domain XML", err)
		return
	}
	if err := expired(); err != nil {
		fail("define the domain", err)
		return
	}
	ref, err := c.DefineDomain(steady, spec.Name, xml)
	if err != nil {
		var lost *virt.ConnectionError
		vc.maybeDefined = errors.As(err, &lost)
		fail("define the domain", err)
		return
	}
	vc.defined = &ref

	// 4. Autostart.
	if plan.Autostart.ValueBool() {
		if err := expired(); err != nil {
			fail("set autostart", err)
			return
		}
		if err := c.SetAutostart(steady, ref, true); err != nil {
			fail("set autostart", err)
			return
		}
	}

	// 5. Start.
	if plan.Running.ValueBool() {
		if err := expired(); err != nil {
			fail("start the domain", err)
			return
		}
		if err := c.StartDomain(steady, ref); err != nil {
			fail("start the domain", err)
			return
		}
		// 6. Readiness, bounded by ctx, which carries the create timeout.
		out, err := wait.wait(ctx, c, spec.Name, serialLogOf(spec))
		if err == nil && out != nil {
			var warnings []string
			warnings, err = ready.Check(spec.Name, out.Report)
			for _, w := range warnings {
				resp.Diagnostics.AddWarning(fmt.Sprintf("VM %s is ready, degraded", spec.Name), w)
			}
		}
		if err != nil {
			if plan.OnReadyFailure.ValueString() == deleteOnFailure {
				fail("wait for the guest to be ready", err)
				return
			}
			// Keep the VM for inspection: stored with an error, Terraform
			// marks it tainted and the next apply replaces it.
			plan.Guest = nullGuest()
			if view, rerr := readVM(steady, c, ref, &plan); rerr == nil {
				view.GPUGroups = groups
				var m vmModel
				m.fromDomain(ctx, view, &plan, &resp.Diagnostics)
				resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
			} else {
				plan.fillUnknowns(vc)
				resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
			}
			addError(&resp.Diagnostics, fmt.Sprintf("%s failed at step %q", summary, "wait for the guest to be ready"),
				fmt.Errorf("%w\n\nThe VM was kept for inspection (on_ready_failure = \"keep\") and is tainted: the next apply replaces it. Set on_ready_failure = \"destroy\" to have a failed create remove it.", err))
			return
		}
		if out != nil {
			plan.Guest = guestValue(wait.mode, out)
		}
	}
	if plan.Guest.IsUnknown() {
		plan.Guest = nullGuest()
	}

	// 7. Read back what libvirt made of it.
	view, err := readVM(steady, c, ref, &plan)
	if err != nil {
		fail("read the new domain back", err)
		return
	}
	view.GPUGroups = groups
	if plan.Running.ValueBool() && !view.Status.Active {
		fail("start the domain", fmt.Errorf("the domain stopped right after it started (libvirt state %d); the guest's serial console is logged to %s", view.Status.State, view.Observed.Spec.SerialLogPath))
		return
	}
	var m vmModel
	m.fromDomain(ctx, view, &plan, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// fillUnknowns makes a plan storable as the state of a half-made VM.
func (m *vmModel) fillUnknowns(vc *vmCreate) {
	m.ID, m.UUID = types.StringValue(""), types.StringValue("")
	if vc.defined != nil {
		m.ID, m.UUID = types.StringValue(vc.defined.UUID), types.StringValue(vc.defined.UUID)
	}
	m.OverlayVolume = types.StringNull()
	if vc.overlay != nil {
		m.OverlayVolume = types.StringValue(vc.overlay.Pool + "/" + vc.overlay.Volume)
	}
	if m.CPUMode.IsUnknown() {
		m.CPUMode = types.StringNull()
	}
	if m.SerialLogPath.IsUnknown() {
		m.SerialLogPath = types.StringNull()
	}
	if !m.NetworkInterfaces.IsNull() && !m.NetworkInterfaces.IsUnknown() {
		var elems []attr.Value
		for _, e := range m.NetworkInterfaces.Elements() {
			o := e.(types.Object)
			attrs := o.Attributes()
			if attrs["mac"].IsUnknown() {
				attrs["mac"] = types.StringNull()
			}
			elems = append(elems, types.ObjectValueMust(vmNICAttrTypes, attrs))
		}
		m.NetworkInterfaces = types.ListValueMust(types.ObjectType{AttrTypes: vmNICAttrTypes}, elems)
	}
}

func diskFormat(v *virt.VolumeDetail) (domain.DiskFormat, error) {
	switch v.Format {
	case "qcow2", "":
		if v.Format == "" {
			return domain.DiskRaw, nil
		}
		return domain.DiskQCOW2, nil
	case "raw", "iso":
		return domain.DiskRaw, nil
	}
	return "", fmt.Errorf("volume %s/%s is in %s format; Kohaku boots qcow2 or raw volumes", v.Pool, v.Name, v.Format)
}

// checkShareSources checks that shared folders exist when the host is this
// machine (unix transport); remote hosts check when the VM starts.
func checkShareSources(c *virt.Client, shares []domain.SharedFolder) (path.Path, error) {
	if c.Endpoint().Transport != virt.TransportUnix {
		return path.Empty(), nil
	}
	for i, sf := range shares {
		p := path.Root("shared_folder").AtListIndex(i).AtName("source")
		fi, err := os.Stat(sf.Source)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return p, fmt.Errorf("shared_folder[%d].source: %s does not exist on this host. Create the directory first (mkdir -p %s), for example with a local_file or null_resource the VM depends on", i, sf.Source, sf.Source)
		case err != nil:
			return p, fmt.Errorf("shared_folder[%d].source: %v", i, err)
		case !fi.IsDir():
			return p, fmt.Errorf("shared_folder[%d].source: %s is not a directory; a shared folder exports a directory", i, sf.Source)
		}
	}
	return path.Empty(), nil
}

func (r *vmResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state vmModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	ref := virt.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()}
	if ref.UUID == "" {
		ref.UUID = state.ID.ValueString()
	}
	view, err := readVM(ctx, c, ref, &state)
	if errors.Is(err, virt.ErrDomainNotFound) || (err == nil && view == nil) || ref.UUID == "" {
		r.domainGone(ctx, c, &state, resp)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, "Reading VM "+ref.String(), err)
		return
	}
	recorded, d := req.Private.GetKey(ctx, privateGPUGroups)
	resp.Diagnostics.Append(d...)
	view.GPUGroups = gpuGroupsFromPrivate(recorded)
	var m vmModel
	m.fromDomain(ctx, view, &state, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateDomainGone, nil)...)
}

// domainGone handles a domain removed outside Terraform: with nothing of it
// left the resource leaves the state (the next plan creates it); with its
// overlay volume still there it stays, marked for replacement, so the volume is
// deleted rather than orphaned.
func (r *vmResource) domainGone(ctx context.Context, c *virt.Client, state *vmModel, resp *resource.ReadResponse) {
	if pool, vol, ok := parseVolumeID(state.OverlayVolume.ValueString()); ok {
		exists, err := c.VolumeExists(ctx, pool, vol)
		if err != nil {
			addError(&resp.Diagnostics, "Reading VM "+state.Name.ValueString(), err)
			return
		}
		if exists {
			tflog.Warn(ctx, "domain removed outside Terraform; its overlay volume remains", map[string]any{"name": state.Name.ValueString(), "volume": pool + "/" + vol})
			state.Running = types.BoolValue(false)
			resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
			resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateDomainGone, []byte(`true`))...)
			return
		}
	}
	tflog.Warn(ctx, "domain removed outside Terraform", map[string]any{"name": state.Name.ValueString(), "uuid": state.UUID.ValueString()})
	resp.State.RemoveResource(ctx)
}

// domainView is a domain as Read sees it.
type domainView struct {
	Status   *virt.DomainStatus
	Observed domain.Observed
	// Overlay is the boot disk volume this resource created, if any.
	Overlay *domain.VolumeRef
	// Owned is every volume this resource created (the overlay, and any the
	// domain's metadata records).
	Owned []domain.VolumeRef
	// Base and SizeGiB describe the overlay's backing image; they are only
	// looked up on import, when the state cannot tell.
	Base    *domain.VolumeRef
	SizeGiB int64
	// GPUGroups is what create or update recorded in private state: the
	// functions passed through for each gpus entry. Read attributes them to
	// the entry with it, without asking libvirt.
	GPUGroups gpuGroups
}

// readVM is Read's whole conversation with libvirt: ReadDomain's three calls
// on refresh, plus a few lookups of the overlay's base image on import.
func readVM(ctx context.Context, c *virt.Client, ref virt.DomainRef, prior *vmModel) (*domainView, error) {
	st, err := c.ReadDomain(ctx, ref)
	if err != nil {
		return nil, err
	}
	obs, err := domain.Parse(st.XML)
	if err != nil {
		return nil, err
	}
	v := &domainView{Status: st, Observed: obs}
	if obs.Metadata != nil {
		v.Owned = append(v.Owned, obs.Metadata.Owner.Volumes...)
	}
	if pool, vol, ok := parseVolumeID(prior.OverlayVolume.ValueString()); ok {
		ref := domain.VolumeRef{Pool: pool, Volume: vol}
		if !containsVolume(v.Owned, ref) {
			v.Owned = append(v.Owned, ref)
		}
	}
	if d := obs.Spec.Disk; d != nil {
		for _, o := range v.Owned {
			if o.Pool == d.Pool && o.Volume == d.Volume {
				v.Overlay = &o
				break
			}
		}
	}
	if v.Overlay == nil && len(v.Owned) > 0 {
		v.Overlay = &v.Owned[0]
	}
	importing := prior.Name.IsNull() || prior.Name.IsUnknown()
	if importing && v.Overlay != nil {
		ov, err := c.VolumeInfo(ctx, v.Overlay.Pool, v.Overlay.Volume)
		if err != nil {
			return nil, fmt.Errorf("the domain's overlay volume: %w", err)
		}
		if ov.BackingPath != "" {
			pool, name, err := c.VolumeByPath(ctx, ov.BackingPath)
			if err != nil {
				return nil, fmt.Errorf("the backing image %s of overlay %s/%s: %w", ov.BackingPath, ov.Pool, ov.Name, err)
			}
			v.Base = &domain.VolumeRef{Pool: pool, Volume: name}
			base, err := c.VolumeInfo(ctx, pool, name)
			if err != nil {
				return nil, err
			}
			if ov.CapacityBytes > base.CapacityBytes && ov.CapacityBytes%(1<<30) == 0 {
				v.SizeGiB = ov.CapacityBytes >> 30
			}
		}
	}
	return v, nil
}

func containsVolume(list []domain.VolumeRef, v domain.VolumeRef) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// definitionChanged reports whether the plan changes what the domain
// definition holds, and so needs a redefine (and a restart if it runs). It
// compares the specs the plan and the refreshed state describe, so moving a
// device between gpus and hostdevs, or spelling an address differently, is no
// change.
//
// The plan's gpus entries count with their whole groups (groups), and the
// state's PCI devices are the ones the domain has (observed): after an import
// all of them are hostdevs, and moving them to gpus redefines nothing.
func definitionChanged(ctx context.Context, plan, state *vmModel, groups gpuGroups, observed []string, diags *diag.Diagnostics) bool {
	p, s := plan.specFrom(ctx, diags), state.specFrom(ctx, diags)
	p.Spec.Hostdevs = groups.hostdevs(p.Spec.Hostdevs)
	s.Spec.Hostdevs = observed
	return domain.Hash(p.Spec) != domain.Hash(s.Spec)
}

func (r *vmResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Update(ctx, vmUpdateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	ref := virt.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()}
	summary := "Updating VM " + ref.Name
	recorded, d := req.Private.GetKey(ctx, privateGPUGroups)
	resp.Diagnostics.Append(d...)
	groups := gpuGroupsFromPrivate(recorded)
	// fail reports a failed step and stores what the domain now is, so the
	// next plan starts from the truth.
	fail := func(step string, err error) {
		addError(&resp.Diagnostics, fmt.Sprintf("%s failed at step %q", summary, step), err)
		if view, rerr := readVM(context.WithoutCancel(ctx), c, ref, &state); rerr == nil {
			view.GPUGroups = groups
			var m vmModel
			m.fromDomain(ctx, view, &state, &resp.Diagnostics)
			m.ShutdownTimeout, m.Timeouts = plan.ShutdownTimeout, plan.Timeouts
			resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
		}
	}
	view, err := readVM(ctx, c, ref, &state)
	if errors.Is(err, virt.ErrDomainNotFound) {
		addError(&resp.Diagnostics, summary, fmt.Errorf("%w: it was removed outside Terraform since the last refresh; run terraform apply again to create it anew", err))
		return
	}
	if err != nil {
		fail("read the domain", err)
		return
	}
	grace, _ := time.ParseDuration(plan.ShutdownTimeout.ValueString())
	// As in Create, a redefine or start is not abandoned halfway; the
	// graceful shutdown's wait is what the update timeout bounds.
	steady := context.WithoutCancel(ctx)

	// Each gpus entry brings the functions of its IOMMU group that its
	// binding moved to vfio-pci, read anew: the group is the host's to tell.
	planned, ok := expandPlanGPUs(ctx, c, &plan, summary, "Nothing was changed.", &resp.Diagnostics)
	if !ok {
		return
	}
	// Recorded before anything changes, so a refresh after a failed step
	// attributes whichever devices the domain then has.
	groups = groups.merged(planned)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateGPUGroups, groups.privateBytes())...)
	redefine := definitionChanged(ctx, &plan, &state, planned, view.Observed.Spec.Hostdevs, &resp.Diagnostics)
	if redefine {
		in := plan.specFrom(ctx, &resp.Diagnostics)
		if resp.Diagnostics.HasError() {
			return
		}
		spec := in.Spec
		spec.Hostdevs = planned.hostdevs(spec.Hostdevs)
		spec.UUID = ref.UUID
		spec.Disk = view.Observed.Spec.Disk // disk changes replace the VM
		spec.Owner.Volumes = nil
		if view.Overlay != nil {
			spec.Owner.Volumes = []domain.VolumeRef{*view.Overlay}
		}
		if spec.Seed != nil && needsSeedMACs(&spec) {
			macs, err := seedNICMACs(ctx, c, spec.Seed.Pool, spec.Seed.Volume)
			if err != nil {
				fail("read the seed", err)
				return
			}
			applySeedMACs(&spec, macs)
		}
		if p, err := checkShareSources(c, spec.SharedFolders); err != nil {
			resp.Diagnostics.AddAttributeError(p, summary+" failed at step \"check shared folders\"", err.Error()+"\n\nNothing was changed.")
			return
		}
		xml, err := domain.Marshal(spec)
		if err != nil {
			fail("build the domain XML", err)
			return
		}
		if _, err := c.DefineDomain(steady, spec.Name, xml); err != nil {
			fail("redefine the domain", err)
			return
		}
	}

	want, active := plan.Running.ValueBool(), view.Status.Active
	switch {
	case want && active && redefine:
		if _, err := c.StopDomain(ctx, ref, grace); err != nil {
			fail("stop the domain to apply the new definition", err)
			return
		}
		if err := c.StartDomain(steady, ref); err != nil {
			fail("start the domain with the new definition", err)
			return
		}
	case want && !active:
		if err := c.StartDomain(steady, ref); err != nil {
			fail("start the domain", err)
			return
		}
	case !want && active:
		if _, err := c.StopDomain(ctx, ref, grace); err != nil {
			fail("stop the domain", err)
			return
		}
	}
	if plan.Autostart.ValueBool() != view.Status.Autostart {
		if err := c.SetAutostart(steady, ref, plan.Autostart.ValueBool()); err != nil {
			fail("set autostart", err)
			return
		}
	}

	view, err = readVM(steady, c, ref, &plan)
	if err != nil {
		fail("read the domain back", err)
		return
	}
	view.GPUGroups = planned
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateGPUGroups, planned.privateBytes())...)
	if want && !view.Status.Active {
		fail("start the domain", fmt.Errorf("the domain stopped right after it started (libvirt state %d); the guest's serial console is logged to %s", view.Status.State, view.Observed.Spec.SerialLogPath))
		return
	}
	var m vmModel
	m.fromDomain(ctx, view, &plan, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *vmResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state vmModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := state.Timeouts.Delete(ctx, vmDeleteTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := r.data.client(state.Host.ValueString(), &resp.Diagnostics)
	if c == nil {
		return
	}
	ref := virt.DomainRef{UUID: state.UUID.ValueString(), Name: state.Name.ValueString()}
	summary := "Destroying VM " + ref.Name
	grace, err := time.ParseDuration(state.ShutdownTimeout.ValueString())
	if err != nil {
		grace, _ = time.ParseDuration(vmDefaultShutdownTimeout)
	}

	var owned []domain.VolumeRef
	if pool, vol, ok := parseVolumeID(state.OverlayVolume.ValueString()); ok {
		owned = append(owned, domain.VolumeRef{Pool: pool, Volume: vol})
	}
	if ref.UUID != "" {
		view, err := readVM(ctx, c, ref, &state)
		switch {
		case errors.Is(err, virt.ErrDomainNotFound):
			// Already gone: only its volumes may be left.
		case err != nil:
			addError(&resp.Diagnostics, summary+" failed at step \"read the domain\"", err)
			return
		default:
			for _, v := range view.Owned {
				if !containsVolume(owned, v) {
					owned = append(owned, v)
				}
			}
			how, err := c.StopDomain(ctx, ref, grace)
			if err != nil {
				addError(&resp.Diagnostics, summary+" failed at step \"shut down\"", err)
				return
			}
			if how == virt.StopForced && grace > 0 {
				tflog.Info(ctx, "the guest did not power off within the shutdown timeout and was forced off", map[string]any{"name": ref.Name, "shutdown_timeout": grace.String()})
			}
			if err := c.UndefineDomain(context.WithoutCancel(ctx), ref); err != nil {
				addError(&resp.Diagnostics, summary+" failed at step \"undefine\"", err)
				return
			}
		}
	}
	protected := protectedVolumes(ctx, &state, &resp.Diagnostics)
	for _, v := range owned {
		if containsVolume(protected, v) {
			tflog.Warn(ctx, "not deleting a base image or seed recorded as owned", map[string]any{"volume": v.Pool + "/" + v.Volume})
			continue
		}
		if err := c.RemoveVolume(context.WithoutCancel(ctx), v.Pool, v.Volume); err != nil {
			addError(&resp.Diagnostics, summary+" failed at step \"delete the overlay volume\"", fmt.Errorf("%w. The domain is gone; delete the volume by hand (virsh vol-delete --pool %s %s)", err, v.Pool, v.Volume))
			return
		}
	}
}

// protectedVolumes are the volumes destroy must never delete whatever the
// metadata says: the base image and the seed.
func protectedVolumes(ctx context.Context, m *vmModel, diags *diag.Diagnostics) []domain.VolumeRef {
	var out []domain.VolumeRef
	if d := m.disk(ctx, diags); d != nil {
		if !d.BaseVolume.IsNull() {
			out = append(out, domain.VolumeRef{Pool: d.BasePool.ValueString(), Volume: d.BaseVolume.ValueString()})
		}
		if !d.Volume.IsNull() {
			out = append(out, domain.VolumeRef{Pool: d.Pool.ValueString(), Volume: d.Volume.ValueString()})
		}
	}
	if pool, vol, ok := parseVolumeID(m.SeedID.ValueString()); ok {
		out = append(out, domain.VolumeRef{Pool: pool, Volume: vol})
	}
	return out
}

// ImportState accepts a domain name or UUID, optionally after a host key:
// "web-1", "6f1c2a8e-...", "gpu2/web-1".
func (r *vmResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	host, key := "", req.ID
	if h, k, ok := strings.Cut(req.ID, "/"); ok {
		host, key = h, k
	}
	if key == "" || strings.Contains(key, "/") || (host == "" && strings.Contains(req.ID, "/")) {
		resp.Diagnostics.AddError("Invalid import ID",
			fmt.Sprintf("%q is not a VM import ID. Use the domain name or UUID, after the key of the provider's hosts map for another host: \"web-1\", \"6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b\" or \"gpu2/web-1\".", req.ID))
		return
	}
	c := r.data.client(host, &resp.Diagnostics)
	if c == nil {
		return
	}
	ref, err := c.LookupDomain(ctx, key)
	if err != nil {
		addError(&resp.Diagnostics, "Importing VM "+req.ID, err)
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), ref.UUID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("uuid"), ref.UUID)...)
	if host != "" {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("host"), host)...)
	}
}

// serialLogOf is where the VM's serial console goes on the host.
func serialLogOf(spec domain.Spec) string {
	if spec.SerialLogPath != "" {
		return spec.SerialLogPath
	}
	return domain.DefaultSerialLogPath(spec.Name)
}
