package domain

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// Observed is a domain as libvirt describes it, in Spec terms.
type Observed struct {
	// Spec is the VM the XML describes, in Normalize's canonical form, so it
	// can be compared field by field with Normalize(planned). Values Build would
	// never produce are kept as found (e.g. CPUMode "custom", Machine "microvm",
	// CPUMode "" when there is no <cpu>). Spec.Owner comes from the metadata.
	Spec Spec
	// Metadata is the kohaku element of <metadata>; nil when there is none,
	// i.e. the domain was not defined by kohaku.
	Metadata *Metadata
	// MachineType is the machine as libvirt has it, e.g. pc-q35-7.2.
	MachineType string
	// Active is true when the XML is that of a running domain (it has an id).
	Active bool
	// Channels are the virtio-serial channels; Path is empty until libvirt has
	// chosen the socket, when the domain starts.
	Channels []Channel
	// Unrecognized lists, one line each, what the XML has that Spec cannot
	// express (extra disks, other NIC types, graphics, …): a sign that the
	// domain was changed behind kohaku's back.
	Unrecognized []string
}

// Channel is a virtio-serial channel of the domain.
type Channel struct {
	Name string // e.g. org.qemu.guest_agent.0
	Path string // host unix socket; empty while libvirt has not chosen one
}

// Parse reads domain XML as libvirt returns it (or as Marshal writes it).
func Parse(doc string) (Observed, error) {
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(doc); err != nil {
		return Observed{}, fmt.Errorf("parse domain XML: %w", err)
	}
	return ParseDomain(&dom)
}

// ParseDomain is Parse for an already unmarshalled domain.
func ParseDomain(dom *libvirtxml.Domain) (Observed, error) {
	o := Observed{Active: dom.ID != nil && *dom.ID >= 0}
	s := &o.Spec
	s.Name = dom.Name
	s.UUID = strings.ToLower(dom.UUID)
	s.Type = Type(dom.Type)
	if dom.VCPU != nil {
		s.VCPU = int(dom.VCPU.Value)
	}
	if dom.Memory != nil {
		mib, err := toMiB(dom.Memory.Value, dom.Memory.Unit)
		if err != nil {
			return Observed{}, fmt.Errorf("domain %q: <memory>: %w", dom.Name, err)
		}
		s.MemoryMiB = mib
	}
	if dom.CPU != nil {
		s.CPUMode = CPUMode(dom.CPU.Mode)
		if s.CPUMode == "" {
			s.CPUMode = CPUCustom // libvirt's default mode
		}
	}
	s.Firmware = FirmwareBIOS
	if os := dom.OS; os != nil {
		if os.Type != nil {
			o.MachineType = os.Type.Machine
			s.Machine = machineFamily(os.Type.Machine)
		}
		if os.Firmware == "efi" || (os.Loader != nil && os.Loader.Type == "pflash") {
			s.Firmware = FirmwareUEFI
		}
		s.Kernel, s.Initrd, s.Cmdline = os.Kernel, os.Initrd, os.Cmdline
	}
	if dom.Metadata != nil {
		m, err := parseMetadata(dom.Metadata.XML)
		if err != nil {
			return Observed{}, fmt.Errorf("domain %q: %w", dom.Name, err)
		}
		o.Metadata = m
		if m != nil {
			s.Owner = m.Owner
		}
	}
	if dom.Title != "" {
		o.unrecognized("title %q", dom.Title)
	}
	if dom.Description != "" {
		o.unrecognized("description")
	}
	if dom.Metadata != nil {
		for _, n := range otherMetadata(dom.Metadata.XML) {
			o.unrecognized("metadata element %s", n)
		}
	}
	s.NoGuestAgent, s.NoReportChannel = true, true
	if dom.Devices != nil {
		o.parseDevices(dom.Devices)
	}
	if s.Machine == MachineQ35 && dom.Devices != nil {
		s.HotplugPorts = freeRootPorts(dom.Devices, *s)
	}
	o.parseMMIO64(dom)
	o.parseNUMA(dom)
	o.parsePins(dom)
	return o, nil
}

