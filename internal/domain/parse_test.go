package domain

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// TestRoundTrip: Build → Marshal → libvirtxml Unmarshal → ParseDomain gives
// back the normalized spec, owner metadata and spec hash included.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	cases := goldenCases()
	cases = append(cases,
		goldenCase{"uppercase-mac-and-hostdev", Spec{
			Name: "rt", VCPU: 1, MemoryMiB: 64, Kernel: "/k", Initrd: "/i",
			NICs:     []NIC{{Type: NICBridge, Source: "br0", MAC: "52:54:00:AB:CD:EF", Model: "e1000e"}},
			Hostdevs: []string{"0000:AF:1F.7", "0000:0a:00.0"},
		}},
		goldenCase{"pc-with-scsi-seed-and-virtiofs", Spec{
			Name: "rt2", Type: TypeKVM, Machine: MachinePC, VCPU: 255, MemoryMiB: MaxMemoryMiB,
			CPUMode: CPUHostModel, Disk: &Disk{Source: Source{Path: "/d.img"}, Format: DiskRaw},
			Seed:          &Seed{Source: Source{Path: "/s.iso"}, Bus: SeedBusSCSI},
			SharedFolders: []SharedFolder{{Driver: ShareVirtiofs, Source: "/x", Tag: strings.Repeat("t", MaxVirtiofsTagLen)}},
		}},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc, err := Marshal(tc.spec)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			var dom libvirtxml.Domain
			if err := dom.Unmarshal(doc); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			o, err := ParseDomain(&dom)
			if err != nil {
				t.Fatalf("ParseDomain: %v", err)
			}
			want := Normalize(tc.spec)
			if !reflect.DeepEqual(o.Spec, want) {
				t.Errorf("parsed spec differs\n got: %+v\nwant: %+v", o.Spec, want)
			}
			if o.Metadata == nil || o.Metadata.SpecHash != Hash(tc.spec) {
				t.Errorf("metadata = %+v, want spec hash %s", o.Metadata, Hash(tc.spec))
			}
			if Hash(o.Spec) != Hash(tc.spec) {
				t.Errorf("Hash(parsed) = %s, want %s", Hash(o.Spec), Hash(tc.spec))
			}
			if len(o.Unrecognized) != 0 {
				t.Errorf("Unrecognized = %q", o.Unrecognized)
			}
		})
	}
}

var libvirtMAC = regexp.MustCompile(`^52:54:00(:[0-9a-f]{2}){3}$`)

// TestParseLibvirtDumps parses what libvirt 9.0 (QEMU 7.2) returned from
// dumpxml after defining each golden case (see TestCaptureLibvirtDumps).
// libvirt adds a UUID, MACs, controllers, addresses and the emulator, writes
// memory in KiB and the machine as pc-q35-7.2, and drops the channel <source>.
func TestParseLibvirtDumps(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc, err := os.ReadFile(libvirtPath(tc.name))
			if err != nil {
				t.Fatalf("%v (refresh with -capture=qemu:///system)", err)
			}
			o, err := Parse(string(doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := Normalize(tc.spec)
			// What libvirt generates: a UUID when none was given, and MACs.
			if want.UUID == "" {
				if len(o.Spec.UUID) != 36 {
					t.Errorf("UUID %q, want the one libvirt generated", o.Spec.UUID)
				}
				want.UUID = o.Spec.UUID
			}
			allMACsGiven := true
			for i := range want.NICs {
				if want.NICs[i].MAC == "" && i < len(o.Spec.NICs) {
					allMACsGiven = false
					if !libvirtMAC.MatchString(o.Spec.NICs[i].MAC) {
						t.Errorf("NIC %d MAC %q, want one libvirt generated", i, o.Spec.NICs[i].MAC)
					}
					want.NICs[i].MAC = o.Spec.NICs[i].MAC
				}
			}
			if !reflect.DeepEqual(o.Spec, want) {
				t.Errorf("parsed spec differs\n got: %+v\nwant: %+v", o.Spec, want)
			}
			if o.Metadata == nil || o.Metadata.SpecHash != Hash(tc.spec) {
				t.Errorf("metadata = %+v, want spec hash %s", o.Metadata, Hash(tc.spec))
			}
			if allMACsGiven && Hash(o.Spec) != Hash(tc.spec) {
				t.Errorf("Hash(parsed) = %s, want the recorded %s", Hash(o.Spec), Hash(tc.spec))
			}
			wantMachine := "pc-q35-7.2"
			if want.Machine == MachinePC {
				wantMachine = "pc-i440fx-7.2"
			}
			if o.MachineType != wantMachine || o.Active {
				t.Errorf("machine type %q active %v, want %s and inactive", o.MachineType, o.Active, wantMachine)
			}
			if len(o.Unrecognized) != 0 {
				t.Errorf("Unrecognized = %q", o.Unrecognized)
			}
			var names []string
			for _, c := range o.Channels {
				names = append(names, c.Name)
				if c.Path != "" {
					t.Errorf("channel %s has path %q on an inactive domain", c.Name, c.Path)
				}
			}
			if !reflect.DeepEqual(names, channelNames(want)) {
				t.Errorf("channels %q, want %q", names, channelNames(want))
			}
		})
	}
}

