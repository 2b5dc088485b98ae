package domain

import (
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/validation"
)

// Owned lists, for the docs, what of a domain's definition Kohaku owns:
// what Merge sets from the spec. Everything else in the definition is the
// domain's own and survives every update as it is.
var Owned = []string{
	"the domain type (`kvm` or `qemu`), its name and UUID",
	"`<memory>` and `<currentMemory>`",
	"the vCPU count of `<vcpu>`",
	"the machine family of `<os><type machine>` (a versioned machine of the same family is kept) and the firmware (`bios` or `uefi`; the loader and NVRAM are kept while it stays the same)",
	"direct kernel boot: `<os>`'s `<kernel>`, `<initrd>` and `<cmdline>`",
	"the mode of `<cpu>` and its `<topology>` (the model, features and cache of a `custom` CPU are kept while the mode stays the same)",
	"huge pages in `<memoryBacking>`, and shared memory when a share uses virtiofs",
	"the NUMA binding Kohaku writes for a VM's GPUs (`<vcpu cpuset>`, `<numatune>`, the `<vcpupin>`s of `<cputune>`, `<cpu><numa>`), once Kohaku has written one",
	"the 64-bit PCI MMIO window (the root controller's `<pcihole64>`, and OVMF's aperture on the QEMU command line)",
	"the boot disk (the disk with target `vda`) and the seed CD-ROM Kohaku attached",
	"data disks (virtio disks with a `<serial>`), matched by serial: those of the spec, and those Kohaku attached (its metadata records their serials) until the spec no longer names them; other disks are kept",
	"network interfaces on a libvirt network, a bridge or user-mode networking, matched by MAC address",
	"shared folders (`<filesystem>` of a host directory), matched by target tag",
	"host PCI devices (`<hostdev>` of type pci), matched by host address, and mediated devices (`<hostdev>` of type mdev, model vfio-pci), matched by UUID",
	"the guest agent and report channels, matched by name",
	"the log file of serial port 0 (a serial port that is not logged to a file is kept unless `serial_log_path` is set)",
	"on q35, enough empty `pcie-root-port`s for the devices Kohaku adds plus four spare ones for hotplug (none are removed)",
	"Kohaku's own element of `<metadata>` (other tools' elements are kept)",
}

// Merge returns the domain definition to define for spec over a domain that
// exists with the definition existingXML (its inactive XML): what Kohaku owns
// (see Owned) is set from spec, and everything else (devices Kohaku does not
// manage and their addresses, other tools' metadata, description, title,
// features, clock, on_* actions, controllers, input, graphics, video, …) is
// carried over as it is. Devices Kohaku manages keep their addresses and
// settings Kohaku does not model while what Kohaku models of them is
// unchanged.
func Merge(existingXML string, spec Spec) (string, error) {
	var have libvirtxml.Domain
	if err := have.Unmarshal(existingXML); err != nil {
		return "", fmt.Errorf("merge domain %q: parse the existing definition: %w", spec.Name, err)
	}
	obs, err := ParseDomain(&have)
	if err != nil {
		return "", fmt.Errorf("merge domain %q: %w", spec.Name, err)
	}
	if err := kept(Validate(spec), spec, obs); err != nil {
		return "", fmt.Errorf("merge domain %q: %w", spec.Name, err)
	}
	want, err := build(spec)
	if err != nil {
		return "", err
	}
	n := Normalize(spec)
	m := merger{have: &have, want: want, n: n, raw: spec, obs: obs}
	if err := m.merge(); err != nil {
		return "", fmt.Errorf("merge domain %q: %w", spec.Name, err)
	}
	s, err := have.Marshal()
	if err != nil {
		return "", fmt.Errorf("merge domain %q: %w", spec.Name, err)
	}
	return s, nil
}

type merger struct {
	have *libvirtxml.Domain // edited in place into the result
	want *libvirtxml.Domain // Build's definition of the spec
	n    Spec               // the spec, normalized
	raw  Spec               // the spec as given
	obs  Observed           // the existing domain in spec terms
	// added counts the devices added that need a PCIe slot.
	added int
}

