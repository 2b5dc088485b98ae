package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

func (r *vmResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	// keepOrReplace keeps the value the domain has when the configuration
	// leaves it unset (an imported domain's own), and replaces the VM when
	// the configuration changes it.
	keepOrReplace := []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A VM: a libvirt domain with a boot disk (a qcow2 overlay on a base image, an existing " +
			"volume, or direct kernel boot), an optional cloud-init seed as a read-only CD-ROM, network " +
			"interfaces, shared folders and PCI devices passed through with VFIO. " +
			"Create defines the domain, starts it and waits until the guest is ready. A failure before the " +
			"wait (overlay, data disks, define, autostart, start) rolls back everything the create made; a " +
			"failed wait is handled as `on_ready_failure` says: by default (`keep`) the VM is left as it is, " +
			"usually still running and holding its disks and any GPUs passed through, and is recorded as " +
			"tainted so the next apply replaces it; `destroy` rolls it back instead. Changes " +
			"to hardware (vCPUs, memory, interfaces, shared folders, PCI devices) are made in place by " +
			"redefining the domain with the same UUID and restarting it if it runs; a larger `disk.size_gib` grows " +
			"the boot disk in place, live and without a restart on a running VM, and a smaller one is refused; " +
			"`data_disks` are hot-plugged on a running VM. A change of `host` moves the VM cold to the new host, " +
			"keeping its name, UUID, MAC addresses and disks (see `host_change`). " +
			"Destroy stops the guest (at once when every disk goes with the VM, else ACPI first and forced off " +
			"after `shutdown_timeout`; see `destroy_shutdown`), undefines the domain with its NVRAM, and " +
			"deletes the volumes this resource created and did not keep - never the base image, the seed, an " +
			"existing volume or a data disk with `keep`.",
		Attributes: attributes(
			vmMachineAttributes(replace, keep, keepOrReplace),
			vmBootAttributes(replace),
			vmIOAttributes(),
			vmPCIAttributes(),
			vmRuntimeAttributes(keep),
			vmPlacementAttributes(),
		),
		Blocks: map[string]schema.Block{
			"placement": vmPlacementBlock(),
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

// vmMachineAttributes are the VM's identity, host and machine: what it is and where it runs.
func vmMachineAttributes(replace, keep, keepOrReplace []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
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
			Optional: true,
			Computed: true,
			Description: "Key of the provider's `hosts` map to create the VM on. Empty means the provider's default " +
				"connection. Changing it moves the VM to the new host in place (see `host_change`): same name, " +
				"UUID, MAC addresses, disks' contents and data disks; with `host_change = \"replace\"` it " +
				"replaces the VM instead. With `placement`, leave it unset: create chooses the host, `\"\"` for " +
				"the default connection, and it is known after apply and kept from then on.",
			PlanModifiers: []planmodifier.String{placedHost{}, stringplanmodifier.RequiresReplaceIf(hostChangeReplaces,
				"Replaces the VM when host_change is \"replace\"; otherwise moves it.",
				"Replaces the VM when `host_change` is `\"replace\"`; otherwise moves it.")},
		},
		"host_change": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Default:  stringdefault.StaticString(hostChangeMove),
			Description: "What a change of `host` does. `move` (default): a cold move, in place: the guest is " +
				"shut down cleanly, its overlay (flattened onto its base image, so the new host needs no base " +
				"image), the data disks this resource made and its seed are copied to the new host through the " +
				"libvirt connections and verified by SHA-256 (the seed only when the new host lacks it; that " +
				"copy is then the VM's, deleted with it), the domain is defined there from its own XML " +
				"(everything Kohaku does not model comes along), removed from the old host, then started if it " +
				"ran and waited for as after a reboot (a heartbeat on the report channel, or cloud-init's " +
				"result through the guest agent, as `wait_for` says; see the fleets guide). Pools keep their names: the new host needs pools of the same names. An " +
				"interrupted move leaves the VM whole on one host, and the next apply finishes it. The plan " +
				"refuses a move of a VM with disks Kohaku did not make (an existing `disk.volume` or data disk " +
				"`volume`) or with `gpus`, `hostdevs`, `mdevs` or placed GPUs, and when the old host cannot be " +
				"reached. `replace`: destroy the VM and its disks and create it anew on the new host. `live` " +
				"(migration with the guest running) is not available yet and is refused at plan. Changing " +
				"`host_change` itself does nothing to the VM.",
			Validators: []validator.String{stringvalidator.OneOf(hostChangeMove, hostChangeReplace, hostChangeLive)},
		},
		"name": schema.StringAttribute{
			Required: true,
			Description: "Domain name, unique on the host: letters, digits, `.`, `_` and `-`, at most 63 " +
				"characters, starting with a letter or digit. Create fails if a domain of that name already " +
				"exists. Changing it replaces the VM.",
			PlanModifiers: replace,
		},
		"type": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Description: "Domain type: `kvm` (hardware virtualisation, the default for a new VM) or `qemu` (software emulation " +
				"with TCG, for hosts where KVM is missing or does not work, such as nested hosts). Unset keeps the " +
				"type the domain has, so an imported domain keeps its own. Changing it replaces the VM.",
			PlanModifiers: keepOrReplace,
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
			Optional: true,
			Computed: true,
			Description: "QEMU machine family: `q35` (PCI Express, the default for a new VM; needed for GPU passthrough) or " +
				"`pc` (legacy i440fx). libvirt picks the newest version of the family the host has; a domain's " +
				"versioned machine of the same family is kept. Unset keeps the family the domain has, so an imported " +
				"domain keeps its own. Changing it replaces the VM.",
			PlanModifiers: keepOrReplace,
		},
		"firmware": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Description: "Firmware: `bios` (SeaBIOS, the default for a new VM) or `uefi` (OVMF chosen by libvirt, secure boot " +
				"off, with a per-VM NVRAM file that destroy removes). Unset keeps the firmware the domain has, so an " +
				"imported domain keeps its own, with its loader and NVRAM. Changing it replaces the VM.",
			PlanModifiers: keepOrReplace,
		},
		"cpu_mode": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Description: "CPU model the guest sees: `host-passthrough` (the default for `kvm`), `host-model`, `maximum` " +
				"(everything the accelerator offers; the default for `qemu`, which cannot pass the host CPU through), or " +
				"`custom` (libvirt's own mode: a named model; a new VM gets the hypervisor's default model, `qemu64` " +
				"under QEMU). Unset keeps the mode the domain has while `type` stays the same, so an imported domain keeps " +
				"its own (read back as it is: a domain made without `<cpu>`, or with a model of its own, reads `custom`, " +
				"and its model, features and cache are kept as they are, also when `custom` is written in the " +
				"configuration, as generated configuration does). Changed in place: the domain is redefined and, if it " +
				"runs, restarted. Under `qemu` every instruction is emulated, and `maximum`'s newer ones (AVX2, XSAVE) " +
				"cost time: for an image that runs on baseline x86-64 (Debian, Ubuntu; not one built for x86-64-v2, such " +
				"as RHEL 9), `custom` boots it faster (a Debian guest: ready in about four fifths of the time).",
		},
	}
}