// activeXML is hand-written in the form libvirt 9.0 dumps a running domain
// (id, aliases, a chosen channel path, an autoselected UEFI loader and NVRAM,
// the interface's tap device); it could not be captured because the test
// host's domains may not be started.
const activeXML = `<domain type='qemu' id='7'>
  <name>vm1</name>
  <uuid>6F1C2A8E-3B4D-4E5F-8A9B-0C1D2E3F4A5B</uuid>
  <memory unit='GiB'>2</memory>
  <vcpu placement='static'>2</vcpu>
  <os firmware='efi'>
    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>
    <loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>
    <nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/qemu/nvram/vm1_VARS.fd</nvram>
  </os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/vm1.qcow2' index='1'/>
      <backingStore/>
      <target dev='vda' bus='virtio'/>
      <alias name='virtio-disk0'/>
    </disk>
    <controller type='pci' index='0' model='pcie-root'><alias name='pcie.0'/></controller>
    <interface type='network'>
      <mac address='52:54:00:0A:0B:0C'/>
      <source network='default' portid='5a6b' bridge='virbr0'/>
      <target dev='vnet3'/>
      <model type='virtio'/>
      <alias name='net0'/>
    </interface>
    <serial type='pty'>
      <source path='/dev/pts/4'/>
      <log file='/var/log/kohaku/vm1.log' append='on'/>
      <target type='isa-serial' port='0'><model name='isa-serial'/></target>
      <alias name='serial0'/>
    </serial>
    <channel type='unix'>
      <source mode='bind' path='/var/lib/libvirt/qemu/channel/target/domain-7-vm1/org.kohaku.report.0'/>
      <target type='virtio' name='org.kohaku.report.0' state='disconnected'/>
      <alias name='channel0'/>
    </channel>
  </devices>
</domain>`

func TestParseActiveDomain(t *testing.T) {
	t.Parallel()
	o, err := Parse(activeXML)
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		Name: "vm1", UUID: "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", Type: TypeQEMU, VCPU: 2, MemoryMiB: 2048,
		Machine: MachineQ35, Firmware: FirmwareUEFI, CPUMode: "",
		Disk:          &Disk{Source: Source{Path: "/var/lib/libvirt/images/vm1.qcow2"}, Format: DiskQCOW2},
		NICs:          []NIC{{Type: NICNetwork, Source: "default", Model: "virtio", MAC: "52:54:00:0a:0b:0c"}},
		NoGuestAgent:  true,
		SerialLogPath: "/var/log/kohaku/vm1.log",
		HotplugPorts:  0,
	}
	if !reflect.DeepEqual(o.Spec, want) {
		t.Errorf("parsed spec differs\n got: %+v\nwant: %+v", o.Spec, want)
	}
	if !o.Active || o.Metadata != nil || len(o.Unrecognized) != 0 {
		t.Errorf("active=%v metadata=%+v unrecognized=%q, want active, no metadata, nothing unrecognized", o.Active, o.Metadata, o.Unrecognized)
	}
	wantCh := []Channel{{Name: phonehome.ReportChannel, Path: "/var/lib/libvirt/qemu/channel/target/domain-7-vm1/org.kohaku.report.0"}}
	if !reflect.DeepEqual(o.Channels, wantCh) {
		t.Errorf("channels %+v, want %+v", o.Channels, wantCh)
	}
}

