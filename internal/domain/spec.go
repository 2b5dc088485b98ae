package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"slices"
	"strings"
)

// Type is the libvirt domain type, i.e. which accelerator runs the guest.
type Type string

const (
	// TypeKVM runs the guest with hardware virtualisation (the default).
	TypeKVM Type = "kvm"
	// TypeQEMU runs the guest under TCG emulation, for hosts without usable KVM.
	TypeQEMU Type = "qemu"
)

// Machine is the QEMU machine family. libvirt expands it to a versioned machine
// type such as pc-q35-7.2, which Parse maps back.
type Machine string

const (
	// MachineQ35 is the PCIe machine (the default). It has no IDE bus.
	MachineQ35 Machine = "q35"
	// MachinePC is the legacy i440fx machine.
	MachinePC Machine = "pc"
)

// Firmware selects what the guest boots with.
type Firmware string

const (
	// FirmwareBIOS is SeaBIOS (the default).
	FirmwareBIOS Firmware = "bios"
	// FirmwareUEFI is OVMF chosen by libvirt's firmware autoselection
	// (<os firmware='efi'>) with secure boot off, a read-only pflash loader and a
	// per-domain NVRAM file that libvirt creates. Undefining such a domain needs
	// the NVRAM flag.
	FirmwareUEFI Firmware = "uefi"
)

// CPUMode is the libvirt <cpu mode>. Empty means the default for the Type:
// host-passthrough for kvm, maximum for qemu (TCG cannot pass the host CPU
// through). Parse reports an empty mode when the XML has no <cpu> element.
type CPUMode string

// The CPU modes Kohaku sets.
const (
	CPUHostPassthrough CPUMode = "host-passthrough"
	CPUHostModel       CPUMode = "host-model"
	// CPUMaximum is QEMU's "max" CPU: everything the accelerator can offer. Under
	// TCG it gives the guest x86-64-v2 and newer features that qemu64 lacks.
	CPUMaximum CPUMode = "maximum"
	// CPUCustom is libvirt's default mode: a named model (with its
	// features). It is how libvirt reads back a domain made without <cpu>
	// or with a model of its own; Kohaku keeps such a CPU as it is, and a
	// new domain asking for it gets the hypervisor's default model
	// (qemu64 under QEMU).
	CPUCustom CPUMode = "custom"
)

// Source names where a disk or CD-ROM image lives on the host: either a Path
// (a file, or a block device under /dev) or a storage Pool and Volume name.
type Source struct {
	Path   string `json:"path,omitempty"`
	Pool   string `json:"pool,omitempty"`
	Volume string `json:"volume,omitempty"`
}

// IsZero reports whether no source is set.
func (s Source) IsZero() bool { return s == Source{} }

// DiskFormat is the image format the boot disk's qemu driver reads.
type DiskFormat string

// The boot disk formats.
const (
	DiskQCOW2 DiskFormat = "qcow2" // the default
	DiskRaw   DiskFormat = "raw"
)

// Disk is the boot disk, attached as virtio vda.
type Disk struct {
	Source
	Format DiskFormat `json:"format,omitempty"`
}

// SeedBus is the bus the seed CD-ROM sits on.
type SeedBus string

// The buses a seed CD-ROM can sit on.
const (
	SeedBusSATA SeedBus = "sata" // default on q35
	SeedBusIDE  SeedBus = "ide"  // default on pc; q35 has no IDE
	SeedBusSCSI SeedBus = "scsi" // on a virtio-scsi controller, either machine
)

// Seed is the cloud-init seed: a read-only raw CD-ROM.
type Seed struct {
	Source
	// Bus is empty for the machine's natural bus: sata on q35, ide on pc.
	Bus SeedBus `json:"bus,omitempty"`
}

// NICType is how a network interface reaches the outside.
type NICType string

// The ways a network interface reaches the outside.
const (
	NICNetwork NICType = "network" // a libvirt virtual network, named by Source
	NICBridge  NICType = "bridge"  // a host bridge, named by Source
	NICUser    NICType = "user"    // user-mode (slirp) networking, no Source
)

