package domain

import (
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// Build validates spec and turns it into a libvirt domain definition.
//
// It leaves to libvirt what libvirt does well: PCI addresses, the controllers
// the devices need (pcie-root-ports, virtio-serial, SATA/IDE), channel socket
// paths, MAC addresses that are not given, the UUID when none is given, and
// the UEFI loader and NVRAM files. On q35 it adds enough empty pcie-root-ports
// for every PCIe device plus HotplugPorts spare ones.
func Build(spec Spec) (*libvirtxml.Domain, error) {
	if err := Validate(spec); err != nil {
		return nil, fmt.Errorf("build domain: %w", err)
	}
	return build(spec)
}

// build is Build for a spec that has been validated (or, for Merge, whose
// problems are values the domain already has).
func build(spec Spec) (*libvirtxml.Domain, error) {
	n := Normalize(spec)

	dom := &libvirtxml.Domain{
		Type: string(n.Type),
		Name: n.Name,
		UUID: n.UUID,
		Memory: &libvirtxml.DomainMemory{
			Value: uint(n.MemoryMiB), Unit: "MiB",
		},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{
			Value: uint(n.MemoryMiB), Unit: "MiB",
		},
		VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: uint(n.VCPU)},
		OS:   buildOS(n),
		Features: &libvirtxml.DomainFeatureList{
			ACPI: &libvirtxml.DomainFeature{},
			APIC: &libvirtxml.DomainFeatureAPIC{},
		},
		CPU:        &libvirtxml.DomainCPU{Mode: string(n.CPUMode)},
		Clock:      &libvirtxml.DomainClock{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices:    &libvirtxml.DomainDeviceList{},
	}
	for _, sf := range n.SharedFolders {
		if sf.Driver == ShareVirtiofs {
			// vhost-user-fs maps guest memory into virtiofsd: it must be shared.
			dom.MemoryBacking = &libvirtxml.DomainMemoryBacking{
				MemorySource: &libvirtxml.DomainMemorySource{Type: "memfd"},
				MemoryAccess: &libvirtxml.DomainMemoryAccess{Mode: "shared"},
			}
			break
		}
	}

	buildNUMA(n, dom)

	if n.PCIMMIO64GiB > 0 && n.Firmware == FirmwareUEFI {
		dom.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: []libvirtxml.DomainQEMUCommandlineArg{
			{Value: "-fw_cfg"}, {Value: fmt.Sprintf("%s,string=%d", ovmfMMIO64Name, n.PCIMMIO64GiB<<10)},
		}}
	}

	meta, err := marshalMetadata(Metadata{SpecHash: Hash(spec), Owner: n.Owner, Placed: len(n.NUMA) > 0 || len(n.CPUPins) > 0, DataDisks: dataDiskSerials(n.DataDisks)})
	if err != nil {
		return nil, fmt.Errorf("build domain %q: %w", n.Name, err)
	}
	dom.Metadata = &libvirtxml.DomainMetadata{XML: meta}

	d := dom.Devices
	if n.Disk != nil {
		d.Disks = append(d.Disks, buildBootDisk(n))
	}
	used := map[string]bool{"vda": true}
	for _, dd := range n.DataDisks {
		d.Disks = append(d.Disks, BuildDataDisk(dd, freeTarget(used)))
	}
	if n.Seed != nil {
		d.Disks = append(d.Disks, buildSeed(n.Seed))
	}
	d.Controllers = buildControllers(n)
	for _, sf := range n.SharedFolders {
		d.Filesystems = append(d.Filesystems, buildFilesystem(sf))
	}
	for _, nic := range n.NICs {
		d.Interfaces = append(d.Interfaces, buildInterface(nic))
	}
	serialSource := func() *libvirtxml.DomainChardevSource {
		return &libvirtxml.DomainChardevSource{
			File: &libvirtxml.DomainChardevSourceFile{Path: n.SerialLogPath, Append: "on"},
		}
	}
	d.Serials = []libvirtxml.DomainSerial{{
		Source: serialSource(),
		Target: &libvirtxml.DomainSerialTarget{
			Type:  "isa-serial",
			Port:  new(uint(0)),
			Model: &libvirtxml.DomainSerialTargetModel{Name: "isa-serial"},
		},
	}}
	d.Consoles = []libvirtxml.DomainConsole{{
		Source: serialSource(),
		Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: new(uint(0))},
	}}
	for _, name := range channelNames(n) {
		d.Channels = append(d.Channels, libvirtxml.DomainChannel{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: name}},
		})
	}
	for _, h := range n.Hostdevs {
		a, err := ParsePCIAddress(h)
		if err != nil { // Validate has already accepted it
			return nil, fmt.Errorf("build domain %q: %w", n.Name, err)
		}
		d.Hostdevs = append(d.Hostdevs, buildHostdev(a))
	}
	for _, u := range n.Mdevs {
		d.Hostdevs = append(d.Hostdevs, buildMdevHostdev(u))
	}
	d.MemBalloon = &libvirtxml.DomainMemBalloon{Model: "virtio"}
	d.RNGs = []libvirtxml.DomainRNG{{
		Model:   "virtio",
		Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
	}}
	return dom, nil
}