func (m *merger) merge() error {
	h, w := m.have, m.want
	h.Type, h.Name = w.Type, w.Name
	if w.UUID != "" {
		h.UUID = w.UUID
	}
	h.Memory, h.CurrentMemory = w.Memory, w.CurrentMemory
	m.vcpu()
	m.os()
	m.cpu()
	m.memoryBacking()
	if err := m.metadata(); err != nil {
		return err
	}
	if h.Devices == nil {
		h.Devices = &libvirtxml.DomainDeviceList{}
	}
	m.disks()
	m.dataDisks()
	m.interfaces()
	m.filesystems()
	if err := m.hostdevs(); err != nil {
		return err
	}
	m.channels()
	m.serial()
	m.controllers()
	m.numa()
	m.qemuCommandline()
	return nil
}

func (m *merger) vcpu() {
	h, w := m.have, m.want
	if h.VCPU == nil {
		h.VCPU = &libvirtxml.DomainVCPU{Placement: w.VCPU.Placement}
	}
	h.VCPU.Value = w.VCPU.Value
	if h.VCPU.Current > h.VCPU.Value {
		h.VCPU.Current = 0
	}
}

func (m *merger) os() {
	h, w, n := m.have, m.want, m.n
	if h.OS == nil {
		h.OS = w.OS
		return
	}
	if h.OS.Type == nil {
		h.OS.Type = w.OS.Type
	} else if machineFamily(h.OS.Type.Machine) != n.Machine {
		h.OS.Type.Machine = w.OS.Type.Machine
	}
	if m.obs.Spec.Firmware != n.Firmware {
		h.OS.Firmware, h.OS.FirmwareInfo = w.OS.Firmware, w.OS.FirmwareInfo
		h.OS.Loader, h.OS.NVRam = nil, nil
	}
	h.OS.Kernel, h.OS.Initrd, h.OS.Cmdline = w.OS.Kernel, w.OS.Initrd, w.OS.Cmdline
}

func (m *merger) cpu() {
	h, w := m.have, m.want
	// A domain without <cpu> reads back with no mode, which an unset mode
	// keeps: libvirt's default CPU stays.
	changed := m.obs.Spec.CPUMode != m.raw.CPUMode && m.obs.Spec.CPUMode != m.n.CPUMode
	if h.CPU == nil {
		if !changed && w.CPU.Topology == nil && w.CPU.Numa == nil {
			return
		}
		h.CPU = &libvirtxml.DomainCPU{Mode: w.CPU.Mode}
	}
	if changed {
		h.CPU.Mode = w.CPU.Mode
		// A model, vendor and match describe a custom CPU only.
		h.CPU.Model, h.CPU.Vendor, h.CPU.Match, h.CPU.Check = nil, "", "", ""
	}
	h.CPU.Topology = w.CPU.Topology
}

func (m *merger) memoryBacking() {
	h, w := m.have, m.want
	if w.MemoryBacking == nil {
		if h.MemoryBacking != nil {
			h.MemoryBacking.MemoryHugePages = nil
			if *h.MemoryBacking == (libvirtxml.DomainMemoryBacking{}) {
				h.MemoryBacking = nil
			}
		}
		return
	}
	if h.MemoryBacking == nil {
		h.MemoryBacking = &libvirtxml.DomainMemoryBacking{}
	}
	h.MemoryBacking.MemoryHugePages = w.MemoryBacking.MemoryHugePages
	if w.MemoryBacking.MemorySource != nil {
		h.MemoryBacking.MemorySource = w.MemoryBacking.MemorySource
		h.MemoryBacking.MemoryAccess = w.MemoryBacking.MemoryAccess
	}
}

// metadata swaps Kohaku's element of <metadata> for the new one and keeps
// the other tools' elements as they are.
func (m *merger) metadata() error {
	h, w := m.have, m.want
	own := strings.TrimSpace(w.Metadata.XML)
	if h.Metadata == nil {
		h.Metadata = &libvirtxml.DomainMetadata{XML: w.Metadata.XML}
		return nil
	}
	others, err := withoutKohakuMetadata(h.Metadata.XML)
	if err != nil {
		return err
	}
	h.Metadata.XML = strings.TrimRight(others, " \n\t") + "\n    " + own + "\n  "
	return nil
}