// parseMMIO64 reads PCIMMIO64GiB back from the root bus's pcihole64 and,
// under UEFI, OVMF's fw_cfg aperture, which Build sets together.
func (o *Observed) parseMMIO64(dom *libvirtxml.Domain) {
	s := &o.Spec
	if dom.Devices != nil {
		for _, c := range dom.Devices.Controllers {
			if c.Type != "pci" || (c.Model != "pcie-root" && c.Model != "pci-root") || c.PCI == nil || c.PCI.Hole64 == nil {
				continue
			}
			kib, err := toKiB(c.PCI.Hole64.Size, c.PCI.Hole64.Unit)
			if err != nil || kib%(1<<20) != 0 {
				o.unrecognized("pcihole64 of %d %s (not whole GiB)", c.PCI.Hole64.Size, c.PCI.Hole64.Unit)
				continue
			}
			s.PCIMMIO64GiB = int(kib >> 20)
		}
	}
	if dom.QEMUCommandline == nil {
		return
	}
	args := dom.QEMUCommandline.Args
	for i := 0; i < len(args); i++ {
		if args[i].Value == "-fw_cfg" && i+1 < len(args) && strings.HasPrefix(args[i+1].Value, ovmfMMIO64Name+",string=") {
			mib := strings.TrimPrefix(args[i+1].Value, ovmfMMIO64Name+",string=")
			if s.Firmware != FirmwareUEFI || mib != fmt.Sprint(s.PCIMMIO64GiB<<10) {
				o.unrecognized("OVMF 64-bit aperture of %s MiB with pcihole64 of %d GiB", mib, s.PCIMMIO64GiB)
			}
			i++
			continue
		}
		o.unrecognized("QEMU command-line argument %q", args[i].Value)
	}
	if len(dom.QEMUCommandline.Envs) > 0 {
		o.unrecognized("QEMU command-line environment")
	}
}

// toKiB converts a libvirt scaled integer to KiB.
func toKiB(v uint64, unit string) (uint64, error) {
	switch strings.ToLower(unit) {
	case "", "b", "bytes":
		return v >> 10, nil
	case "k", "kib":
		return v, nil
	case "m", "mib":
		return v << 10, nil
	case "g", "gib":
		return v << 20, nil
	case "t", "tib":
		return v << 30, nil
	}
	return 0, fmt.Errorf("unit %q", unit)
}

func (o *Observed) unrecognized(format string, args ...any) {
	o.Unrecognized = append(o.Unrecognized, fmt.Sprintf(format, args...))
}

func (o *Observed) parseDevices(d *libvirtxml.DomainDeviceList) {
	s := &o.Spec
	for _, disk := range d.Disks {
		o.parseDisk(disk)
	}
	for _, iface := range d.Interfaces {
		nic := NIC{}
		if iface.Model != nil {
			nic.Model = iface.Model.Type
		}
		if iface.MAC != nil {
			nic.MAC = strings.ToLower(iface.MAC.Address)
		}
		switch src := iface.Source; {
		case src != nil && src.Network != nil:
			nic.Type, nic.Source = NICNetwork, src.Network.Network
		case src != nil && src.Bridge != nil:
			nic.Type, nic.Source = NICBridge, src.Bridge.Bridge
		case src != nil && src.User != nil:
			nic.Type = NICUser
		default:
			o.unrecognized("interface %s of a type kohaku does not manage", nic.MAC)
			continue
		}
		s.NICs = append(s.NICs, nic)
	}
	for _, fs := range d.Filesystems {
		if fs.Source == nil || fs.Source.Mount == nil || fs.Target == nil {
			o.unrecognized("filesystem that is not a mounted host directory")
			continue
		}
		sf := SharedFolder{
			Driver:     Share9p,
			Source:     fs.Source.Mount.Dir,
			Tag:        fs.Target.Dir,
			AccessMode: AccessMode(fs.AccessMode),
			ReadOnly:   fs.ReadOnly != nil,
		}
		if fs.Driver != nil && fs.Driver.Type == "virtiofs" {
			sf.Driver = ShareVirtiofs
		}
		if sf.AccessMode == "" {
			sf.AccessMode = AccessPassthrough // libvirt's default
		}
		s.SharedFolders = append(s.SharedFolders, sf)
	}
	for _, h := range d.Hostdevs {
		if u := mdevUUID(h); u != "" {
			s.Mdevs = append(s.Mdevs, u)
			continue
		}
		if h.SubsysPCI == nil || h.SubsysPCI.Source == nil || h.SubsysPCI.Source.Address == nil {
			o.unrecognized("hostdev that is neither a host PCI device nor a mediated device")
			continue
		}
		a := h.SubsysPCI.Source.Address
		s.Hostdevs = append(s.Hostdevs, PCIAddress{
			Domain: uint16(deref(a.Domain)), Bus: uint8(deref(a.Bus)),
			Slot: uint8(deref(a.Slot)), Function: uint8(deref(a.Function)),
		}.String())
	}
	s.Hostdevs = sortedHostdevs(s.Hostdevs)
	s.Mdevs = sortedMdevs(s.Mdevs)
	for _, ch := range d.Channels {
		if ch.Target == nil || ch.Target.VirtIO == nil {
			o.unrecognized("channel that is not virtio-serial")
			continue
		}
		c := Channel{Name: ch.Target.VirtIO.Name}
		if ch.Source != nil && ch.Source.UNIX != nil {
			c.Path = ch.Source.UNIX.Path
		}
		o.Channels = append(o.Channels, c)
		switch c.Name {
		case GuestAgentChannel:
			s.NoGuestAgent = false
		case phonehome.ReportChannel:
			s.NoReportChannel = false
		default:
			o.unrecognized("channel %s", c.Name)
		}
	}
	for i, ser := range d.Serials {
		switch {
		case i > 0:
			o.unrecognized("serial port %d", i)
		case ser.Source != nil && ser.Source.File != nil:
			s.SerialLogPath = ser.Source.File.Path
		case ser.Log != nil:
			s.SerialLogPath = ser.Log.File
		default:
			o.unrecognized("serial port 0 that is not logged to a file")
		}
	}
	for _, g := range d.Graphics {
		o.unrecognized("graphics %s", graphicsType(g))
	}
	for _, v := range d.Videos {
		if v.Model.Type != "none" {
			o.unrecognized("video %s", v.Model.Type)
		}
	}
	o.parseOtherDevices(d)
}