// vmBootAttributes are what the VM boots from: its disk, a kernel, its seed.
func vmBootAttributes(replace []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"disk": schema.SingleNestedAttribute{
			Optional: true,
			Description: "The boot disk, attached as virtio `vda`. Either `image` (a `kohaku_image`'s id) " +
				"or `base_volume`: the VM gets its own qcow2 overlay volume `<name>-root.qcow2` in `pool`, " +
				"backed by the base image, which stays untouched and can be shared by many VMs; destroy " +
				"deletes the overlay. " +
				"Or `volume`: an existing volume in `pool` is used as it is and never deleted. Without a disk the VM boots `kernel` and `initrd` alone. " +
				"A disk with no `kernel` boots through firmware: the image's own boot loader under `firmware` (`bios` or `uefi`), as vendors' cloud images expect. " +
				"A larger `size_gib` grows the overlay in place, with the same volume and the same data, see `size_gib`. " +
				"Any other change to the disk replaces the VM, except naming the same base image another way (`image` for `base_pool`/`base_volume` or back), which changes only the state.",
			PlanModifiers: []planmodifier.Object{imageDiskHasNoBasePool{}, fileDiskKeepsNoPool{}, diskRequiresReplace()},
			Attributes: map[string]schema.Attribute{
				"image": schema.StringAttribute{
					Optional: true,
					Description: "The `id` of a `kohaku_image`, e.g. `kohaku_image.debian12.id`: " +
						"`<pool>/<volume>` on the provider's default host, `<host>/<pool>/<volume>` on a " +
						"host of the `hosts` map. The VM gets its own overlay on it, as with `base_volume`. " +
						"The image must be on the VM's own `host`: an image of another host is refused at " +
						"plan time (with `for_each` over hosts, `kohaku_image.debian12[each.key].id`). " +
						"Exactly one of `image`, `base_volume` and `volume` is set.",
					Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
				},
				"base_volume": schema.StringAttribute{
					Optional: true,
					Description: "Name of the base image volume (for example a cloud image in qcow2 or raw) " +
						"the overlay is backed by, when it is not a `kohaku_image` of this configuration " +
						"(use `image` for those). Exactly one of `image`, `base_volume` and `volume` is set.",
					Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
				},
				"base_pool": schema.StringAttribute{
					Optional:    true,
					Computed:    true,
					Default:     stringdefault.StaticString(vmDefaultPool),
					Description: "Storage pool of `base_volume`. Default `default`. Null with `image`, whose id names the pool.",
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
					Optional: true,
					Description: "Virtual size of the overlay in GiB, at least the base image's size; the " +
						"guest grows its filesystem into the extra space (cloud-init's growpart does). " +
						"Default: the base image's size. With `volume`, the existing volume is grown to this " +
						"size if it is smaller (create refuses one that is larger, which it never shrinks); " +
						"unset leaves it as it is. " +
						"A larger size grows the overlay (or the volume) in place, keeping the VM (same UUID) and its data: " +
						"on a running VM through libvirt's live block resize, with no restart, so the guest sees " +
						"a larger `/dev/vda` at once while its partitions and file systems keep their size until " +
						"cloud-init's growpart and resizefs grow the root file system at the next boot (or the " +
						"guest's administrator grows them); on a stopped VM the volume is resized and the guest sees it " +
						"at its next start. A smaller size is refused at plan, since the data past it would be " +
						"lost; replace the VM on purpose (`terraform apply -replace=...`) to start over with a smaller disk. " +
						"Removing `size_gib` from a disk that had one replaces the VM.",
					Validators: []validator.Int64{int64validator.AtLeast(1)},
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
	}
}

// vmIOAttributes are the VM's network interfaces, data disks and shared folders.
func vmIOAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"network_interface": schema.ListNestedAttribute{
			Optional:    true,
			Description: "Network interfaces, in guest order. Unset or empty, a new VM has no network card at all (libvirt adds none by default): give at least one, e.g. `[{ type = \"network\", source = \"default\" }]`, for a guest you can reach. Changed in place: the domain is redefined and, if it runs, restarted.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"type": schema.StringAttribute{
					Required: true,
					Description: "`network` (a libvirt virtual network named by `source`), `bridge` (a host " +
						"bridge named by `source`) or `user` (user-mode networking: no setup on the host, " +
						"outbound only, the host is 10.0.2.2).",
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
					Optional: true,
					Computed: true,
					Description: "MAC address. Default: the seed's MAC for this interface when `seed_id` is " +
						"set and the seed names one, otherwise the address libvirt assigns (52:54:00:...), " +
						"which is read back. An interface keeps its address when others are added or " +
						"removed.",
				},
			}},
		},
		"data_disks": dataDisksSchema(),
		"shared_folder": schema.ListNestedAttribute{
			Optional: true,
			Description: "Host directories the guest mounts by tag (for example `mount -t 9p -o " +
				"trans=virtio,version=9p2000.L kohaku_shared /mnt`). Changed in place: the domain is " +
				"redefined and, if it runs, restarted.",
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
	}
}