// NIC is one network interface.
type NIC struct {
	Type   NICType `json:"type,omitempty"`
	Source string  `json:"source,omitempty"`
	// Model is the emulated device: virtio (the default), e1000e, e1000 or rtl8139.
	Model string `json:"model,omitempty"`
	// MAC is optional; libvirt generates one (52:54:00:…) when empty.
	MAC string `json:"mac,omitempty"`
}

// ShareDriver is the transport of a shared folder.
type ShareDriver string

const (
	// Share9p is virtio-9p (the default). Tags are at most 31 bytes.
	Share9p ShareDriver = "9p"
	// ShareVirtiofs is virtiofs (vhost-user-fs). Tags are at most 36 bytes. It
	// needs shared guest memory, which Build adds, and virtiofsd on the host.
	ShareVirtiofs ShareDriver = "virtiofs"
)

// AccessMode is how guest file ownership maps onto the host (9p only;
// virtiofs supports passthrough alone).
type AccessMode string

// The 9p access modes.
const (
	AccessPassthrough AccessMode = "passthrough" // the default
	AccessMapped      AccessMode = "mapped"
	AccessSquash      AccessMode = "squash"
)

// SharedFolder is a host directory the guest mounts by Tag.
type SharedFolder struct {
	Driver     ShareDriver `json:"driver,omitempty"`
	Source     string      `json:"source,omitempty"` // absolute host directory
	Tag        string      `json:"tag,omitempty"`    // e.g. kohaku_shared, kohaku_local
	AccessMode AccessMode  `json:"access_mode,omitempty"`
	ReadOnly   bool        `json:"read_only,omitempty"`
}

// VolumeRef names a storage volume by pool and volume name.
type VolumeRef struct {
	Pool   string `json:"pool"`
	Volume string `json:"volume"`
}

// Ownership is recorded in the domain's kohaku <metadata> element so the
// resource can tell what it created. It is not part of the spec hash.
type Ownership struct {
	// Volumes the resource created for this VM (the overlay disk) and must delete.
	Volumes []VolumeRef `json:"volumes,omitempty"`
	// SeedID is the id of the kohaku_seed attached as the CD-ROM.
	SeedID string `json:"seed_id,omitempty"`
}

// Channel names of the virtio-serial ports Build adds; the report channel
// is phonehome.ReportChannel, named with the rest of the report contract.
const (
	GuestAgentChannel = "org.qemu.guest_agent.0"
)

// Limits enforced by Validate.
const (
	MinMemoryMiB        = 64
	MaxMemoryMiB        = 4 << 20 // 4 TiB
	MaxVCPU             = 255     // more needs x2APIC with interrupt remapping
	Max9pTagLen         = 31      // QEMU: "mount tag ... is longer than maximum (31 bytes)"
	MaxVirtiofsTagLen   = 36      // QEMU: "tag property must be 36 bytes or less"
	MaxNameLen          = 63
	DefaultHotplugPorts = 4
	MaxHotplugPorts     = 16
	// MaxPCIMMIO64GiB is 32 TiB: within the 46 physical address bits of
	// current server CPUs, with room for the guest's RAM below it.
	MaxPCIMMIO64GiB = 32 << 10
)

