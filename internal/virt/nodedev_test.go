package virt

import (
	"slices"
	"testing"
)

func TestPCIHostdevs(t *testing.T) {
	t.Parallel()
	doc := `<domain type='qemu'><name>l2</name><memory>131072</memory><os><type>hvm</type></os><devices>
  <hostdev mode='subsystem' type='pci' managed='no'>
    <driver name='vfio'/>
    <source><address domain='0x0000' bus='0x03' slot='0x00' function='0x1'/></source>
    <alias name='hostdev1'/>
    <address type='pci' domain='0x0000' bus='0x03' slot='0x02' function='0x0'/>
  </hostdev>
  <hostdev mode='subsystem' type='usb' managed='yes'>
    <source><vendor id='0x1d6b'/><product id='0x0002'/></source>
  </hostdev>
  <hostdev mode='subsystem' type='pci' managed='yes'>
    <source><address domain='0x0001' bus='0xaf' slot='0x1f' function='0x7'/></source>
  </hostdev>
</devices></domain>`
	got, err := pciHostdevs(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0000:03:00.1", "0001:af:1f.7"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v (the guest-side address and the USB device are not host PCI functions)", got, want)
	}
	if got, err := pciHostdevs(`<domain type='qemu'><name>x</name></domain>`); err != nil || len(got) != 0 {
		t.Errorf("no devices: %v %v", got, err)
	}
	if _, err := pciHostdevs(`<domain`); err == nil {
		t.Error("broken XML accepted")
	}
}