// vmPCIAttributes are the PCI devices passed through and how the VM is placed and sized for them.
func vmPCIAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"gpus": schema.SetAttribute{
			Optional:    true,
			ElementType: types.StringType,
			Description: "`id`s of `kohaku_gpu_binding` resources (`<pci address>` or `<host>/<pci " +
				"address>`). Each binding is passed through whole: create and update read the device's " +
				"IOMMU group from the host and add one `<hostdev managed='no'>` (the binding, not libvirt, " +
				"moves devices to vfio-pci) for every function of the group that is on vfio-pci, such as a " +
				"GPU and its HDMI audio, so the other functions need no `hostdevs` entry. PCI bridges in " +
				"the group stay out, as the binding leaves them on their own driver. " +
				"A device that is not on vfio-pci is refused: bind it with `kohaku_gpu_binding` first. " +
				"Refresh reports the group's functions under their `gpus` entry, not in `hostdevs`. " +
				"Changed in place: the domain is redefined and, if it runs, restarted.",
		},
		"hostdevs": schema.SetAttribute{
			Optional:    true,
			ElementType: types.StringType,
			Description: "Further host PCI functions to pass through, as `DDDD:BB:SS.F` (for example " +
				"`0000:01:00.1`), attached like `gpus` but one function each and unchecked: something else " +
				"must bind them to vfio-pci first. The functions a `gpus` entry brings need no entry here " +
				"(one listed in both is passed through once). After an import every passed-through device " +
				"shows here; moving the devices of a binding to `gpus` then changes nothing on the host. " +
				"Changed in place like `gpus`.",
		},
		"mdevs": schema.SetAttribute{
			Optional:    true,
			ElementType: types.StringType,
			Description: "UUIDs of mediated devices to pass through (`kohaku_mdev.uuid`: vGPUs and other " +
				"devices a parent driver splits off), each as one `<hostdev type='mdev' model='vfio-pci'>`. " +
				"The devices must exist and be started on the VM's host before the VM starts; " +
				"`kohaku_mdev` makes them so. An imported domain's mediated devices show here. " +
				"Changed in place like `gpus`.",
			Validators: []validator.Set{setvalidator.ValueStringsAre(stringvalidator.RegexMatches(mdevUUIDRegexp,
				"must be a UUID in lower case, such as 6b6f6861-6b75-4d64-8000-000000000001"))},
		},
		"pci_mmio64_gib": schema.Int64Attribute{
			Optional: true,
			Computed: true,
			Description: "Size in GiB of the guest's 64-bit PCI MMIO window, for GPUs and other " +
				"passed-through devices with large 64-bit BARs (an H100 or A100 80GB has a 128 GiB BAR and a " +
				"32 MiB one; firmware opens 32 GiB by default, so such BARs are not assigned and the guest " +
				"driver fails). " +
				"Unset, Kohaku sizes it from the BARs of the functions passed through (`gpus` and `hostdevs`), " +
				"read from the host's sysfs over local and SSH connections: each function's 64-bit " +
				"prefetchable BARs, each a power of two, packed largest first into one window per function " +
				"(the guest's PCIe root port), the windows placed one after the other each aligned to its " +
				"largest BAR, and the span plus 1 GiB of room (OVMF places other 64-bit windows beside the " +
				"BARs) rounded up to a power of two GiB: `256` for one H100 (128 GiB + 32 MiB), `512` for " +
				"two, and `512` for a single 256 GiB BAR. It stays null when the BARs fit the firmware's default 32 GiB or " +
				"nothing is passed through, is shown in the plan when the host can be read then (else after " +
				"apply), and is kept while the functions passed through do not change. Over `qemu+tcp` and " +
				"`qemu+tls` the host's files cannot be read: it stays null, with a warning, unless set. " +
				"An explicit value wins, but one that cannot hold the BARs is refused at plan time with the " +
				"size they need. " +
				"Sets the root bus's `pcihole64` (QEMU's `pci-hole64-size`, which SeaBIOS and the guest's " +
				"ACPI tables follow) and, with `firmware = \"uefi\"`, OVMF's 64-bit aperture (`-fw_cfg " +
				"opt/ovmf/X-PciMmio64Mb` through libvirt's QEMU command-line namespace, since libvirt " +
				"9.0 has no element for it; libvirt marks such a domain as tainted by custom arguments " +
				"in its log, which is harmless). " +
				"At most 32768 (32 TiB). Changed in place: the domain is redefined and, if it runs, restarted.",
			Validators: []validator.Int64{int64validator.Between(1, domain.MaxPCIMMIO64GiB)},
		},
		"numa_placement": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Default:  stringdefault.StaticString(vmlife.PlacementAuto),
			Description: "Where the VM's vCPUs and memory live on a host with several NUMA nodes. `auto` " +
				"(default): a VM with `gpus` is bound to the NUMA nodes of its GPUs (read from their node " +
				"devices), so host-to-device traffic does not cross sockets: its vCPUs run only on those " +
				"nodes' CPUs and its memory is allocated only from them (`<vcpu cpuset>` and `<numatune " +
				"mode='strict'>`). GPUs on two nodes give the guest a NUMA topology that mirrors them: one " +
				"guest cell per node, vCPUs and memory split evenly, each cell pinned to its node. " +
				"A VM without `gpus`, a host with one node, or GPUs whose node the host does not report, is " +
				"not bound. Create and update refuse, before anything is changed, a VM whose `vcpu` " +
				"exceed the CPUs of its GPUs' nodes. `none`: leave placement to the host's scheduler. " +
				"See `numa_nodes` for the result. Changed in place: the domain is redefined and, if it " +
				"runs, restarted.",
			Validators: []validator.String{stringvalidator.OneOf(vmlife.PlacementAuto, vmlife.PlacementNone)},
		},
		"numa_nodes": schema.ListAttribute{
			Computed:      true,
			ElementType:   types.Int64Type,
			Description:   "The host NUMA nodes the VM is bound to, in guest cell order, as read back from the domain; empty when it is not bound (see `numa_placement`).",
			PlanModifiers: []planmodifier.List{keepNUMANodes{}},
		},
		"hugepages": schema.SingleNestedAttribute{
			Optional: true,
			Description: "Back the guest's memory with huge pages reserved on the host, which GPU and other " +
				"DMA-heavy workloads need for steady performance (fewer TLB misses, memory that is never " +
				"swapped or moved). With the VM bound to NUMA nodes (`numa_placement`), the pages come from " +
				"those nodes. " +
				"Create refuses, before anything is made, a VM the host cannot back: no pages of that size " +
				"reserved (on the VM's nodes), or fewer free than `memory_mib` needs. `memory_mib` must " +
				"be a whole number of pages (per guest NUMA cell). `hugepages = {}` uses 2 MiB pages. " +
				"Changed in place: the domain is redefined and, if it runs, restarted.",
			Attributes: map[string]schema.Attribute{
				"page_size_mib": schema.Int64Attribute{
					Optional:    true,
					Computed:    true,
					Default:     int64default.StaticInt64(2),
					Description: "Huge page size: `2` (2 MiB, the default) or `1024` (1 GiB, where the host has reserved them, usually at boot with `hugepagesz=1G hugepages=N`).",
					Validators:  []validator.Int64{int64validator.OneOf(2, 1024)},
				},
			},
		},
	}
}

