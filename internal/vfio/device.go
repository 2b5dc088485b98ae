package vfio

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// Address is a host PCI function address, DDDD:BB:SS.F. It is the same type
// kohaku_vm uses for its hostdevs, so both spell an address the same way.
type Address = domain.PCIAddress

// ParseAddress parses DDDD:BB:SS.F strictly (hex, 4-digit domain, 2-digit bus
// and slot, function 0-7), as lspci -D prints it; the error shows an example.
func ParseAddress(s string) (Address, error) { return domain.ParsePCIAddress(s) }

// DriverVFIO is the host driver a function is bound to once it belongs to VFIO.
const DriverVFIO = "vfio-pci"

// NodeDeviceName is libvirt's node device name of a PCI function, as
// `virsh nodedev-list --cap pci` prints it: pci_0000_01_00_0.
func NodeDeviceName(a Address) string {
	return fmt.Sprintf("pci_%04x_%02x_%02x_%x", a.Domain, a.Bus, a.Slot, a.Function)
}

// NoGroup is the IOMMU group of a device on a host without a usable IOMMU.
const NoGroup = -1

// Device is one PCI function as libvirt's node-device XML describes it.
type Device struct {
	Address Address
	// Name is libvirt's node device name (pci_0000_01_00_0).
	Name string
	// Class is the 24-bit PCI class code: base class, subclass, prog-if.
	Class       uint32
	VendorID    uint16
	ProductID   uint16
	VendorName  string
	ProductName string
	// Driver is the host driver bound now; empty when none is.
	Driver string
	// Group is the IOMMU group number, or NoGroup.
	Group int
	// GroupMembers lists every function of the group, this one included, sorted.
	GroupMembers []Address
	// NUMANode is the device's NUMA node, or -1 when libvirt reports none.
	NUMANode int
	// Bridge is true for PCI bridges (class 06xx with a bridge header).
	Bridge bool
	// MaxVFs is how many SR-IOV virtual functions the function can have
	// (sriov_totalvfs), 0 when it has no SR-IOV capability; VFs are those
	// enabled now, sorted.
	MaxVFs int
	VFs    []Address
	// PhysFunction is the physical function of an SR-IOV virtual
	// function, nil for any other function.
	PhysFunction *Address
	// MdevTypes are the mediated-device types the function offers (its
	// mdev_supported_types), by id; an A100's VFs offer NVIDIA's vGPU
	// types so before vGPU 17.
	MdevTypes []string
}

// IsVF reports whether the function is an SR-IOV virtual function.
func (d *Device) IsVF() bool { return d.PhysFunction != nil }

// ClassHex is the class code as six hex digits, e.g. "030000".
func (d *Device) ClassHex() string { return fmt.Sprintf("%06x", d.Class) }

// ClassName names the device's class, e.g. "VGA compatible controller".
func (d *Device) ClassName() string { return ClassName(d.Class) }

// HasIOMMU reports whether the host put the device in an IOMMU group.
func (d *Device) HasIOMMU() bool { return d.Group != NoGroup }

// VendorNVIDIA is NVIDIA's PCI vendor ID.
const VendorNVIDIA = 0x10de

// DriverNVIDIA is the name NVIDIA's kernel driver registers (its module is
// nvidia too, with its version in /sys/module/nvidia/version).
const DriverNVIDIA = "nvidia"

// IsNVIDIA reports whether the function is an NVIDIA card whose host driver
// version matters to a guest: NVIDIA's vendor ID, or a function the host's
// nvidia driver drives (whoever made it).
func (d *Device) IsNVIDIA() bool {
	return d != nil && (d.VendorID == VendorNVIDIA || d.Driver == DriverNVIDIA)
}

// ParseDevice reads one PCI node device from libvirt's XML (virsh
// nodedev-dumpxml). Devices of other capabilities are refused.
func ParseDevice(doc string) (*Device, error) {
	var nd libvirtxml.NodeDevice
	if err := nd.Unmarshal(doc); err != nil {
		return nil, fmt.Errorf("parsing node device XML: %w", err)
	}
	return FromNodeDevice(&nd)
}