// bootDisk and seedDisk find the disks Kohaku manages: the disk with target
// vda, and the first CD-ROM (Parse reads them so).
func bootDisk(d *libvirtxml.DomainDeviceList) int {
	return slices.IndexFunc(d.Disks, func(x libvirtxml.DomainDisk) bool {
		return (x.Device == "" || x.Device == "disk") && x.Target != nil && x.Target.Dev == "vda"
	})
}

func seedDisk(d *libvirtxml.DomainDeviceList) int {
	return slices.IndexFunc(d.Disks, func(x libvirtxml.DomainDisk) bool { return x.Device == "cdrom" })
}

func (m *merger) disks() {
	h, w, n := m.have.Devices, m.want.Devices, m.n
	// The boot disk: changes to it replace the VM, so it is normally the
	// same; a different one takes Build's form.
	i := bootDisk(h)
	if n.Disk != nil {
		wd := w.Disks[bootDisk(w)]
		switch {
		case i < 0:
			h.Disks = append([]libvirtxml.DomainDisk{wd}, h.Disks...)
			m.added++
		case m.obs.Spec.Disk == nil || *m.obs.Spec.Disk != *n.Disk:
			wd.Address = h.Disks[i].Address
			h.Disks[i] = wd
		}
		if i = bootDisk(h); len(m.have.OS.BootDevices) > 0 {
			// libvirt refuses per-device boot order next to <os><boot>.
			h.Disks[i].Boot = nil
		} else if n.Kernel != "" && h.Disks[i].Boot != nil {
			h.Disks[i].Boot = nil
		} else if n.Kernel == "" && h.Disks[i].Boot == nil && !anyBootOrder(h) {
			h.Disks[i].Boot = wd.Boot
		}
	} else if i >= 0 {
		h.Disks = slices.Delete(h.Disks, i, i+1)
	}
	// The seed CD-ROM.
	i = seedDisk(h)
	switch {
	case n.Seed != nil && i < 0:
		h.Disks = append(h.Disks, w.Disks[seedDisk(w)])
		if n.Seed.Bus == SeedBusSCSI {
			m.added++ // the virtio-scsi controller, if there is none yet
		}
	case n.Seed != nil && (m.obs.Spec.Seed == nil || *m.obs.Spec.Seed != *n.Seed):
		wd := w.Disks[seedDisk(w)]
		if h.Disks[i].Target != nil && h.Disks[i].Target.Bus == wd.Target.Bus {
			wd.Target, wd.Address = h.Disks[i].Target, h.Disks[i].Address
		}
		h.Disks[i] = wd
	case n.Seed == nil && i >= 0 && m.obs.Metadata != nil && m.obs.Metadata.Owner.SeedID != "":
		// The CD-ROM is Kohaku's seed only where Kohaku recorded one.
		h.Disks = slices.Delete(h.Disks, i, i+1)
	}
}

func anyBootOrder(d *libvirtxml.DomainDeviceList) bool {
	for _, x := range d.Disks {
		if x.Boot != nil {
			return true
		}
	}
	for _, x := range d.Interfaces {
		if x.Boot != nil {
			return true
		}
	}
	for _, x := range d.Hostdevs {
		if x.Boot != nil {
			return true
		}
	}
	return false
}

// managedNIC reports whether Kohaku models the interface (its type is one
// a NIC can have).
func managedNIC(x libvirtxml.DomainInterface) bool {
	s := x.Source
	return s != nil && (s.Network != nil || s.Bridge != nil || s.User != nil)
}

func nicOf(x libvirtxml.DomainInterface) NIC {
	nic := NIC{Model: "virtio"}
	if x.Model != nil {
		nic.Model = x.Model.Type
	}
	switch s := x.Source; {
	case s.Network != nil:
		nic.Type, nic.Source = NICNetwork, s.Network.Network
	case s.Bridge != nil:
		nic.Type, nic.Source = NICBridge, s.Bridge.Bridge
	case s.User != nil:
		nic.Type = NICUser
	}
	return nic
}