// vmRuntimeAttributes are how the VM runs and stops.
func vmRuntimeAttributes(keep []planmodifier.String) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"cpu_topology": schema.SingleNestedAttribute{
			Optional: true,
			Description: "The guest's CPU topology, for software licensed or tuned per socket or core (for " +
				"example `{ sockets = 1, cores = 8, threads = 2 }` for `vcpu = 16`). `sockets` x `cores` x " +
				"`threads` must equal `vcpu`. Unset leaves libvirt's (one socket per vCPU). Changed in " +
				"place: the domain is redefined and, if it runs, restarted.",
			Attributes: map[string]schema.Attribute{
				"sockets": schema.Int64Attribute{Required: true, Description: "Sockets, at least 1.", Validators: []validator.Int64{int64validator.AtLeast(1)}},
				"cores":   schema.Int64Attribute{Required: true, Description: "Cores per socket, at least 1.", Validators: []validator.Int64{int64validator.AtLeast(1)}},
				"threads": schema.Int64Attribute{Required: true, Description: "Threads per core, at least 1.", Validators: []validator.Int64{int64validator.AtLeast(1)}},
			},
		},
		"guest_agent": schema.BoolAttribute{
			Optional: true,
			Computed: true,
			Description: "Add the virtio-serial channel the QEMU guest agent talks on. Default `true` for a new VM; unset " +
				"keeps what the domain has, so an imported domain without the channel keeps none. Changed in place: " +
				"the domain is redefined and, if it runs, restarted.",
			PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
		},
		"serial_log_path": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Description: "Host file the serial console is appended to. Default `/var/log/libvirt/qemu/<name>-serial.log` for a " +
				"new VM; unset keeps what the domain has, so an imported domain whose serial port is not logged to a " +
				"file (read back as `\"\"`) keeps its own serial port. Changed in place: the domain is redefined and, " +
				"if it runs, restarted.",
		},
		"autostart": schema.BoolAttribute{
			Optional: true,
			Computed: true,
			Description: "Start the VM when the host's libvirt starts. Default `false` for a new VM; unset keeps " +
				"what the domain has, so an imported domain that autostarts keeps autostarting (set `false` to " +
				"turn it off). Changed in place.",
			PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
		},
		"running": schema.BoolAttribute{
			Optional: true,
			Computed: true,
			Default:  booldefault.StaticBool(true),
			Description: "Whether the VM should run. Default `true`. Changed in place: `false` shuts the " +
				"guest down (a shutdown request, through the guest agent when it answers, else ACPI; forced " +
				"off after `shutdown_timeout`, with a warning), `true` starts it. A VM stopped outside " +
				"Terraform shows as a change back to `true`.",
		},
		"shutdown_timeout": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Default:  stringdefault.StaticString(vmDefaultShutdownTimeout),
			Description: "How long the guest gets to power off after a shutdown request (through the guest " +
				"agent when it answers, else ACPI; when it is stopped, restarted for an update, or " +
				"destroyed) before it is forced off, as a Go duration. A guest forced off gives a warning " +
				"naming this setting: one that honours the request (cloud images do: systemd-logind handles " +
				"the power button) powers off in seconds. `0s` forces it off at once. Always bounded by the " +
				"operation's timeout. Default `30s`. Changed in place.",
			Validators: []validator.String{nonNegativeDuration},
		},
		"destroy_shutdown": schema.StringAttribute{
			Optional: true,
			Computed: true,
			Default:  stringdefault.StaticString(string(vmlife.DestroyAuto)),
			Description: "How destroy stops a running guest. `auto` (default): when everything the guest " +
				"writes goes with the VM (its boot disk is the overlay this resource made, its data disks " +
				"are new volumes without `keep`, shared folders are read-only or absent), the guest is " +
				"powered off at once, since a clean shutdown would protect nothing and a guest that ignores " +
				"ACPI would hold destroy for the whole `shutdown_timeout`; when data outlives the VM (an " +
				"existing `disk.volume`, a data disk with `keep` or an existing data disk `volume`, a " +
				"writable shared folder), the guest is asked to shut down (ACPI) first and forced off after " +
				"`shutdown_timeout`. `graceful`: always ask first. `force`: always power off at once. Stops " +
				"and update restarts always ask first. Changed in place, without touching the domain.",
			Validators: []validator.String{stringvalidator.OneOf(vmDestroyModes()...)},
		},
		"overlay_volume": schema.StringAttribute{
			Computed:      true,
			Description:   "`<pool>/<volume>` of the overlay volume this resource created for the disk, which destroy deletes. Unset when the VM has none (an existing `volume`, or no disk).",
			PlanModifiers: keep,
		},
	}
}

