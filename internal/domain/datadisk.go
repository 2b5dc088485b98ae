package domain

import (
	"fmt"
	"regexp"
	"slices"

	"libvirt.org/go/libvirtxml"
)

// DataDisk is a disk besides the boot disk: a volume attached as a virtio
// disk whose serial names it in the guest, as
// /dev/disk/by-id/virtio-<serial>, the same on every boot whatever order
// the disks are attached in.
type DataDisk struct {
	Source
	// Format is the volume's format; DiskQCOW2 when empty.
	Format DiskFormat `json:"format,omitempty"`
	Serial string     `json:"serial"`
}

// MaxSerialLen is the longest serial a virtio disk passes on to the guest.
const MaxSerialLen = 20

var serialRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (v *validator) dataDisks(disks []DataDisk) {
	seen := map[string]bool{}
	for i, d := range disks {
		at := fmt.Sprintf("data_disks[%d]", i)
		switch {
		case d.Serial == "":
			v.add(at+".serial", `"scratch"`, "is empty")
		case len(d.Serial) > MaxSerialLen:
			v.add(at+".serial", `"scratch"`, "%q is %d characters, more than the %d a virtio disk passes on to the guest", d.Serial, len(d.Serial), MaxSerialLen)
		case !serialRE.MatchString(d.Serial):
			v.add(at+".serial", `"scratch"`, "%q has characters other than letters, digits, '.', '_' and '-'", d.Serial)
		case seen[d.Serial]:
			v.add(at+".serial", `"scratch"`, "%q is the serial of another data disk", d.Serial)
		}
		seen[d.Serial] = true
		if d.Pool == "" || d.Volume == "" {
			v.add(at, `{ pool = "default", volume = "scratch.qcow2" }`, "names no pool and volume")
		}
		if d.Format != "" && d.Format != DiskQCOW2 && d.Format != DiskRaw {
			v.add(at+".format", `"qcow2"`, "%q is neither qcow2 nor raw", d.Format)
		}
	}
}

// freeTarget takes the first virtio target (vdb, vdc, …, vdaa, …) not in
// used; vda is the boot disk's.
func freeTarget(used map[string]bool) string {
	for c := 'b'; c <= 'z'; c++ {
		if t := "vd" + string(c); !used[t] {
			used[t] = true
			return t
		}
	}
	for c1 := 'a'; c1 <= 'z'; c1++ {
		for c2 := 'a'; c2 <= 'z'; c2++ {
			if t := "vd" + string(c1) + string(c2); !used[t] {
				used[t] = true
				return t
			}
		}
	}
	return ""
}

// BuildDataDisk is the <disk> of a data disk on target (vdb, vdc, …), as
// Build writes it and as a hot-plug attaches it.
func BuildDataDisk(d DataDisk, target string) libvirtxml.DomainDisk {
	return libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: string(cmpFormat(d.Format)), Discard: "unmap"},
		Source: diskSource(d.Source),
		Target: &libvirtxml.DomainDiskTarget{Dev: target, Bus: "virtio"},
		Serial: d.Serial,
	}
}

// DataDiskXML is BuildDataDisk as XML, for libvirt's attach and detach.
func DataDiskXML(d DataDisk, target string) (string, error) {
	x := BuildDataDisk(d, target)
	return x.Marshal()
}

func cmpFormat(f DiskFormat) DiskFormat {
	if f == "" {
		return DiskQCOW2
	}
	return f
}

// isDataDisk says whether a <disk> is one Parse reads as a data disk: a
// virtio disk other than vda with a serial.
func isDataDisk(x libvirtxml.DomainDisk) bool {
	return (x.Device == "" || x.Device == "disk") && x.Target != nil && x.Target.Dev != "vda" &&
		x.Target.Bus == "virtio" && x.Serial != ""
}

// usedTargets are the targets the disks of d take.
func usedTargets(d *libvirtxml.DomainDeviceList) map[string]bool {
	used := map[string]bool{"vda": true}
	for _, x := range d.Disks {
		if x.Target != nil {
			used[x.Target.Dev] = true
		}
	}
	return used
}

// FreeDiskTarget is the first virtio target (vdb, vdc, …) no disk of the
// domain defined by xml takes, for a data disk attached to it.
func FreeDiskTarget(xml string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		return "", err
	}
	if d.Devices == nil {
		return "vdb", nil
	}
	return freeTarget(usedTargets(d.Devices)), nil
}

// DataDiskTarget is the target of the data disk with serial in the domain
// defined by xml; "" when it has none.
func DataDiskTarget(xml, serial string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		return "", err
	}
	if d.Devices == nil {
		return "", nil
	}
	for _, x := range d.Devices.Disks {
		if isDataDisk(x) && x.Serial == serial {
			return x.Target.Dev, nil
		}
	}
	return "", nil
}

// dataDisks sets the data disks of the spec, matched by serial: one the
// domain has keeps its target and address (its source and format are set
// from the spec), a new one takes the first free target, and one the domain
// has that Kohaku attached (its metadata records the serial) but the spec
// no longer names is removed. Disks Kohaku did not attach stay as they are.
func (m *merger) dataDisks() {
	h := m.have.Devices
	var recorded []string
	if m.obs.Metadata != nil {
		recorded = m.obs.Metadata.DataDisks
	}
	want := map[string]DataDisk{}
	for _, d := range m.n.DataDisks {
		want[d.Serial] = d
	}
	have := map[string]bool{}
	h.Disks = slices.DeleteFunc(h.Disks, func(x libvirtxml.DomainDisk) bool {
		if !isDataDisk(x) {
			return false
		}
		_, keep := want[x.Serial]
		return !keep && slices.Contains(recorded, x.Serial)
	})
	for i, x := range h.Disks {
		d, ok := want[x.Serial]
		if !isDataDisk(x) || !ok || have[x.Serial] {
			continue
		}
		have[x.Serial] = true
		src, _ := parseDiskSource(x.Source)
		f := DiskFormat("")
		if x.Driver != nil {
			f = DiskFormat(x.Driver.Type)
		}
		if src != d.Source || cmpFormat(f) != cmpFormat(d.Format) {
			nd := BuildDataDisk(d, x.Target.Dev)
			nd.Address = x.Address
			h.Disks[i] = nd
		}
	}
	used := usedTargets(h)
	for _, d := range m.n.DataDisks {
		if !have[d.Serial] {
			h.Disks = append(h.Disks, BuildDataDisk(d, freeTarget(used)))
			m.added++
		}
	}
}