// TestParseUnrecognized: what Spec cannot express is reported, not dropped.
func TestParseUnrecognized(t *testing.T) {
	t.Parallel()
	const doc = `<domain type='kvm'>
  <name>vm2</name>
  <memory>1048576</memory>
  <vcpu>1</vcpu>
  <os><type machine='pc'>hvm</type><boot dev='hd'/></os>
  <cpu mode='custom'><model>qemu64</model></cpu>
  <devices>
    <disk type='file' device='disk'><source file='/a.qcow2'/><target dev='vda' bus='virtio'/></disk>
    <disk type='file' device='disk'><source file='/b.qcow2'/><target dev='vdb' bus='virtio'/></disk>
    <disk type='network' device='disk'><source protocol='rbd' name='pool/img'/><target dev='vdc' bus='virtio'/></disk>
    <disk type='file' device='cdrom'><target dev='hdc' bus='ide'/><readonly/></disk>
    <disk type='file' device='cdrom'><source file='/other.iso'/><target dev='hdd' bus='ide'/><readonly/></disk>
    <interface type='direct'><mac address='52:54:00:00:00:09'/><source dev='eth0' mode='bridge'/></interface>
    <hostdev mode='subsystem' type='usb'><source><vendor id='0x1234'/><product id='0x5678'/></source></hostdev>
    <serial type='pty'><target port='0'/></serial>
    <serial type='file'><source path='/var/log/second.log'/><target port='1'/></serial>
    <channel type='spicevmc'><target type='virtio' name='com.redhat.spice.0'/></channel>
    <graphics type='vnc' port='-1'/>
    <video><model type='cirrus'/></video>
  </devices>
</domain>`
	o, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	wantUnrec := []string{
		"disk vdb",
		"disk vdc with a source kohaku does not manage",
		"cdrom hdd",
		"interface 52:54:00:00:00:09 of a type kohaku does not manage",
		"hostdev that is neither a host PCI device nor a mediated device",
		"channel com.redhat.spice.0",
		"serial port 0 that is not logged to a file",
		"serial port 1",
		"graphics vnc",
		"video cirrus",
	}
	if !reflect.DeepEqual(o.Unrecognized, wantUnrec) {
		t.Errorf("Unrecognized:\n got %q\nwant %q", o.Unrecognized, wantUnrec)
	}
	if o.Spec.Machine != MachinePC || o.Spec.CPUMode != "custom" || o.Spec.MemoryMiB != 1024 || o.Spec.HotplugPorts != 0 {
		t.Errorf("machine %q cpu %q memory %d hotplug %d", o.Spec.Machine, o.Spec.CPUMode, o.Spec.MemoryMiB, o.Spec.HotplugPorts)
	}
	if o.Spec.Seed == nil || !o.Spec.Seed.IsZero() || o.Spec.Seed.Bus != SeedBusIDE {
		t.Errorf("ejected seed = %+v, want an IDE drive with no source", o.Spec.Seed)
	}
	if o.Spec.SerialLogPath != "" || len(o.Spec.NICs) != 0 || len(o.Spec.Hostdevs) != 0 {
		t.Errorf("serial %q nics %v hostdevs %v, want none", o.Spec.SerialLogPath, o.Spec.NICs, o.Spec.Hostdevs)
	}
}

func TestParseMemoryUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value uint
		unit  string
		want  int
	}{
		{1048576, "", 1024},
		{1048576, "KiB", 1024},
		{1048576, "k", 1024},
		{2048, "MiB", 2048},
		{2, "GiB", 2048},
		{2, "G", 2048},
		{1, "TiB", 1 << 20},
		{1073741824, "b", 1024},
		{1073741824, "bytes", 1024},
		{1000000, "KB", 953},
		{4, "GB", 3814},
		{1, "T", 1 << 20},
	}
	for _, tc := range tests {
		got, err := toMiB(tc.value, tc.unit)
		if err != nil || got != tc.want {
			t.Errorf("toMiB(%d, %q) = %d, %v; want %d", tc.value, tc.unit, got, err, tc.want)
		}
	}
	if _, err := toMiB(1, "furlongs"); err == nil {
		t.Error("toMiB accepted an unknown unit")
	}
	if _, err := Parse(`<domain><name>x</name><memory unit='parsecs'>1</memory></domain>`); err == nil || !strings.Contains(err.Error(), "parsecs") {
		t.Errorf("Parse with an unknown memory unit: err = %v", err)
	}
}

func TestParseMachineFamily(t *testing.T) {
	t.Parallel()
	tests := map[string]Machine{
		"q35": MachineQ35, "pc-q35-7.2": MachineQ35, "pc-q35-rhel9.2.0": MachineQ35,
		"pc": MachinePC, "pc-i440fx-7.2": MachinePC, "pc-i440fx-2.12": MachinePC,
		"microvm": "microvm", "": "",
	}
	for in, want := range tests {
		if got := machineFamily(in); got != want {
			t.Errorf("machineFamily(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"not xml":   "this is not XML",
		"truncated": "<domain type='kvm'><name>x</name>",
	} {
		if _, err := Parse(doc); err == nil {
			t.Errorf("%s: Parse accepted %q", name, doc)
		}
	}
}