// diskRequiresReplace replaces the VM on any change of the disk except two:
// one that names the same base image another way (image for
// base_pool/base_volume, or back) with the same overlay pool, which changes
// only the state, and a larger size_gib of the same overlay or volume,
// which grows it in place.
// A smaller size_gib is refused: shrinking would cut off the guest's data.
func diskRequiresReplace() planmodifier.Object {
	const desc = "Replaces the VM unless the change names the same base image another way or grows the disk; refuses a smaller size."
	return objectplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.ObjectRequest, resp *objectplanmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = true
		if req.StateValue.IsNull() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
			return
		}
		var st, pl vmDiskModel
		if d := req.StateValue.As(ctx, &st, objectAsOptions); d.HasError() {
			return
		}
		if d := req.PlanValue.As(ctx, &pl, objectAsOptions); d.HasError() {
			return
		}
		sb, pb := st.base(), pl.base()
		sameBase := sb != nil && pb != nil && *sb == *pb
		sameVolume := sb == nil && pb == nil && !st.Volume.IsNull() && st.Volume.Equal(pl.Volume)
		if !sameBase && !sameVolume || !st.Pool.Equal(pl.Pool) {
			return
		}
		switch grow := diskGrowth(st.SizeGiB, pl.SizeGiB); {
		case grow >= 0:
			resp.RequiresReplace = false
		case !pl.SizeGiB.IsNull() && !pl.SizeGiB.IsUnknown():
			resp.RequiresReplace = false
			resp.Diagnostics.AddAttributeError(req.Path.AtName("size_gib"), "Disk cannot shrink", shrinkRefusal(st.SizeGiB.ValueInt64(), pl.SizeGiB.ValueInt64()))
		}
	}, desc, desc)
}

