package vfio

import (
	"fmt"
	"testing"
)

// describeGroups writes groups as "lead[bound bound ...]".
func describeGroups(gs []BoundGroup) string {
	s := ""
	for _, g := range gs {
		s += g.Lead.Address.String() + "["
		for i, d := range g.Bound {
			if i > 0 {
				s += " "
			}
			s += d.Address.String()
		}
		s += "] "
	}
	return s
}

func TestVFIOGroups(t *testing.T) {
	t.Parallel()
	dev := func(a string, class uint32, driver string, group int) *Device {
		return &Device{Address: addr(t, a), Class: class, Driver: driver, Group: group}
	}
	inv, err := NewInventory([]*Device{
		dev("0000:41:00.1", 0x040300, DriverVFIO, 30), // the GPU's audio function sorts after...
		dev("0000:41:00.0", 0x030200, DriverVFIO, 30), // ...its display function, which leads
		dev("0000:02:00.0", 0x010802, DriverVFIO, 12), // an NVMe drive passed through: leads its group
		dev("0000:01:00.0", 0x030000, "nvidia", 13),   // on the host driver: not listed
		dev("0000:01:00.1", 0x040300, DriverVFIO, 13), // but its audio function, bound alone, is
		dev("0000:05:00.0", 0x020000, DriverVFIO, NoGroup),
		dev("0000:06:00.0", 0x020000, DriverVFIO, NoGroup), // no IOMMU: a group each
		dev("0000:07:00.0", 0x030000, "", 40),              // no driver
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "0000:01:00.1[0000:01:00.1] 0000:02:00.0[0000:02:00.0] 0000:05:00.0[0000:05:00.0] " +
		"0000:06:00.0[0000:06:00.0] 0000:41:00.0[0000:41:00.0 0000:41:00.1] "
	if got := describeGroups(inv.VFIOGroups()); got != want {
		t.Errorf("VFIOGroups:\n got %s\nwant %s", got, want)
	}
}

// The nested test host's stand-in GPU, bound, as libvirt describes it.
func TestVFIOGroups_nestedHost(t *testing.T) {
	t.Parallel()
	gs := loadHost(t, "nested-l1-bound").VFIOGroups()
	if got := fmt.Sprint(describeGroups(gs)); got != "0000:03:00.0[0000:03:00.0 0000:03:00.1] " {
		t.Errorf("VFIOGroups: %s", got)
	}
	if n := len(loadHost(t, "workstation").VFIOGroups()); n != 0 {
		t.Errorf("a host with nothing on vfio-pci has %d bound groups", n)
	}
}