// parseOtherDevices lists the devices no attribute describes and Build
// never writes. The PS/2 mouse and keyboard libvirt gives every x86 domain
// are not listed.
func (o *Observed) parseOtherDevices(d *libvirtxml.DomainDeviceList) {
	for _, in := range d.Inputs {
		if in.Bus != "ps2" {
			o.unrecognized("input %s on %s", in.Type, cmp.Or(in.Bus, "its default bus"))
		}
	}
	for _, x := range d.Sounds {
		o.unrecognized("sound %s", x.Model)
	}
	if n := len(d.RedirDevs); n > 0 {
		o.unrecognized("%d USB redirection device(s)", n)
	}
	for _, x := range d.Watchdogs {
		o.unrecognized("watchdog %s", x.Model)
	}
	for _, x := range d.TPMs {
		o.unrecognized("TPM %s", x.Model)
	}
	if n := len(d.Smartcards); n > 0 {
		o.unrecognized("%d smartcard(s)", n)
	}
	if n := len(d.Shmems); n > 0 {
		o.unrecognized("%d shared memory device(s)", n)
	}
	if d.VSock != nil {
		o.unrecognized("vsock")
	}
}

func (o *Observed) parseDisk(disk libvirtxml.DomainDisk) {
	s := &o.Spec
	dev, bus := "", ""
	if disk.Target != nil {
		dev, bus = disk.Target.Dev, disk.Target.Bus
	}
	src, ok := parseDiskSource(disk.Source)
	if !ok {
		o.unrecognized("%s %s with a source kohaku does not manage", disk.Device, dev)
		return
	}
	switch {
	case (disk.Device == "" || disk.Device == "disk") && dev == "vda" && s.Disk == nil:
		d := &Disk{Source: src}
		if disk.Driver != nil {
			d.Format = DiskFormat(disk.Driver.Type)
		}
		s.Disk = d
	case isDataDisk(disk):
		d := DataDisk{Source: src, Serial: disk.Serial}
		if disk.Driver != nil {
			d.Format = DiskFormat(disk.Driver.Type)
		}
		s.DataDisks = append(s.DataDisks, d)
	case disk.Device == "cdrom" && s.Seed == nil:
		// An ejected seed keeps its drive with an empty source.
		s.Seed = &Seed{Source: src, Bus: SeedBus(bus)}
	default:
		o.unrecognized("%s %s", cmp.Or(disk.Device, "disk"), dev)
	}
}

// parseDiskSource maps a file, block or volume source; ok is false for other
// kinds (network, NVMe, …). No source at all is an empty Source.
func parseDiskSource(src *libvirtxml.DomainDiskSource) (Source, bool) {
	switch {
	case src == nil:
		return Source{}, true
	case src.File != nil:
		return Source{Path: src.File.File}, true
	case src.Block != nil:
		return Source{Path: src.Block.Dev}, true
	case src.Volume != nil:
		return Source{Pool: src.Volume.Pool, Volume: src.Volume.Volume}, true
	case src.Network == nil && src.Dir == nil && src.NVME == nil && src.VHostUser == nil && src.VHostVDPA == nil:
		return Source{}, true
	}
	return Source{}, false
}

// machineFamily maps libvirt's versioned machine types back to the family.
func machineFamily(m string) Machine {
	switch {
	case m == "q35" || strings.HasPrefix(m, "pc-q35-"):
		return MachineQ35
	case m == "pc" || strings.HasPrefix(m, "pc-i440fx-"):
		return MachinePC
	}
	return Machine(m)
}