// diskGrowth compares the state's size_gib with the plan's: 0 when they are
// the same, 1 when the plan grows the disk (a size where there was none, the
// base image's, counts: the volume refuses to shrink at apply), -1 when it
// is smaller or unset again or not known yet.
func diskGrowth(state, plan types.Int64) int {
	switch {
	case state.Equal(plan):
		return 0
	case plan.IsUnknown() || plan.IsNull():
		return -1
	case state.IsNull() || plan.ValueInt64() > state.ValueInt64():
		return 1
	}
	return -1
}

// shrinkRefusal says why a smaller disk is refused and how to get one on
// purpose.
func shrinkRefusal(have, want int64) string {
	return fmt.Sprintf("disk.size_gib %d is smaller than the %d GiB the VM's disk has. Kohaku grows disks in place "+
		"but never shrinks one: everything the guest stored past the first %d GiB, file system structures "+
		"included, would be lost. Keep size_gib at %d or more. To start over on purpose with a new, smaller "+
		"disk (everything on the current disk is deleted), replace the VM: terraform apply "+
		"-replace=<this resource's address, e.g. kohaku_vm.NAME>.", want, have, want, have)
}

// fileDiskKeepsNoPool plans pool "" (what state holds) for a boot disk that
// is a file in no storage pool, read by an import as its path in volume,
// when the configuration names the same path and leaves pool unset: the
// schema's default pool would otherwise replace the adopted VM. (Terraform's
// generated configuration leaves empty strings out, so it cannot say pool =
// "" itself.)
type fileDiskKeepsNoPool struct{}