// interfaces matches the spec's NICs with the domain's by MAC address (a
// NIC without one takes the next unmatched interface, in order), updates
// what changed, adds the new ones and removes the managed interfaces the
// spec no longer has. Interfaces of other types are kept.
func (m *merger) interfaces() {
	h, w := m.have.Devices, m.want.Devices
	taken := make([]bool, len(h.Interfaces))
	match := make([]int, len(m.n.NICs))
	for k, nic := range m.n.NICs {
		match[k] = -1
		if nic.MAC == "" {
			continue
		}
		for i, x := range h.Interfaces {
			if !taken[i] && managedNIC(x) && x.MAC != nil && strings.EqualFold(x.MAC.Address, nic.MAC) {
				match[k], taken[i] = i, true
				break
			}
		}
	}
	for k, nic := range m.n.NICs {
		if nic.MAC != "" {
			continue
		}
		for i, x := range h.Interfaces {
			if !taken[i] && managedNIC(x) {
				match[k], taken[i] = i, true
				break
			}
		}
	}
	// The spec's NICs, in its order (Parse reads them back in XML order),
	// each the domain's interface it matched, edited, or Build's new one.
	managed := make([]libvirtxml.DomainInterface, len(m.n.NICs))
	for k, nic := range m.n.NICs {
		wi := w.Interfaces[k]
		if match[k] < 0 {
			managed[k] = wi
			if !conventionalPCIModels[nic.Model] {
				m.added++
			}
			continue
		}
		x := h.Interfaces[match[k]]
		have := nicOf(x)
		if have.Type != nic.Type || have.Source != nic.Source {
			x.Source = wi.Source
		}
		if have.Model != nic.Model {
			x.Model = wi.Model
			x.Address = nil // PCI and PCI Express devices sit on different buses
		}
		managed[k] = x
	}
	// Interfaces Kohaku does not manage keep their places; the managed
	// places take the spec's NICs in order, and the rest follow.
	h.Interfaces = keepPlaces(h.Interfaces, managedNIC, managed)
}

// keepPlaces is have with its managed entries (isManaged) replaced by
// managed in order: the others keep their places, managed entries beyond
// have's follow, and have's beyond managed's are dropped.
func keepPlaces[T any](have []T, isManaged func(T) bool, managed []T) []T {
	var out []T
	next := 0
	for _, x := range have {
		switch {
		case !isManaged(x):
			out = append(out, x)
		case next < len(managed):
			out = append(out, managed[next])
			next++
		}
	}
	return append(out, managed[next:]...)
}

// filesystems matches the spec's shares with the domain's host directory
// filesystems by target tag.
func (m *merger) filesystems() {
	h, w := m.have.Devices, m.want.Devices
	isShare := func(x libvirtxml.DomainFilesystem) bool {
		return x.Source != nil && x.Source.Mount != nil && x.Target != nil
	}
	managed := make([]libvirtxml.DomainFilesystem, len(m.n.SharedFolders))
	for k, sf := range m.n.SharedFolders {
		managed[k] = w.Filesystems[k]
		i := slices.IndexFunc(h.Filesystems, func(x libvirtxml.DomainFilesystem) bool { return isShare(x) && x.Target.Dir == sf.Tag })
		if i < 0 {
			m.added++
			continue
		}
		var have SharedFolder
		for _, o := range m.obs.Spec.SharedFolders {
			if o.Tag == sf.Tag {
				have = o
				break
			}
		}
		switch {
		case have == sf:
			managed[k] = h.Filesystems[i]
		case have.Driver == sf.Driver:
			managed[k].Address = h.Filesystems[i].Address
		}
	}
	// Filesystems Kohaku does not manage keep their places; the shares'
	// places take the spec's shares in order, and the rest follow.
	h.Filesystems = keepPlaces(h.Filesystems, isShare, managed)
}