// ovmfMMIO64Name is the fw_cfg item OVMF reads its 64-bit PCI aperture
// from, in MiB.
const ovmfMMIO64Name = "name=opt/ovmf/X-PciMmio64Mb"

// Marshal builds spec and returns the domain XML.
func Marshal(spec Spec) (string, error) {
	dom, err := Build(spec)
	if err != nil {
		return "", err
	}
	s, err := dom.Marshal()
	if err != nil {
		return "", fmt.Errorf("marshal domain %q: %w", spec.Name, err)
	}
	return s, nil
}

func buildOS(n Spec) *libvirtxml.DomainOS {
	os := &libvirtxml.DomainOS{
		Type:    &libvirtxml.DomainOSType{Arch: "x86_64", Machine: string(n.Machine), Type: "hvm"},
		Kernel:  n.Kernel,
		Initrd:  n.Initrd,
		Cmdline: n.Cmdline,
	}
	if n.Firmware == FirmwareUEFI {
		os.Firmware = "efi"
		// Secure boot off: it would need SMM, and it refuses the unsigned
		// NVIDIA kernel modules a GPU guest builds with DKMS.
		os.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{
			Features: []libvirtxml.DomainOSFirmwareFeature{{Enabled: "no", Name: "secure-boot"}},
		}
	}
	return os
}

func diskSource(s Source) *libvirtxml.DomainDiskSource {
	switch {
	case s.Path != "" && strings.HasPrefix(s.Path, "/dev/"):
		return &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: s.Path}}
	case s.Path != "":
		return &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.Path}}
	default:
		return &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: s.Pool, Volume: s.Volume}}
	}
}

func buildBootDisk(n Spec) libvirtxml.DomainDisk {
	disk := libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: string(n.Disk.Format), Discard: "unmap"},
		Source: diskSource(n.Disk.Source),
		Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
	}
	if n.Kernel == "" {
		disk.Boot = &libvirtxml.DomainDeviceBoot{Order: 1}
	}
	return disk
}

// seedTargets is the device name the seed CD-ROM gets on each bus.
var seedTargets = map[SeedBus]string{SeedBusSATA: "sda", SeedBusSCSI: "sda", SeedBusIDE: "hda"}

func buildSeed(s *Seed) libvirtxml.DomainDisk {
	return libvirtxml.DomainDisk{
		Device:   "cdrom",
		Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
		Source:   diskSource(s.Source),
		Target:   &libvirtxml.DomainDiskTarget{Dev: seedTargets[s.Bus], Bus: string(s.Bus)},
		ReadOnly: &libvirtxml.DomainDiskReadOnly{},
	}
}

func buildControllers(n Spec) []libvirtxml.DomainController {
	// No USB: the VM is headless, and libvirt's default USB controller would
	// take a PCIe slot on q35.
	cs := []libvirtxml.DomainController{{Type: "usb", Model: "none"}}
	if n.Seed != nil && n.Seed.Bus == SeedBusSCSI {
		// libvirt's default SCSI model on x86 is lsilogic; ask for virtio-scsi.
		cs = append(cs, libvirtxml.DomainController{Type: "scsi", Model: "virtio-scsi"})
	}
	var hole64 *libvirtxml.DomainControllerPCI
	if n.PCIMMIO64GiB > 0 {
		hole64 = &libvirtxml.DomainControllerPCI{Hole64: &libvirtxml.DomainControllerPCIHole64{Size: uint64(n.PCIMMIO64GiB) << 20, Unit: "KiB"}}
	}
	if n.Machine == MachinePC && hole64 != nil {
		cs = append(cs, libvirtxml.DomainController{Type: "pci", Index: new(uint(0)), Model: "pci-root", PCI: hole64})
	}
	if n.Machine == MachineQ35 {
		// Root ports without an index would make libvirt give the first of
		// them index 0, which is pcie-root's; name pcie-root so they count on.
		cs = append(cs, libvirtxml.DomainController{Type: "pci", Index: new(uint(0)), Model: "pcie-root", PCI: hole64})
		for range pcieEndpoints(n) + n.HotplugPorts {
			cs = append(cs, libvirtxml.DomainController{Type: "pci", Model: "pcie-root-port"})
		}
		if hasConventionalPCI(n) {
			// Conventional PCI NICs go behind a pcie-to-pci-bridge (on a root
			// port). Declared here, libvirt adds no extra root port for it.
			cs = append(cs, libvirtxml.DomainController{Type: "pci", Model: "pcie-to-pci-bridge"})
		}
	}
	return cs
}

