package mdev

import (
	"encoding/xml"
	"fmt"
	"regexp"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// Spec is a mediated device to create: an instance of Type on the parent
// node device Parent, named by UUID.
type Spec struct {
	Parent string // node-device name, e.g. "pci_0000_41_00_0" or "mtty_mtty"
	Type   string // e.g. "nvidia-35", "mtty-2"
	UUID   string
}

// Device is a mediated device as libvirt shows it.
type Device struct {
	Name       string // libvirt's node-device name, e.g. "mdev_<uuid>_mtty"
	Parent     string
	Type       string
	UUID       string
	IOMMUGroup int // -1 when libvirt reports none (defined, not started)
	Active     bool
	Persistent bool
	Autostart  bool
}

// Type is one kind of mediated device a parent offers.
type Type struct {
	ID        string // e.g. "mtty-2"
	Name      string // the vendor's name for it, may be empty
	DeviceAPI string // e.g. "vfio-pci"
	Available uint   // instances that can still be created
}

// Parent is a node device that offers mediated device types.
type Parent struct {
	Name  string
	Types []Type
}

var (
	pciAddress = regexp.MustCompile(`^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$`)
	uuidRE     = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// ParentNodeName is libvirt's node-device name for a parent given as a PCI
// address ("0000:41:00.0" is "pci_0000_41_00_0"); any other value is
// taken as a node-device name already.
func ParentNodeName(parent string) string {
	p := strings.ToLower(strings.TrimSpace(parent))
	if m := pciAddress.FindStringSubmatch(p); m != nil {
		return fmt.Sprintf("pci_%s_%s_%s_%s", m[1], m[2], m[3], m[4])
	}
	return strings.TrimSpace(parent)
}

var pciNodeName = regexp.MustCompile(`^pci_([0-9a-f]{4})_([0-9a-f]{2})_([0-9a-f]{2})_([0-7])$`)

// ParentAddress is the PCI address of a parent's node-device name
// ("pci_0000_41_00_0" is "0000:41:00.0"); empty for a parent that is not a
// PCI device.
func ParentAddress(name string) string {
	m := pciNodeName.FindStringSubmatch(name)
	if m == nil {
		return ""
	}
	return fmt.Sprintf("%s:%s:%s.%s", m[1], m[2], m[3], m[4])
}

// ValidUUID reports whether s is a UUID in the lower-case 8-4-4-4-12 form
// libvirt reports.
func ValidUUID(s string) bool { return uuidRE.MatchString(s) }

// RenderDefinition is the node-device XML that defines s (what virsh
// nodedev-define takes).
func RenderDefinition(s Spec) (string, error) {
	if !ValidUUID(s.UUID) {
		return "", fmt.Errorf("mediated device uuid %q: want the lower-case 8-4-4-4-12 form", s.UUID)
	}
	d := libvirtxml.NodeDevice{
		Parent: s.Parent,
		Capability: libvirtxml.NodeDeviceCapability{MDev: &libvirtxml.NodeDeviceMDevCapability{
			Type: &libvirtxml.NodeDeviceMDevCapabilityType{ID: s.Type},
			UUID: s.UUID,
		}},
	}
	// The <name> stays, empty: libvirt names the device itself, but its
	// schema (which NodeDeviceDefineXMLValidate checks) requires the element.
	return d.Marshal()
}

// ParseDevice reads a mediated device's node-device XML. The state flags
// are not in the XML: the caller fills them.
func ParseDevice(doc string) (Device, error) {
	var d libvirtxml.NodeDevice
	if err := d.Unmarshal(doc); err != nil {
		return Device{}, fmt.Errorf("parsing node device XML: %w", err)
	}
	c := d.Capability.MDev
	if c == nil {
		return Device{}, fmt.Errorf("node device %s is not a mediated device", d.Name)
	}
	out := Device{Name: d.Name, Parent: d.Parent, UUID: strings.ToLower(c.UUID), IOMMUGroup: -1}
	if c.Type != nil {
		out.Type = c.Type.ID
	}
	if c.IOMMUGroup != nil {
		out.IOMMUGroup = c.IOMMUGroup.Number
	}
	return out, nil
}

// capXML is enough of a node device's XML to find its mdev_types
// capability, which libvirt nests under the device's pci, css or ap_matrix
// capability, and for parents of other buses (the kernel's sample parent
// mtty, node device mtty_mtty) libvirt 9.0 writes twice, one mdev_types
// inside another, at the top.
type capXML struct {
	Type  string                          `xml:"type,attr"`
	Types []libvirtxml.NodeDeviceMDevType `xml:"type"`
	Caps  []capXML                        `xml:"capability"`
}

type deviceXML struct {
	Name string   `xml:"name"`
	Caps []capXML `xml:"capability"`
}

// ParseParent reads the mediated device types a node device offers, in the
// order libvirt lists them; none when it offers none.
func ParseParent(doc string) (Parent, error) {
	var d deviceXML
	if err := xml.Unmarshal([]byte(doc), &d); err != nil {
		return Parent{}, fmt.Errorf("parsing node device XML: %w", err)
	}
	p := Parent{Name: d.Name}
	var walk func([]capXML)
	walk = func(cs []capXML) {
		for _, c := range cs {
			if c.Type == "mdev_types" {
				for _, t := range c.Types {
					p.Types = append(p.Types, Type{ID: t.ID, Name: strings.TrimSpace(t.Name), DeviceAPI: t.DeviceAPI, Available: t.AvailableInstances})
				}
			}
			walk(c.Caps)
		}
	}
	walk(d.Caps)
	return p, nil
}

// Offers describes what a parent offers, for messages: "mtty-1 (24
// available), mtty-2 (12 available)".
func (p Parent) Offers() string {
	if len(p.Types) == 0 {
		return "no mediated device types"
	}
	s := make([]string, 0, len(p.Types))
	for _, t := range p.Types {
		s = append(s, fmt.Sprintf("%s (%d available)", t.ID, t.Available))
	}
	return strings.Join(s, ", ")
}

// Lookup returns the type with the given id, or nil.
func (p Parent) Lookup(id string) *Type {
	for i := range p.Types {
		if p.Types[i].ID == id {
			return &p.Types[i]
		}
	}
	return nil
}
