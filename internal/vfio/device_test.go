package vfio

import (
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"0000:01:00.0":  "0000:01:00.0",
		"0000:AF:1F.7":  "0000:af:1f.7",
		"10000:01:00.0": "", // five domain digits: refused
	}
	for in, want := range good {
		a, err := ParseAddress(in)
		if want == "" {
			if err == nil {
				t.Errorf("%q parsed as %s, want an error", in, a)
			}
			continue
		}
		if err != nil || a.String() != want {
			t.Errorf("%q: %v %v, want %s", in, a, err, want)
		}
	}
	for _, bad := range []string{"", "01:00.0", "0000:01:00", "0000:01:20.0", "0000:01:00.8", "0000:1:00.0", "pci_0000_01_00_0", "0000:0g:00.0"} {
		_, err := ParseAddress(bad)
		if err == nil {
			t.Errorf("%q parsed, want an error", bad)
			continue
		}
		if !strings.Contains(err.Error(), "for example 0000:01:00.0") {
			t.Errorf("%q: error gives no example: %v", bad, err)
		}
	}
	if _, err := ParseAddress("01:00.0"); err == nil || !strings.Contains(err.Error(), "did you mean 0000:01:00.0") {
		t.Errorf("a missing domain is not pointed out: %v", err)
	}
}

func TestNodeDeviceName(t *testing.T) {
	t.Parallel()
	if got := NodeDeviceName(addr(t, "0000:af:1f.7")); got != "pci_0000_af_1f_7" {
		t.Errorf("got %s", got)
	}
}

func TestParseDevice(t *testing.T) {
	t.Parallel()
	inv := loadHost(t, "workstation")
	d := inv.Lookup(addr(t, "0000:01:00.0"))
	if d == nil {
		t.Fatal("GPU missing")
	}
	if d.Name != "pci_0000_01_00_0" || d.Class != 0x030000 || d.VendorID != 0x10de || d.ProductID != 0x2204 ||
		d.Driver != "nvidia" || d.Group != 13 || d.NUMANode != 0 || d.Bridge ||
		d.VendorName != "NVIDIA Corporation" || d.ProductName != "GA102 [GeForce RTX 3090]" {
		t.Errorf("parsed %+v", d)
	}
	if got := len(d.GroupMembers); got != 2 {
		t.Errorf("%d group members, want 2", got)
	}
	if d.ClassHex() != "030000" || d.ClassName() != "VGA compatible controller" {
		t.Errorf("class %s %q", d.ClassHex(), d.ClassName())
	}
	// what libvirt prints for QEMU's edu device: no names, no driver, no NUMA node
	edu := loadHost(t, "nested-l1").Lookup(addr(t, "0000:02:00.0"))
	if edu.Driver != "" || edu.NUMANode != -1 || edu.VendorName != "" || edu.VendorID != 0x1234 || edu.ProductID != 0x11e8 || edu.ClassName() != "Unclassified device" {
		t.Errorf("edu parsed %+v (%s)", edu, edu.ClassName())
	}
	// the bridge is known by its class and by libvirt's pci-bridge capability
	br := loadHost(t, "bmc-bridge").Lookup(addr(t, "0000:02:00.0"))
	if !br.Bridge || br.Driver != "" {
		t.Errorf("bridge parsed %+v", br)
	}
	if _, err := ParseDevice(`<device><name>net_eth0</name><capability type='net'><interface>eth0</interface></capability></device>`); err == nil {
		t.Error("a net device parsed as PCI")
	}
	if _, err := ParseDevice(`<device><name>pci_x</name><capability type='pci'><class>0x03zz00</class><domain>0</domain><bus>1</bus><slot>0</slot><function>0</function><product id='0x1'/><vendor id='0x2'/></capability></device>`); err == nil || !strings.Contains(err.Error(), "class") {
		t.Errorf("bad class: %v", err)
	}
}

func TestInventory(t *testing.T) {
	t.Parallel()
	inv := loadHost(t, "workstation")
	if !inv.HasIOMMU() || loadHost(t, "no-iommu").HasIOMMU() {
		t.Error("HasIOMMU wrong")
	}
	names := func(ds []*Device) string {
		var s []string
		for _, d := range ds {
			s = append(s, d.Address.String())
		}
		return strings.Join(s, " ")
	}
	if got := names(inv.Filter("", "03")); got != "0000:01:00.0" {
		t.Errorf("display devices: %s", got)
	}
	if got := names(inv.Filter("10DE", "")); got != "0000:01:00.0 0000:01:00.1" {
		t.Errorf("NVIDIA devices: %s", got)
	}
	if got := names(inv.Filter("0x8086", "0604")); got != "0000:00:01.0" {
		t.Errorf("Intel PCI bridges: %s", got)
	}
	if got := names(inv.Filter("", "0302")); got != "" {
		t.Errorf("3D controllers: %s", got)
	}
	d := inv.Lookup(addr(t, "0000:01:00.0"))
	if _, err := NewInventory([]*Device{d, d}); err == nil {
		t.Error("a duplicate address was accepted")
	}
}

func TestClassName(t *testing.T) {
	t.Parallel()
	for class, want := range map[uint32]string{
		0x030000: "VGA compatible controller",
		0x030200: "3D controller",
		0x040300: "Audio device",
		0x010802: "Non-Volatile memory controller",
		0x020000: "Ethernet controller",
		0x060400: "PCI bridge",
		0x060401: "PCI bridge",
		0x00ff00: "Unclassified device",
		0x0c0330: "USB controller",
		0x120000: "Processing accelerators",
		0x0d1100: "Wireless controller",
		0xee0000: "Unknown class",
	} {
		if got := ClassName(class); got != want {
			t.Errorf("ClassName(%06x) = %q, want %q", class, got, want)
		}
	}
}

func TestIsNVIDIA(t *testing.T) {
	for _, c := range []struct {
		name string
		dev  *Device
		want bool
	}{
		{"no device", nil, false},
		{"an NVIDIA card on nvidia", &Device{VendorID: 0x10de, Driver: "nvidia"}, true},
		{"an NVIDIA card on nouveau", &Device{VendorID: 0x10de, Driver: "nouveau"}, true},
		{"an NVIDIA card on vfio-pci already", &Device{VendorID: 0x10de, Driver: "vfio-pci"}, true},
		{"another vendor's function the nvidia driver drives", &Device{VendorID: 0x1234, Driver: "nvidia"}, true},
		{"QEMU's VGA on bochs-drm", &Device{VendorID: 0x1234, Driver: "bochs-drm"}, false},
		{"an AMD card on amdgpu", &Device{VendorID: 0x1002, Driver: "amdgpu"}, false},
		{"a driver merely named like nvidia", &Device{VendorID: 0x1234, Driver: "nvidiafb"}, false},
	} {
		if got := c.dev.IsNVIDIA(); got != c.want {
			t.Errorf("%s: IsNVIDIA() = %v, want %v", c.name, got, c.want)
		}
	}
}