func (fileDiskKeepsNoPool) Description(context.Context) string {
	return "pool stays empty for a boot disk that is a file in no pool."
}

func (m fileDiskKeepsNoPool) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (fileDiskKeepsNoPool) PlanModifyObject(ctx context.Context, req planmodifier.ObjectRequest, resp *planmodifier.ObjectResponse) {
	if req.StateValue.IsNull() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() || req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	var st, cfg vmDiskModel
	if d := req.StateValue.As(ctx, &st, objectAsOptions); d.HasError() {
		return
	}
	if d := req.ConfigValue.As(ctx, &cfg, objectAsOptions); d.HasError() {
		return
	}
	if !cfg.Pool.IsNull() || st.Pool.IsNull() || st.Pool.ValueString() != "" || cfg.Volume.IsUnknown() ||
		!strings.HasPrefix(st.Volume.ValueString(), "/") || !cfg.Volume.Equal(st.Volume) {
		return
	}
	attrs := req.PlanValue.Attributes()
	attrs["pool"] = types.StringValue("")
	v, d := types.ObjectValue(vmDiskAttrTypes, attrs)
	resp.Diagnostics.Append(d...)
	if !d.HasError() {
		resp.PlanValue = v
	}
}

// imageDiskHasNoBasePool plans base_pool null when the disk names its base
// by image (whose id holds the pool), instead of the schema's default, so the
// plan does not show a pool the image is not in.
type imageDiskHasNoBasePool struct{}

func (imageDiskHasNoBasePool) Description(context.Context) string {
	return "base_pool is null when image is set."
}

func (m imageDiskHasNoBasePool) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (imageDiskHasNoBasePool) PlanModifyObject(ctx context.Context, req planmodifier.ObjectRequest, resp *planmodifier.ObjectResponse) {
	if req.PlanValue.IsNull() || req.PlanValue.IsUnknown() || req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	var cfg vmDiskModel
	if d := req.ConfigValue.As(ctx, &cfg, objectAsOptions); d.HasError() {
		return
	}
	if cfg.Image.IsNull() || !cfg.BasePool.IsNull() {
		return
	}
	attrs := req.PlanValue.Attributes()
	attrs["base_pool"] = types.StringNull()
	v, d := types.ObjectValue(vmDiskAttrTypes, attrs)
	resp.Diagnostics.Append(d...)
	if !d.HasError() {
		resp.PlanValue = v
	}
}