// hostdevs matches the spec's PCI devices with the domain's by host address,
// and its mediated devices by UUID.
func (m *merger) hostdevs() error {
	h, w := m.have.Devices, m.want.Devices
	out := h.Hostdevs[:0:0]
	seen := map[string]bool{}
	for _, x := range h.Hostdevs {
		if u := mdevUUID(x); u != "" {
			if slices.Contains(m.n.Mdevs, u) && !seen["mdev "+u] {
				seen["mdev "+u] = true
				out = append(out, x)
			}
			continue
		}
		if x.SubsysPCI == nil || x.SubsysPCI.Source == nil || x.SubsysPCI.Source.Address == nil {
			out = append(out, x)
			continue
		}
		a := x.SubsysPCI.Source.Address
		addr := PCIAddress{Domain: uint16(deref(a.Domain)), Bus: uint8(deref(a.Bus)), Slot: uint8(deref(a.Slot)), Function: uint8(deref(a.Function))}.String()
		if slices.Contains(m.n.Hostdevs, addr) && !seen[addr] {
			seen[addr] = true
			out = append(out, x)
		}
	}
	for k, addr := range m.n.Hostdevs {
		if !seen[addr] {
			out = append(out, w.Hostdevs[k])
			m.added++
		}
	}
	for k, u := range m.n.Mdevs {
		if !seen["mdev "+u] {
			out = append(out, w.Hostdevs[len(m.n.Hostdevs)+k])
			m.added++
		}
	}
	h.Hostdevs = out
	return nil
}

// channels adds or removes Kohaku's channels, by name; other channels are
// kept.
func (m *merger) channels() {
	h, w := m.have.Devices, m.want.Devices
	mine := func(name string) bool { return name == GuestAgentChannel || name == phonehome.ReportChannel }
	name := func(c libvirtxml.DomainChannel) string {
		if c.Target == nil || c.Target.VirtIO == nil {
			return ""
		}
		return c.Target.VirtIO.Name
	}
	wanted := channelNames(m.n)
	had := len(h.Channels) > 0
	out := h.Channels[:0:0]
	seen := map[string]bool{}
	for _, c := range h.Channels {
		nm := name(c)
		if mine(nm) && (!slices.Contains(wanted, nm) || seen[nm]) {
			continue
		}
		seen[nm] = true
		out = append(out, c)
	}
	for _, c := range w.Channels {
		if !seen[name(c)] {
			out = append(out, c)
		}
	}
	if !had && len(out) > 0 {
		m.added++ // the virtio-serial controller
	}
	h.Channels = out
}

// serial sets the log file of serial port 0 and of the console on it.
func (m *merger) serial() {
	h, w := m.have.Devices, m.want.Devices
	if len(h.Serials) == 0 {
		h.Serials = w.Serials
		if len(h.Consoles) == 0 {
			h.Consoles = w.Consoles
		}
		return
	}
	s := &h.Serials[0]
	logged := s.Source != nil && s.Source.File != nil
	if !logged && m.raw.SerialLogPath == "" {
		return // a pty or socket serial port is the domain's own
	}
	if logged && s.Source.File.Path == m.n.SerialLogPath {
		return
	}
	s.Source = w.Serials[0].Source
	for i := range h.Consoles {
		c := &h.Consoles[i]
		if c.Target == nil || c.Target.Type == "" || c.Target.Type == "serial" {
			c.Source = w.Consoles[0].Source
		}
	}
}

