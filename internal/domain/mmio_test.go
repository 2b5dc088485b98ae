package domain

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// The 64-bit MMIO window round-trips on q35 and pc, under SeaBIOS (the
// root bus's pcihole64 alone) and under UEFI (plus OVMF's aperture).
func TestPCIMMIO64(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		spec     Spec
		want     []string
		wantNone []string
	}{
		{"q35 bios", Spec{Name: "m1", VCPU: 1, MemoryMiB: 512, Kernel: "/k", Initrd: "/i", PCIMMIO64GiB: 64},
			[]string{`<controller type="pci" index="0" model="pcie-root">`, `<pcihole64 unit="KiB">67108864</pcihole64>`}, []string{"qemu:commandline", "fw_cfg"}},
		{"q35 uefi", Spec{Name: "m2", VCPU: 1, MemoryMiB: 512, Firmware: FirmwareUEFI, Disk: rootVolume("m2"), PCIMMIO64GiB: 256, Hostdevs: []string{"0000:41:00.0"}},
			[]string{`<pcihole64 unit="KiB">268435456</pcihole64>`, `<commandline xmlns="http://libvirt.org/schemas/domain/qemu/1.0">`, `<arg value="-fw_cfg"></arg>`, `<arg value="name=opt/ovmf/X-PciMmio64Mb,string=262144"></arg>`}, nil},
		{"pc uefi", Spec{Name: "m3", VCPU: 1, MemoryMiB: 512, Machine: MachinePC, Firmware: FirmwareUEFI, Disk: rootVolume("m3"), PCIMMIO64GiB: 128},
			[]string{`<controller type="pci" index="0" model="pci-root">`, `<pcihole64 unit="KiB">134217728</pcihole64>`, `string=131072`}, nil},
		{"default", Spec{Name: "m4", VCPU: 1, MemoryMiB: 512, Firmware: FirmwareUEFI, Disk: rootVolume("m4")},
			nil, []string{"pcihole64", "qemu:commandline", "fw_cfg"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkRoundTrip(t, tc.spec, tc.want, tc.wantNone)
		})
	}
}

// What Build would not write is reported, not taken for the setting: other
// QEMU arguments, an aperture that disagrees with pcihole64, a window in
// part GiB.
func TestPCIMMIO64Unrecognized(t *testing.T) {
	t.Parallel()
	doc, err := Marshal(Spec{Name: "m5", VCPU: 1, MemoryMiB: 512, Firmware: FirmwareUEFI, Disk: rootVolume("m5"), PCIMMIO64GiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit func(d *libvirtxml.Domain)
		want string
	}{
		"foreign argument": {func(d *libvirtxml.Domain) {
			d.QEMUCommandline.Args = append(d.QEMUCommandline.Args, libvirtxml.DomainQEMUCommandlineArg{Value: "-no-hpet"})
		}, `QEMU command-line argument "-no-hpet"`},
		"aperture disagrees": {func(d *libvirtxml.Domain) {
			d.QEMUCommandline.Args[1].Value = "name=opt/ovmf/X-PciMmio64Mb,string=1024"
		}, "OVMF 64-bit aperture of 1024 MiB with pcihole64 of 64 GiB"},
		"part GiB": {func(d *libvirtxml.Domain) {
			for i := range d.Devices.Controllers {
				if c := &d.Devices.Controllers[i]; c.PCI != nil && c.PCI.Hole64 != nil {
					c.PCI.Hole64.Size = 1536
					c.PCI.Hole64.Unit = "MiB"
				}
			}
		}, "pcihole64 of 1536 MiB (not whole GiB)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var d libvirtxml.Domain
			if err := d.Unmarshal(doc); err != nil {
				t.Fatal(err)
			}
			tc.edit(&d)
			o, err := ParseDomain(&d)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(o.Unrecognized, "\n"), tc.want) {
				t.Errorf("Unrecognized = %q, want %q", o.Unrecognized, tc.want)
			}
		})
	}
	if err := Validate(Spec{Name: "m6", VCPU: 1, MemoryMiB: 512, Kernel: "/k", Initrd: "/i", PCIMMIO64GiB: MaxPCIMMIO64GiB + 1}); err == nil || !strings.Contains(err.Error(), "pci_mmio64_gib") {
		t.Errorf("Validate of %d GiB: %v, want an error on pci_mmio64_gib", MaxPCIMMIO64GiB+1, err)
	}
}
