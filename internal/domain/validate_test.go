package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestValidateAcceptsGoldenCases(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		if err := Validate(tc.spec); err != nil {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(s *Spec)
		paths  []string // the attribute paths of the errors, in order; nil = valid
	}{
		{"typical is valid", func(s *Spec) {}, nil},
		{"empty name", func(s *Spec) { s.Name = "" }, []string{"name"}},
		{"name with a slash", func(s *Spec) { s.Name = "a/b" }, []string{"name"}},
		{"name starting with a dash", func(s *Spec) { s.Name = "-vm" }, []string{"name"}},
		{"name too long", func(s *Spec) { s.Name = strings.Repeat("a", MaxNameLen+1) }, []string{"name"}},
		{"longest name", func(s *Spec) { s.Name = strings.Repeat("a", MaxNameLen) }, nil},
		{"bad uuid", func(s *Spec) { s.UUID = "not-a-uuid" }, []string{"uuid"}},
		{"uppercase uuid", func(s *Spec) { s.UUID = "6F1C2A8E-3B4D-4E5F-8A9B-0C1D2E3F4A5B" }, nil},
		{"unknown type", func(s *Spec) { s.Type = "xen" }, []string{"type"}},
		{"zero vcpu", func(s *Spec) { s.VCPU = 0 }, []string{"vcpu"}},
		{"too many vcpus", func(s *Spec) { s.VCPU = MaxVCPU + 1 }, []string{"vcpu"}},
		{"max vcpus", func(s *Spec) { s.VCPU = MaxVCPU }, nil},
		{"too little memory", func(s *Spec) { s.MemoryMiB = MinMemoryMiB - 1 }, []string{"memory_mib"}},
		{"least memory", func(s *Spec) { s.MemoryMiB = MinMemoryMiB }, nil},
		{"too much memory", func(s *Spec) { s.MemoryMiB = MaxMemoryMiB + 1 }, []string{"memory_mib"}},
		{"unknown machine", func(s *Spec) { s.Machine = "virt" }, []string{"machine"}},
		{"unknown firmware", func(s *Spec) { s.Firmware = "coreboot" }, []string{"firmware"}},
		{"unknown cpu mode", func(s *Spec) { s.CPUMode = "host-passthru" }, []string{"cpu_mode"}},
		{"custom cpu mode (how libvirt reads back a domain made without <cpu>)", func(s *Spec) { s.CPUMode = CPUCustom }, nil},
		{"host-passthrough under TCG", func(s *Spec) { s.CPUMode = CPUHostPassthrough }, []string{"cpu_mode"}},
		{"host-passthrough under KVM", func(s *Spec) { s.Type, s.CPUMode = TypeKVM, CPUHostPassthrough }, nil},
		{"host-model under TCG", func(s *Spec) { s.CPUMode = CPUHostModel }, nil},
		{"negative hotplug ports", func(s *Spec) { s.HotplugPorts = -1 }, []string{"hotplug_ports"}},
		{"too many hotplug ports", func(s *Spec) { s.HotplugPorts = MaxHotplugPorts + 1 }, []string{"hotplug_ports"}},
		{"hotplug ports on pc", func(s *Spec) { s.Machine, s.HotplugPorts = MachinePC, 2 }, []string{"hotplug_ports"}},
		{"disk with no source", func(s *Spec) { s.Disk = &Disk{} }, []string{"disk.path"}},
		{"disk with path and pool", func(s *Spec) { s.Disk.Path = "/a.qcow2" }, []string{"disk.path"}},
		{"disk with relative path", func(s *Spec) { s.Disk = &Disk{Source: Source{Path: "a.qcow2"}} }, []string{"disk.path"}},
		{"disk volume without pool", func(s *Spec) { s.Disk.Pool = "" }, []string{"disk.pool"}},
		{"disk pool without volume", func(s *Spec) { s.Disk.Volume = "" }, []string{"disk.volume"}},
		{"disk format", func(s *Spec) { s.Disk.Format = "vmdk" }, []string{"disk.format"}},
		{"no disk and no kernel (boots from a CD-ROM or the network)", func(s *Spec) { s.Disk = nil }, nil},
		{"initrd without kernel", func(s *Spec) { s.Initrd = "/i" }, []string{"initrd"}},
		{"cmdline without kernel", func(s *Spec) { s.Cmdline = "console=ttyS0" }, []string{"cmdline"}},
		{"kernel without disk or initrd", func(s *Spec) { s.Disk, s.Kernel = nil, "/k" }, []string{"initrd"}},
		{"kernel and initrd without disk", func(s *Spec) { s.Disk, s.Kernel, s.Initrd = nil, "/k", "/i" }, nil},
		{"kernel with disk, no initrd", func(s *Spec) { s.Kernel = "/k" }, nil},
		{"relative kernel and initrd", func(s *Spec) { s.Kernel, s.Initrd = "k", "i" }, []string{"kernel", "initrd"}},
		{"seed with no source", func(s *Spec) { s.Seed = &Seed{} }, []string{"seed.path"}},
		{"seed on ide on q35", func(s *Spec) { s.Seed.Bus = SeedBusIDE }, []string{"seed.bus"}},
		{"seed on ide on pc", func(s *Spec) { s.Machine, s.Seed.Bus = MachinePC, SeedBusIDE }, nil},
		{"seed on sata on pc", func(s *Spec) { s.Machine, s.Seed.Bus = MachinePC, SeedBusSATA }, nil},
		{"seed on unknown bus", func(s *Spec) { s.Seed.Bus = "usb" }, []string{"seed.bus"}},
		{"nic without type", func(s *Spec) { s.NICs[0].Type = "" }, []string{"network_interface[0].type"}},
		{"nic of unknown type", func(s *Spec) { s.NICs[0].Type = "direct" }, []string{"network_interface[0].type"}},
		{"network nic without source", func(s *Spec) { s.NICs[0].Source = "" }, []string{"network_interface[0].source"}},
		{"bridge nic without source", func(s *Spec) { s.NICs = []NIC{{Type: NICBridge}} }, []string{"network_interface[0].source"}},
		{"user nic with source", func(s *Spec) { s.NICs = []NIC{{Type: NICUser, Source: "default"}} }, []string{"network_interface[0].source"}},
		{"unknown nic model", func(s *Spec) { s.NICs[0].Model = "ne2k_pci" }, []string{"network_interface[0].model"}},
		{"malformed mac", func(s *Spec) { s.NICs[0].MAC = "52-54-00-00-00-01" }, []string{"network_interface[0].mac"}},
		{"short mac", func(s *Spec) { s.NICs[0].MAC = "52:54:00:00:01" }, []string{"network_interface[0].mac"}},
		{"multicast mac", func(s *Spec) { s.NICs[0].MAC = "01:00:5e:00:00:01" }, []string{"network_interface[0].mac"}},
		{"zero mac", func(s *Spec) { s.NICs[0].MAC = "00:00:00:00:00:00" }, []string{"network_interface[0].mac"}},
		{"duplicate mac, different case", func(s *Spec) {
			s.NICs = append(s.NICs, NIC{Type: NICUser, MAC: strings.ToLower(s.NICs[0].MAC)})
		}, []string{"network_interface[1].mac"}},
		{"unknown share driver", func(s *Spec) { s.SharedFolders[0].Driver = "nfs" }, []string{"shared_folder[0].driver"}},
		{"share without source", func(s *Spec) { s.SharedFolders[1].Source = "" }, []string{"shared_folder[1].source"}},
		{"share with relative source", func(s *Spec) { s.SharedFolders[1].Source = "srv" }, []string{"shared_folder[1].source"}},
		{"empty tag", func(s *Spec) { s.SharedFolders[1].Tag = "" }, []string{"shared_folder[1].tag"}},
		{"duplicate tag", func(s *Spec) { s.SharedFolders[1].Tag = "kohaku_shared" }, []string{"shared_folder[1].tag"}},
		{"9p tag at the limit", func(s *Spec) { s.SharedFolders[1].Tag = strings.Repeat("t", Max9pTagLen) }, nil},
		{"9p tag over the limit", func(s *Spec) { s.SharedFolders[1].Tag = strings.Repeat("t", Max9pTagLen+1) }, []string{"shared_folder[1].tag"}},
		{"virtiofs tag over the 9p limit", func(s *Spec) {
			s.SharedFolders[1] = SharedFolder{Driver: ShareVirtiofs, Source: "/x", Tag: strings.Repeat("t", MaxVirtiofsTagLen)}
		}, nil},
		{"virtiofs tag over its limit", func(s *Spec) {
			s.SharedFolders[1] = SharedFolder{Driver: ShareVirtiofs, Source: "/x", Tag: strings.Repeat("t", MaxVirtiofsTagLen+1)}
		}, []string{"shared_folder[1].tag"}},
		{"tag with a space", func(s *Spec) { s.SharedFolders[1].Tag = "kohaku local" }, []string{"shared_folder[1].tag"}},
		{"tag with a comma", func(s *Spec) { s.SharedFolders[1].Tag = "a,b" }, []string{"shared_folder[1].tag"}},
		{"unknown access mode", func(s *Spec) { s.SharedFolders[0].AccessMode = "none" }, []string{"shared_folder[0].access_mode"}},
		{"virtiofs mapped", func(s *Spec) {
			s.SharedFolders[1] = SharedFolder{Driver: ShareVirtiofs, Source: "/x", Tag: "x", AccessMode: AccessMapped}
		}, []string{"shared_folder[1].access_mode"}},
		{"virtiofs read-only", func(s *Spec) {
			s.SharedFolders[1] = SharedFolder{Driver: ShareVirtiofs, Source: "/x", Tag: "x", ReadOnly: true}
		}, []string{"shared_folder[1].read_only"}},
		{"9p read-only squash", func(s *Spec) { s.SharedFolders[1].ReadOnly, s.SharedFolders[1].AccessMode = true, AccessSquash }, nil},
		{"short hostdev address", func(s *Spec) { s.Hostdevs[1] = "41:00.0" }, []string{"hostdev[1]"}},
		{"duplicate hostdev, different case", func(s *Spec) { s.Hostdevs = []string{"0000:0a:00.0", "0000:0A:00.0"} }, []string{"hostdev[1]"}},
		{"mdev that is not a uuid", func(s *Spec) { s.Mdevs = []string{"mtty-2"} }, []string{"mdev[0]"}},
		{"duplicate mdev, different case", func(s *Spec) {
			s.Mdevs = []string{"6b6f6861-6b75-4d64-8000-000000000001", "6B6F6861-6B75-4D64-8000-000000000001"}
		}, []string{"mdev[1]"}},
		{"relative serial log", func(s *Spec) { s.SerialLogPath = "vm.log" }, []string{"serial_log_path"}},
		{"owned volume without pool", func(s *Spec) { s.Owner.Volumes[0].Pool = "" }, []string{"owned_volume[0].pool"}},
		{"owned volume without name", func(s *Spec) { s.Owner.Volumes[0].Volume = "" }, []string{"owned_volume[0].volume"}},
		{"every problem at once, in attribute order", func(s *Spec) {
			*s = Spec{
				Name: "", Type: "xen", VCPU: 0, MemoryMiB: 0, Initrd: "/i",
				NICs:          []NIC{{Type: NICUser, MAC: "zz"}},
				SharedFolders: []SharedFolder{{Source: "/a", Tag: ""}},
				Hostdevs:      []string{"nope"},
			}
		}, []string{"name", "type", "vcpu", "memory_mib", "initrd", "network_interface[0].mac", "shared_folder[0].tag", "hostdev[0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := typicalSpec()
			s.Disk = &Disk{Source: s.Disk.Source}
			s.Seed = &Seed{Source: s.Seed.Source}
			s.NICs = slices.Clone(s.NICs)
			s.SharedFolders = slices.Clone(s.SharedFolders)
			s.Hostdevs = slices.Clone(s.Hostdevs)
			s.Owner.Volumes = slices.Clone(s.Owner.Volumes)
			tc.mutate(&s)
			err := Validate(s)
			if tc.paths == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var ves ValidationErrors
			if !errors.As(err, &ves) {
				t.Fatalf("Validate = %v, want ValidationErrors", err)
			}
			var paths []string
			for _, ve := range ves {
				paths = append(paths, ve.Path.String())
				if ve.Problem == "" || ve.Example == "" {
					t.Errorf("%s: problem %q example %q, want both", ve.Path, ve.Problem, ve.Example)
				}
			}
			if !slices.Equal(paths, tc.paths) {
				t.Errorf("error paths %q, want %q (%v)", paths, tc.paths, err)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("errors.Is(%v, ErrInvalidSpec) = false", err)
			}
		})
	}
}

func TestValidationErrorFormat(t *testing.T) {
	t.Parallel()
	s := typicalSpec()
	s.SharedFolders = []SharedFolder{
		{Source: "/a", Tag: "kohaku_shared"},
		{Source: "/b", Tag: "a_tag_that_is_far_too_long_for_9p"},
	}
	s.Hostdevs = []string{"41:00.0"}
	err := Validate(s)
	want := `shared_folder[1].tag: "a_tag_that_is_far_too_long_for_9p" is 33 bytes, more than the 31 a virtio-9p tag can hold (for example "kohaku_shared"); ` +
		`hostdev[0]: "41:00.0": the PCI domain is missing (did you mean 0000:41:00.0?) (for example "0000:01:00.0")`
	if err == nil || err.Error() != want {
		t.Fatalf("Validate error:\n got %v\nwant %s", err, want)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Path.String() != "shared_folder[1].tag" {
		t.Errorf("errors.As found %+v, want the shared_folder[1].tag error first", ve)
	}
	var pe *PCIAddressError
	if !errors.As(err, &pe) || pe.Input != "41:00.0" {
		t.Errorf("errors.As(*PCIAddressError) = %+v, want the hostdev's cause", pe)
	}
}