// Spec describes a VM. Zero values mean defaults; Normalize fills them in.
type Spec struct {
	Name string `json:"name"`
	// UUID is optional; libvirt generates one when empty.
	UUID      string   `json:"uuid,omitempty"`
	Type      Type     `json:"type,omitempty"`
	VCPU      int      `json:"vcpu"`
	MemoryMiB int      `json:"memory_mib"`
	Machine   Machine  `json:"machine,omitempty"`
	Firmware  Firmware `json:"firmware,omitempty"`
	CPUMode   CPUMode  `json:"cpu_mode,omitempty"`

	// Disk is the boot disk. It may be nil when Kernel and Initrd are set.
	Disk *Disk `json:"disk,omitempty"`
	// Kernel, Initrd and Cmdline are host paths and the command line for direct
	// kernel boot, alone or together with Disk.
	Kernel  string `json:"kernel,omitempty"`
	Initrd  string `json:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty"`

	// DataDisks are further disks, matched by serial.
	DataDisks []DataDisk `json:"data_disks,omitempty"`

	Seed          *Seed          `json:"seed,omitempty"`
	NICs          []NIC          `json:"nics,omitempty"`
	SharedFolders []SharedFolder `json:"shared_folders,omitempty"`
	// Hostdevs are host PCI addresses (DDDD:BB:SS.F) passed through with VFIO.
	// They are attached with managed='no': kohaku_gpu_binding binds them.
	Hostdevs []string `json:"hostdevs,omitempty"`
	// Mdevs are the UUIDs of mediated devices (vGPUs and the like, made by
	// kohaku_mdev) passed through with VFIO.
	Mdevs []string `json:"mdevs,omitempty"`

	// NoGuestAgent drops the org.qemu.guest_agent.0 channel.
	NoGuestAgent bool `json:"no_guest_agent,omitempty"`
	// NoReportChannel drops the org.kohaku.report.0 channel the guest reports on.
	NoReportChannel bool `json:"no_report_channel,omitempty"`

	// SerialLogPath is the host file the serial console is written to;
	// DefaultSerialLogPath(Name) when empty.
	SerialLogPath string `json:"serial_log_path,omitempty"`

	// HotplugPorts is how many empty pcie-root-ports a q35 VM keeps for
	// hotplug; 0 means DefaultHotplugPorts. It must stay 0 on pc, whose PCI bus
	// hotplugs without them.
	HotplugPorts int `json:"hotplug_ports,omitempty"`

	// PCIMMIO64GiB sizes the guest's 64-bit PCI MMIO window, in GiB, for
	// passed-through devices with large BARs (a data-centre GPU's 64-bit BAR
	// is 32-128 GiB, more than firmware opens by default). 0 keeps QEMU's and
	// the firmware's defaults. It sets the root bus's pcihole64 (QEMU's
	// pci-hole64-size, which SeaBIOS and the guest's ACPI tables follow) and,
	// under UEFI, OVMF's 64-bit aperture (fw_cfg opt/ovmf/X-PciMmio64Mb,
	// through libvirt's QEMU command-line namespace: libvirt 9.0 has no
	// element for it).
	PCIMMIO64GiB int `json:"pci_mmio64_gib,omitempty"`

	// NUMA binds the VM to host NUMA nodes, one guest cell per node (see
	// NUMACell); empty leaves placement to the host.
	NUMA []NUMACell `json:"numa,omitempty"`
	// HugePageKiB backs guest memory with huge pages of this size
	// (HugePage2MiB or HugePage1GiB); 0 uses normal pages.
	HugePageKiB int `json:"hugepage_kib,omitempty"`
	// Topology is the guest CPU topology; nil leaves libvirt's (one socket
	// per vCPU).
	Topology *CPUTopology `json:"cpu_topology,omitempty"`
	// CPUPins, when set, pins vCPU i to host CPU CPUPins[i], one to one (a
	// placement's pin_cpus), and EmulatorCPUs (cpuset syntax) is where
	// QEMU's emulator threads run. It goes with at most one NUMA cell.
	CPUPins      []int  `json:"cpu_pins,omitempty"`
	EmulatorCPUs string `json:"emulator_cpus,omitempty"`

	// Owner is recorded in the metadata; it is not part of the VM's hardware.
	Owner Ownership `json:"-"`
}

// DefaultSerialLogPath is where the serial console of the named VM is logged
// when Spec.SerialLogPath is empty.
func DefaultSerialLogPath(name string) string {
	return path.Join("/var/log/libvirt/qemu", name+"-serial.log")
}

// DefaultCPUMode is the CPU mode used for t when Spec.CPUMode is empty.
func DefaultCPUMode(t Type) CPUMode {
	if t == TypeQEMU {
		return CPUMaximum
	}
	return CPUHostPassthrough
}

// DefaultSeedBus is the seed CD-ROM bus used on m when Seed.Bus is empty.
func DefaultSeedBus(m Machine) SeedBus {
	if m == MachinePC {
		return SeedBusIDE
	}
	return SeedBusSATA
}