// controllers sets the root bus's 64-bit MMIO window, adds a virtio-scsi
// controller for a SCSI seed, and adds empty pcie-root-ports so that the
// devices added and hotplug_ports find free ones.
func (m *merger) controllers() {
	h, n := m.have.Devices, m.n
	for i := range h.Controllers {
		c := &h.Controllers[i]
		if c.Type != "pci" || (c.Model != "pcie-root" && c.Model != "pci-root") {
			continue
		}
		var hole *libvirtxml.DomainControllerPCIHole64
		if n.PCIMMIO64GiB > 0 {
			hole = &libvirtxml.DomainControllerPCIHole64{Size: uint64(n.PCIMMIO64GiB) << 20, Unit: "KiB"}
		}
		if c.PCI == nil {
			if hole == nil {
				continue
			}
			c.PCI = &libvirtxml.DomainControllerPCI{}
		}
		c.PCI.Hole64 = hole
	}
	if n.Seed != nil && n.Seed.Bus == SeedBusSCSI && !slices.ContainsFunc(h.Controllers, func(c libvirtxml.DomainController) bool { return c.Type == "scsi" }) {
		h.Controllers = append(h.Controllers, libvirtxml.DomainController{Type: "scsi", Model: "virtio-scsi"})
	}
	if n.Machine != MachineQ35 {
		return
	}
	free := freeRootPorts(h, n)
	for range max(0, n.HotplugPorts+m.added-free) {
		h.Controllers = append(h.Controllers, libvirtxml.DomainController{Type: "pci", Model: "pcie-root-port"})
	}
}

// numa sets the NUMA binding when the spec has one or Kohaku wrote the one
// the domain has; a binding Kohaku did not write is the domain's own.
func (m *merger) numa() {
	h, w := m.have, m.want
	if len(m.n.NUMA) == 0 && len(m.n.CPUPins) == 0 && (m.obs.Metadata == nil || !m.obs.Metadata.Placed) {
		return
	}
	h.VCPU.CPUSet = w.VCPU.CPUSet
	h.NUMATune = w.NUMATune
	if h.CPU != nil {
		h.CPU.Numa = w.CPU.Numa
	}
	var pins []libvirtxml.DomainCPUTuneVCPUPin
	var emulator *libvirtxml.DomainCPUTuneEmulatorPin
	if w.CPUTune != nil {
		pins, emulator = w.CPUTune.VCPUPin, w.CPUTune.EmulatorPin
	}
	if h.CPUTune == nil {
		h.CPUTune = &libvirtxml.DomainCPUTune{}
	}
	h.CPUTune.VCPUPin, h.CPUTune.EmulatorPin = pins, emulator
	if isZeroCPUTune(h.CPUTune) {
		h.CPUTune = nil
	}
}

func isZeroCPUTune(t *libvirtxml.DomainCPUTune) bool {
	z, err := (&libvirtxml.Domain{CPUTune: t}).Marshal()
	e, err2 := (&libvirtxml.Domain{}).Marshal()
	return err == nil && err2 == nil && z == e
}

// qemuCommandline sets OVMF's 64-bit aperture and keeps every other
// argument.
func (m *merger) qemuCommandline() {
	h, w := m.have, m.want
	var args []libvirtxml.DomainQEMUCommandlineArg
	var envs []libvirtxml.DomainQEMUCommandlineEnv
	if h.QEMUCommandline != nil {
		in := h.QEMUCommandline.Args
		for i := 0; i < len(in); i++ {
			if in[i].Value == "-fw_cfg" && i+1 < len(in) && strings.HasPrefix(in[i+1].Value, ovmfMMIO64Name+",") {
				i++
				continue
			}
			args = append(args, in[i])
		}
		envs = h.QEMUCommandline.Envs
	}
	if w.QEMUCommandline != nil {
		args = append(args, w.QEMUCommandline.Args...)
	}
	if len(args) == 0 && len(envs) == 0 {
		h.QEMUCommandline = nil
		return
	}
	h.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: args, Envs: envs}
}

// kept drops from Validate's errors the values Kohaku would not write but
// the domain already has, which Merge keeps as they are: a CPU mode or a
// machine of the domain's own, and no boot disk Kohaku manages on a domain
// that had none.
func kept(err error, spec Spec, obs Observed) error {
	if err == nil {
		return nil
	}
	var out ValidationErrors
	for _, e := range validation.All(err) {
		switch e.Path.String() {
		case "cpu_mode":
			if spec.CPUMode == obs.Spec.CPUMode {
				continue
			}
		case "machine":
			if spec.Machine == obs.Spec.Machine {
				continue
			}
		case "disk":
			if spec.Disk == nil && obs.Spec.Disk == nil && spec.Kernel == obs.Spec.Kernel {
				continue
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
