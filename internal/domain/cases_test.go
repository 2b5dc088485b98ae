package domain

// goldenCase is a spec with a golden XML file under testdata/golden and, when
// libvirt was reachable, libvirt's dumpxml of it under testdata/libvirt.
// Domain names carry the kohaku-domtest- prefix so the capture test can define
// them on a real libvirtd without touching anything else.
type goldenCase struct {
	name string
	spec Spec
}

func rootVolume(name string) *Disk {
	return &Disk{Source: Source{Pool: "default", Volume: name + "-root.qcow2"}}
}

func seedVolume(name string) *Seed {
	return &Seed{Source: Source{Pool: "default", Volume: name + "-seed.iso"}}
}

// typicalSpec is a GPU worker as kohaku_vm creates it: a qcow2 overlay volume,
// the seed, one NIC, KohakuRiver's two 9p shares, a GPU and its audio
// function, and both channels.
func typicalSpec() Spec {
	const name = "kohaku-domtest-typical"
	return Spec{
		Name:      name,
		Type:      TypeQEMU,
		VCPU:      4,
		MemoryMiB: 8192,
		Disk:      rootVolume(name),
		Seed:      seedVolume(name),
		NICs:      []NIC{{Type: NICNetwork, Source: "default", MAC: "52:54:00:6B:00:01"}},
		SharedFolders: []SharedFolder{
			{Source: "/srv/kohaku/shared", Tag: "kohaku_shared"},
			{Source: "/srv/kohaku/local/" + name, Tag: "kohaku_local", AccessMode: AccessMapped},
		},
		Hostdevs: []string{"0000:41:00.1", "0000:41:00.0"},
		Owner: Ownership{
			Volumes: []VolumeRef{{Pool: "default", Volume: name + "-root.qcow2"}},
			SeedID:  "default/" + name + "-seed.iso",
		},
	}
}

func goldenCases() []goldenCase {
	c := func(name string, f func(s *Spec)) goldenCase {
		s := Spec{
			Name:      "kohaku-domtest-" + name,
			Type:      TypeQEMU,
			VCPU:      1,
			MemoryMiB: 512,
		}
		f(&s)
		return goldenCase{name: name, spec: s}
	}
	return []goldenCase{
		c("minimal", func(s *Spec) {
			s.Disk = &Disk{Source: Source{Path: "/var/lib/libvirt/images/minimal.qcow2"}}
		}),
		c("kvm-defaults", func(s *Spec) {
			s.Type = "" // kvm, host-passthrough
			s.Disk = &Disk{Source: Source{Path: "/dev/vg0/kvm-defaults"}, Format: DiskRaw}
		}),
		c("kernel-boot", func(s *Spec) {
			s.VCPU, s.MemoryMiB = 2, 1024
			s.Disk = rootVolume(s.Name)
			s.Kernel = "/var/lib/kohaku/boot/vmlinuz-6.1.0-28-amd64"
			s.Initrd = "/var/lib/kohaku/boot/initrd.img-6.1.0-28-amd64"
			s.Cmdline = "root=/dev/vda rw console=ttyS0"
			s.Seed = seedVolume(s.Name)
			s.NICs = []NIC{{Type: NICUser}}
		}),
		c("kernel-only", func(s *Spec) {
			s.Kernel = "/var/lib/kohaku/boot/vmlinuz"
			s.Initrd = "/var/lib/kohaku/boot/initrd.img"
			s.Cmdline = "console=ttyS0 rdinit=/bin/sh"
			s.NoReportChannel = true
		}),
		c("seed-q35-sata", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.Seed = seedVolume(s.Name)
		}),
		c("seed-pc-ide", func(s *Spec) {
			s.Machine = MachinePC
			s.Disk = rootVolume(s.Name)
			s.Seed = &Seed{Source: Source{Path: "/var/lib/libvirt/images/seed-pc-ide.iso"}}
		}),
		c("seed-scsi", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.Seed = &Seed{Source: Source{Pool: "default", Volume: "seed-scsi.iso"}, Bus: SeedBusSCSI}
		}),
		c("uefi", func(s *Spec) {
			s.Firmware = FirmwareUEFI
			s.MemoryMiB = 1024
			s.Disk = rootVolume(s.Name)
		}),
		c("uefi-pc", func(s *Spec) {
			s.Firmware = FirmwareUEFI
			s.Machine = MachinePC
			s.MemoryMiB = 1024
			s.Disk = rootVolume(s.Name)
		}),
		c("nic-network", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.NICs = []NIC{{Type: NICNetwork, Source: "default"}}
		}),
		c("nic-bridge", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.NICs = []NIC{{Type: NICBridge, Source: "br0", MAC: "52:54:00:aa:bb:01"}}
		}),
		c("nic-user", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.NICs = []NIC{{Type: NICUser, MAC: "52:54:00:AA:BB:02"}}
		}),
		c("nic-models", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.NICs = []NIC{
				{Type: NICUser, Model: "e1000", MAC: "52:54:00:aa:bb:03"},
				{Type: NICUser, Model: "rtl8139", MAC: "52:54:00:aa:bb:04"},
				{Type: NICUser, Model: "e1000e", MAC: "52:54:00:aa:bb:05"},
			}
		}),
		c("shares", func(s *Spec) {
			s.MemoryMiB = 1024
			s.Disk = rootVolume(s.Name)
			s.SharedFolders = []SharedFolder{
				{Source: "/srv/kohaku/shared", Tag: "kohaku_shared", AccessMode: AccessMapped, ReadOnly: true},
				{Source: "/srv/kohaku/scratch", Tag: "scratch", AccessMode: AccessSquash},
				{Driver: ShareVirtiofs, Source: "/srv/kohaku/local", Tag: "kohaku_local"},
			}
		}),
		c("data-disks", func(s *Spec) {
			s.MemoryMiB = 1024
			s.Disk = rootVolume(s.Name)
			s.Seed = seedVolume(s.Name)
			s.DataDisks = []DataDisk{
				{Source: Source{Pool: "default", Volume: s.Name + "-scratch.qcow2"}, Serial: "scratch"},
				{Source: Source{Pool: "data", Volume: "dataset.raw"}, Format: DiskRaw, Serial: "dataset"},
			}
		}),
		c("hostdevs", func(s *Spec) {
			s.MemoryMiB = 2048
			s.Disk = rootVolume(s.Name)
			s.Hostdevs = []string{"0000:82:00.1", "0000:03:00.0", "0000:82:00.0"}
		}),
		c("mdevs", func(s *Spec) {
			s.MemoryMiB = 2048
			s.Disk = rootVolume(s.Name)
			s.Hostdevs = []string{"0000:03:00.0"}
			s.Mdevs = []string{"6B6F6861-6B75-4D64-8000-000000000002", "6b6f6861-6b75-4d64-8000-000000000001"}
		}),
		c("hostdevs-pc", func(s *Spec) {
			s.Machine = MachinePC
			s.MemoryMiB = 2048
			s.Disk = rootVolume(s.Name)
			s.Hostdevs = []string{"0000:82:00.1", "0000:82:00.0"}
		}),
		c("channels-serial", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.NoGuestAgent = true
			s.SerialLogPath = "/var/log/kohaku/channels-serial.console.log"
			s.HotplugPorts = 1
		}),
		c("no-channels", func(s *Spec) {
			s.Disk = rootVolume(s.Name)
			s.NoGuestAgent, s.NoReportChannel = true, true
			s.UUID = "6F1C2A8E-3B4D-4E5F-8A9B-0C1D2E3F4A5B"
		}),
		{name: "typical", spec: typicalSpec()},
	}
}