// Normalize returns a copy of s with every default filled in and every value
// in canonical form (lower-case UUID, MACs and PCI addresses; hostdevs sorted).
// It does not validate: call Validate first. Parse returns specs in this form,
// so Normalize(planned) can be compared with Observed.Spec.
func Normalize(s Spec) Spec {
	n := s
	n.UUID = strings.ToLower(s.UUID)
	if len(s.DataDisks) > 0 {
		n.DataDisks = slices.Clone(s.DataDisks)
		for i := range n.DataDisks {
			n.DataDisks[i].Format = cmpFormat(n.DataDisks[i].Format)
		}
	}
	if n.Type == "" {
		n.Type = TypeKVM
	}
	if n.Machine == "" {
		n.Machine = MachineQ35
	}
	if n.Firmware == "" {
		n.Firmware = FirmwareBIOS
	}
	if n.CPUMode == "" {
		n.CPUMode = DefaultCPUMode(n.Type)
	}
	if s.Disk != nil {
		d := *s.Disk
		if d.Format == "" {
			d.Format = DiskQCOW2
		}
		n.Disk = &d
	}
	if s.Seed != nil {
		sd := *s.Seed
		if sd.Bus == "" {
			sd.Bus = DefaultSeedBus(n.Machine)
		}
		n.Seed = &sd
	}
	n.NICs = nil
	for _, nic := range s.NICs {
		if nic.Model == "" {
			nic.Model = "virtio"
		}
		nic.MAC = strings.ToLower(nic.MAC)
		n.NICs = append(n.NICs, nic)
	}
	n.SharedFolders = nil
	for _, sf := range s.SharedFolders {
		if sf.Driver == "" {
			sf.Driver = Share9p
		}
		if sf.AccessMode == "" {
			sf.AccessMode = AccessPassthrough
		}
		n.SharedFolders = append(n.SharedFolders, sf)
	}
	n.Hostdevs = sortedHostdevs(s.Hostdevs)
	n.Mdevs = sortedMdevs(s.Mdevs)
	if n.SerialLogPath == "" {
		n.SerialLogPath = DefaultSerialLogPath(n.Name)
	}
	if n.Machine == MachineQ35 && n.HotplugPorts == 0 {
		n.HotplugPorts = DefaultHotplugPorts
	}
	n.Owner.Volumes = slices.Clone(s.Owner.Volumes)
	n.NUMA = nil
	for _, c := range s.NUMA {
		c.CPUs = canonicalCPUSet(c.CPUs)
		n.NUMA = append(n.NUMA, c)
	}
	if s.Topology != nil {
		t := *s.Topology
		n.Topology = &t
	}
	return n
}

// sortedMdevs returns the UUIDs in lower case, sorted.
func sortedMdevs(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, 0, len(in))
	for _, u := range in {
		out = append(out, strings.ToLower(u))
	}
	slices.Sort(out)
	return out
}

// sortedHostdevs returns the addresses in canonical form, sorted by address.
// Addresses that do not parse are kept as given, after the valid ones.
func sortedHostdevs(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	type entry struct {
		addr PCIAddress
		ok   bool
		raw  string
	}
	es := make([]entry, 0, len(in))
	for _, h := range in {
		a, err := ParsePCIAddress(h)
		es = append(es, entry{addr: a, ok: err == nil, raw: h})
	}
	slices.SortStableFunc(es, func(x, y entry) int {
		switch {
		case x.ok && y.ok:
			return x.addr.Compare(y.addr)
		case x.ok:
			return -1
		case y.ok:
			return 1
		}
		return 0
	})
	out := make([]string, len(es))
	for i, e := range es {
		if e.ok {
			out[i] = e.addr.String()
		} else {
			out[i] = e.raw
		}
	}
	return out
}

// Hash returns a hex SHA-256 of the normalized spec, without Owner and UUID.
// Build records it in the metadata so the resource can tell whether a domain
// was defined from the spec it holds. Fields are encoded with omitempty, so
// adding a field with a zero default later does not change existing hashes.
func Hash(s Spec) string {
	n := Normalize(s)
	n.UUID = ""
	b, err := json.Marshal(n)
	if err != nil {
		// Spec holds only strings, ints, bools and slices of them.
		panic("domain: cannot encode spec: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