// pcieEndpoints counts the devices of a q35 VM that each take a pcie-root-port
// when libvirt assigns addresses: virtio disks, virtio-scsi controller, NICs,
// shares, hostdevs, the virtio-serial controller for the channels, the balloon
// and the RNG. The SATA CD-ROM sits on the built-in AHCI controller.
func pcieEndpoints(n Spec) int {
	c := len(n.SharedFolders) + len(n.Hostdevs) + len(n.Mdevs) + len(n.DataDisks) + 2 // balloon, rng
	for _, nic := range n.NICs {
		if !conventionalPCIModels[nic.Model] {
			c++
		}
	}
	if hasConventionalPCI(n) {
		c++ // the pcie-to-pci-bridge
	}
	if n.Disk != nil {
		c++
	}
	if n.Seed != nil && n.Seed.Bus == SeedBusSCSI {
		c++
	}
	if len(channelNames(n)) > 0 {
		c++
	}
	return c
}

// conventionalPCIModels are NIC models that are PCI, not PCI Express, devices.
var conventionalPCIModels = map[string]bool{"e1000": true, "rtl8139": true}

func hasConventionalPCI(n Spec) bool {
	for _, nic := range n.NICs {
		if conventionalPCIModels[nic.Model] {
			return true
		}
	}
	return false
}

func channelNames(n Spec) []string {
	var names []string
	if !n.NoGuestAgent {
		names = append(names, GuestAgentChannel)
	}
	if !n.NoReportChannel {
		names = append(names, phonehome.ReportChannel)
	}
	return names
}

func buildFilesystem(sf SharedFolder) libvirtxml.DomainFilesystem {
	fs := libvirtxml.DomainFilesystem{
		AccessMode: string(sf.AccessMode),
		Source:     &libvirtxml.DomainFilesystemSource{Mount: &libvirtxml.DomainFilesystemSourceMount{Dir: sf.Source}},
		Target:     &libvirtxml.DomainFilesystemTarget{Dir: sf.Tag},
	}
	if sf.Driver == ShareVirtiofs {
		fs.Driver = &libvirtxml.DomainFilesystemDriver{Type: "virtiofs"}
	}
	if sf.ReadOnly {
		fs.ReadOnly = &libvirtxml.DomainFilesystemReadOnly{}
	}
	return fs
}

func buildInterface(nic NIC) libvirtxml.DomainInterface {
	iface := libvirtxml.DomainInterface{
		Model: &libvirtxml.DomainInterfaceModel{Type: nic.Model},
	}
	if nic.MAC != "" {
		iface.MAC = &libvirtxml.DomainInterfaceMAC{Address: nic.MAC}
	}
	switch nic.Type {
	case NICNetwork:
		iface.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: nic.Source}}
	case NICBridge:
		iface.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: nic.Source}}
	case NICUser:
		iface.Source = &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}}
	}
	return iface
}

// buildMdevHostdev passes the mediated device with the given UUID through
// as a PCI device (model vfio-pci).
func buildMdevHostdev(uuid string) libvirtxml.DomainHostdev {
	return libvirtxml.DomainHostdev{
		SubsysMDev: &libvirtxml.DomainHostdevSubsysMDev{
			Model:  "vfio-pci",
			Source: &libvirtxml.DomainHostdevSubsysMDevSource{Address: &libvirtxml.DomainAddressMDev{UUID: uuid}},
		},
	}
}

func buildHostdev(a PCIAddress) libvirtxml.DomainHostdev {
	dom, bus, slot, fn := uint(a.Domain), uint(a.Bus), uint(a.Slot), uint(a.Function)
	return libvirtxml.DomainHostdev{
		// kohaku_gpu_binding moves the devices to vfio-pci; libvirt must not.
		Managed: "no",
		SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{
			Driver: &libvirtxml.DomainHostdevSubsysPCIDriver{Name: "vfio"},
			Source: &libvirtxml.DomainHostdevSubsysPCISource{
				Address: &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &bus, Slot: &slot, Function: &fn},
			},
		},
	}
}