// freeRootPorts counts pcie-root-ports with nothing plugged in. libvirt's
// XML numbers every controller and addresses every device, so a port is free
// when no device address names its bus. XML that Build wrote has neither;
// there the count is the ports minus what Build reserved them for.
func freeRootPorts(d *libvirtxml.DomainDeviceList, s Spec) int {
	var ports []uint
	indexed := true
	for _, c := range d.Controllers {
		if c.Type == "pci" && c.Model == "pcie-root-port" {
			if c.Index == nil {
				indexed = false
				continue
			}
			ports = append(ports, *c.Index)
		}
	}
	if !indexed {
		n := 0
		for _, c := range d.Controllers {
			if c.Type == "pci" && c.Model == "pcie-root-port" {
				n++
			}
		}
		return max(0, n-pcieEndpoints(s))
	}
	used := map[uint]bool{}
	for _, a := range deviceAddresses(d) {
		if a != nil && a.PCI != nil && a.PCI.Bus != nil {
			used[*a.PCI.Bus] = true
		}
	}
	free := 0
	for _, p := range ports {
		if !used[p] {
			free++
		}
	}
	return free
}

// deviceAddresses returns the guest addresses of the devices that can sit on a
// PCI bus.
func deviceAddresses(d *libvirtxml.DomainDeviceList) []*libvirtxml.DomainAddress {
	var as []*libvirtxml.DomainAddress
	for i := range d.Disks {
		as = append(as, d.Disks[i].Address)
	}
	for i := range d.Controllers {
		as = append(as, d.Controllers[i].Address)
	}
	for i := range d.Filesystems {
		as = append(as, d.Filesystems[i].Address)
	}
	for i := range d.Interfaces {
		as = append(as, d.Interfaces[i].Address)
	}
	for i := range d.Hostdevs {
		as = append(as, d.Hostdevs[i].Address)
	}
	for i := range d.RNGs {
		as = append(as, d.RNGs[i].Address)
	}
	for i := range d.Videos {
		as = append(as, d.Videos[i].Address)
	}
	for i := range d.Sounds {
		as = append(as, d.Sounds[i].Address)
	}
	for i := range d.Watchdogs {
		as = append(as, d.Watchdogs[i].Address)
	}
	for i := range d.Inputs {
		as = append(as, d.Inputs[i].Address)
	}
	for i := range d.Shmems {
		as = append(as, d.Shmems[i].Address)
	}
	for i := range d.Serials {
		as = append(as, d.Serials[i].Address)
	}
	for i := range d.Crypto {
		as = append(as, d.Crypto[i].Address)
	}
	if d.MemBalloon != nil {
		as = append(as, d.MemBalloon.Address)
	}
	if d.VSock != nil {
		as = append(as, d.VSock.Address)
	}
	return slices.DeleteFunc(as, func(a *libvirtxml.DomainAddress) bool { return a == nil })
}

// unitBytes are libvirt's memory units (domaincommon.rng "unit").
var unitBytes = map[string]uint64{
	"b": 1, "bytes": 1,
	"KB": 1e3, "k": 1 << 10, "K": 1 << 10, "KiB": 1 << 10,
	"MB": 1e6, "m": 1 << 20, "M": 1 << 20, "MiB": 1 << 20,
	"GB": 1e9, "g": 1 << 30, "G": 1 << 30, "GiB": 1 << 30,
	"TB": 1e12, "t": 1 << 40, "T": 1 << 40, "TiB": 1 << 40,
}

// toMiB converts a libvirt memory amount to whole MiB, rounding down. An
// empty unit is KiB, as in libvirt.
func toMiB(v uint, unit string) (int, error) {
	if unit == "" {
		unit = "KiB"
	}
	mult, ok := unitBytes[unit]
	if !ok {
		return 0, fmt.Errorf("unknown memory unit %q", unit)
	}
	return int(uint64(v) * mult >> 20), nil
}

func graphicsType(g libvirtxml.DomainGraphic) string {
	switch {
	case g.VNC != nil:
		return "vnc"
	case g.Spice != nil:
		return "spice"
	case g.SDL != nil:
		return "sdl"
	case g.RDP != nil:
		return "rdp"
	case g.Desktop != nil:
		return "desktop"
	case g.EGLHeadless != nil:
		return "egl-headless"
	case g.DBus != nil:
		return "dbus"
	}
	return "of an unknown type"
}

func deref(p *uint) uint {
	if p == nil {
		return 0
	}
	return *p
}

// mdevUUID is the UUID of the mediated device a hostdev passes through as
// a PCI device, in lower case; empty for any other hostdev.
func mdevUUID(h libvirtxml.DomainHostdev) string {
	m := h.SubsysMDev
	if m == nil || m.Source == nil || m.Source.Address == nil || (m.Model != "" && m.Model != "vfio-pci") {
		return ""
	}
	return strings.ToLower(m.Source.Address.UUID)
}
