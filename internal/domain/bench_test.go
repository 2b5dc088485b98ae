package domain

import (
	"os"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// Run: go test ./internal/domain -run '^$' -bench . -benchmem -count 5
// and compare BenchmarkBuildMarshal with BenchmarkBaselineMarshalMinimal,
// which only encodes a hand-made minimal domain with libvirtxml.

// BenchmarkBuildMarshal: the typical VM (overlay disk, seed, 1 NIC, 2 9p
// shares, 2 hostdevs, both channels) from Spec to XML string.
func BenchmarkBuildMarshal(b *testing.B) {
	spec := typicalSpec()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineMarshalMinimal: libvirtxml encoding a minimal domain (name,
// memory, vcpu, os, one disk), the floor any XML generation pays.
func BenchmarkBaselineMarshalMinimal(b *testing.B) {
	dom := &libvirtxml.Domain{
		Type:   "qemu",
		Name:   "minimal",
		Memory: &libvirtxml.DomainMemory{Value: 512, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "q35", Type: "hvm"}},
		Devices: &libvirtxml.DomainDeviceList{Disks: []libvirtxml.DomainDisk{{
			Device: "disk",
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/var/lib/libvirt/images/minimal.qcow2"}},
			Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
		}}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dom.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseLibvirtTypical: Parse of what libvirt returned for the typical VM.
func BenchmarkParseLibvirtTypical(b *testing.B) {
	doc, err := os.ReadFile(libvirtPath("typical"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(string(doc)); err != nil {
			b.Fatal(err)
		}
	}
}