// FromNodeDevice converts a parsed PCI node device.
func FromNodeDevice(nd *libvirtxml.NodeDevice) (*Device, error) {
	pci := nd.Capability.PCI
	if pci == nil {
		return nil, fmt.Errorf("node device %q is not a PCI device", nd.Name)
	}
	if pci.Domain == nil || pci.Bus == nil || pci.Slot == nil || pci.Function == nil {
		return nil, fmt.Errorf("node device %q has no complete PCI address (domain, bus, slot, function)", nd.Name)
	}
	d := &Device{
		Name:        nd.Name,
		Address:     Address{Domain: uint16(*pci.Domain), Bus: uint8(*pci.Bus), Slot: uint8(*pci.Slot), Function: uint8(*pci.Function)},
		VendorName:  strings.TrimSpace(pci.Vendor.Name),
		ProductName: strings.TrimSpace(pci.Product.Name),
		Group:       NoGroup,
		NUMANode:    -1,
	}
	var err error
	if d.Class, err = parseHex32(pci.Class, 0xffffff); err != nil {
		return nil, fmt.Errorf("node device %q: class %q: %w", nd.Name, pci.Class, err)
	}
	v, err := parseHex32(pci.Vendor.ID, 0xffff)
	if err != nil {
		return nil, fmt.Errorf("node device %q: vendor id %q: %w", nd.Name, pci.Vendor.ID, err)
	}
	p, err := parseHex32(pci.Product.ID, 0xffff)
	if err != nil {
		return nil, fmt.Errorf("node device %q: product id %q: %w", nd.Name, pci.Product.ID, err)
	}
	d.VendorID, d.ProductID = uint16(v), uint16(p)
	if nd.Driver != nil {
		d.Driver = nd.Driver.Name
	}
	if pci.NUMA != nil {
		d.NUMANode = pci.NUMA.Node
	}
	if g := pci.IOMMUGroup; g != nil {
		d.Group = g.Number
		for _, a := range g.Address {
			addr, ok := nodeDeviceAddress(a)
			if !ok {
				return nil, fmt.Errorf("node device %q: IOMMU group %d lists an incomplete address", nd.Name, g.Number)
			}
			d.GroupMembers = append(d.GroupMembers, addr)
		}
		if !slices.Contains(d.GroupMembers, d.Address) {
			d.GroupMembers = append(d.GroupMembers, d.Address)
		}
		slices.SortFunc(d.GroupMembers, Address.Compare)
	}
	d.Bridge = d.Class>>16 == 0x06
	for _, c := range pci.Capabilities {
		if c.Bridge != nil {
			d.Bridge = true
		}
		if vf := c.VirtFunctions; vf != nil {
			d.MaxVFs = vf.MaxCount
			for _, a := range vf.Address {
				addr, ok := nodeDeviceAddress(a)
				if !ok {
					return nil, fmt.Errorf("node device %q: virtual functions list an incomplete address", nd.Name)
				}
				d.VFs = append(d.VFs, addr)
			}
			slices.SortFunc(d.VFs, Address.Compare)
		}
		if mt := c.MDevTypes; mt != nil {
			for _, t := range mt.Types {
				d.MdevTypes = append(d.MdevTypes, t.ID)
			}
		}
		if pf := c.PhysFunction; pf != nil {
			addr, ok := nodeDeviceAddress(pf.Address)
			if !ok {
				return nil, fmt.Errorf("node device %q: its physical function has an incomplete address", nd.Name)
			}
			d.PhysFunction = &addr
		}
	}
	return d, nil
}

func nodeDeviceAddress(a libvirtxml.NodeDevicePCIAddress) (Address, bool) {
	if a.Domain == nil || a.Bus == nil || a.Slot == nil || a.Function == nil {
		return Address{}, false
	}
	return Address{Domain: uint16(*a.Domain), Bus: uint8(*a.Bus), Slot: uint8(*a.Slot), Function: uint8(*a.Function)}, true
}

// parseHex32 reads "0x030000" (or "030000") no larger than limit.
func parseHex32(s string, limit uint64) (uint32, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "0x"), "0X")
	if t == "" {
		return 0, fmt.Errorf("empty")
	}
	v, err := strconv.ParseUint(t, 16, 32)
	if err != nil || v > limit {
		return 0, fmt.Errorf("not a hex number up to %#x", limit)
	}
	return uint32(v), nil
}

// Inventory is every PCI function of one host, by address.
type Inventory struct {
	devices map[Address]*Device
	order   []Address
}

// NewInventory indexes devices by address; a duplicate address is an error.
func NewInventory(devices []*Device) (*Inventory, error) {
	inv := &Inventory{devices: make(map[Address]*Device, len(devices))}
	for _, d := range devices {
		if _, dup := inv.devices[d.Address]; dup {
			return nil, fmt.Errorf("PCI function %s is listed twice", d.Address)
		}
		inv.devices[d.Address] = d
		inv.order = append(inv.order, d.Address)
	}
	slices.SortFunc(inv.order, Address.Compare)
	return inv, nil
}

// ParseInventory parses node-device XML documents into an inventory.
func ParseInventory(docs []string) (*Inventory, error) {
	devices := make([]*Device, 0, len(docs))
	for _, doc := range docs {
		d, err := ParseDevice(doc)
		if err != nil {
			return nil, err
		}
		devices = append(devices, d)
	}
	return NewInventory(devices)
}

// Lookup returns the function at a, or nil.
func (inv *Inventory) Lookup(a Address) *Device { return inv.devices[a] }

// Devices returns every function, sorted by address.
func (inv *Inventory) Devices() []*Device {
	out := make([]*Device, 0, len(inv.order))
	for _, a := range inv.order {
		out = append(out, inv.devices[a])
	}
	return out
}

// HasIOMMU reports whether any function of the host is in an IOMMU group:
// with an active IOMMU every PCI function is.
func (inv *Inventory) HasIOMMU() bool {
	for _, d := range inv.devices {
		if d.HasIOMMU() {
			return true
		}
	}
	return false
}

// Filter returns the functions whose vendor id and class match. vendor is
// four hex digits ("10de") or empty for any; classPrefix is a prefix of the
// six hex digit class ("03" display, "0302" 3D controller) or empty for any.
func (inv *Inventory) Filter(vendor, classPrefix string) []*Device {
	vendor = strings.ToLower(strings.TrimPrefix(vendor, "0x"))
	classPrefix = strings.ToLower(strings.TrimPrefix(classPrefix, "0x"))
	var out []*Device
	for _, d := range inv.Devices() {
		if vendor != "" && fmt.Sprintf("%04x", d.VendorID) != vendor {
			continue
		}
		if !strings.HasPrefix(d.ClassHex(), classPrefix) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// BoundGroup is an IOMMU group with functions bound to vfio-pci: what one
// kohaku_gpu_binding holds.
type BoundGroup struct {
	// Lead is the function a binding of the group is known by: its first
	// display function (the GPU), or its first function bound to vfio-pci
	// when none is a display function.
	Lead *Device
	// Bound are the group's functions bound to vfio-pci, sorted by address.
	Bound []*Device
}

// VFIOGroups returns the IOMMU groups that have functions bound to
// vfio-pci, sorted by their lead's address. A function bound to vfio-pci
// outside any IOMMU group (no IOMMU) makes a group of its own.
func (inv *Inventory) VFIOGroups() []BoundGroup {
	var out []BoundGroup
	byGroup := map[int]int{}
	for _, d := range inv.Devices() {
		if d.Driver != DriverVFIO {
			continue
		}
		i, seen := byGroup[d.Group]
		if !seen || !d.HasIOMMU() {
			i = len(out)
			out = append(out, BoundGroup{})
			if d.HasIOMMU() {
				byGroup[d.Group] = i
			}
		}
		out[i].Bound = append(out[i].Bound, d)
	}
	for i := range out {
		g := &out[i]
		g.Lead = g.Bound[0]
		for _, d := range g.Bound {
			if IsDisplay(d.Class) {
				g.Lead = d
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b BoundGroup) int { return a.Lead.Address.Compare(b.Lead.Address) })
	return out
}

// JoinAddresses lists addresses for a message: "0000:01:00.0, 0000:01:00.1".
func JoinAddresses(as []Address) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.String()
	}
	return strings.Join(parts, ", ")
}
