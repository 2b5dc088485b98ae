package domain

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.xml from the current Build output")

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".xml") }

// TestBuildGolden compares Marshal's output for every golden case with its
// file under testdata/golden (go test ./internal/domain -run Golden -update
// rewrites them).
func TestBuildGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Marshal(tc.spec)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			got += "\n"
			path := goldenPath(tc.name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from Marshal output (run with -update if the change is intended):\n%s", path, firstDiff(string(want), got))
			}
		})
	}
}

// TestGoldenFilesHaveCases catches golden files left behind by a renamed case.
func TestGoldenFilesHaveCases(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, tc := range goldenCases() {
		names[tc.name] = true
	}
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, f := range files {
		if n := strings.TrimSuffix(filepath.Base(f), ".xml"); !names[n] {
			t.Errorf("%s has no golden case", f)
		}
	}
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + w + "\n  got:  " + g
		}
	}
	return "(no line differs)"
}

func TestBuildRejectsInvalidSpec(t *testing.T) {
	t.Parallel()
	_, err := Build(Spec{Name: "x", VCPU: 0, MemoryMiB: 512, Kernel: "/k", Initrd: "/i"})
	if !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Build error = %v, want one wrapping ErrInvalidSpec", err)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Path.String() != "vcpu" {
		t.Fatalf("Build error = %v, want a *ValidationError for vcpu", err)
	}
	if _, err := Marshal(Spec{}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Marshal(Spec{}) error = %v, want ErrInvalidSpec", err)
	}
}

// TestBuildDetails checks the properties each feature promises, independently
// of the golden files (which a careless -update could bless).
func TestBuildDetails(t *testing.T) {
	t.Parallel()
	build := func(t *testing.T, f func(s *Spec)) *libvirtxml.Domain {
		t.Helper()
		s := Spec{Name: "vm1", Type: TypeQEMU, VCPU: 2, MemoryMiB: 1024, Disk: rootVolume("vm1")}
		f(&s)
		dom, err := Build(s)
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		return dom
	}
	tests := []struct {
		name  string
		spec  func(s *Spec)
		check func(t *testing.T, d *libvirtxml.Domain)
	}{
		{"defaults", func(s *Spec) { s.Type = "" }, func(t *testing.T, d *libvirtxml.Domain) {
			if d.Type != "kvm" || d.CPU.Mode != "host-passthrough" || d.OS.Type.Machine != "q35" {
				t.Errorf("type=%q cpu=%q machine=%q, want kvm host-passthrough q35", d.Type, d.CPU.Mode, d.OS.Type.Machine)
			}
			if d.OnPoweroff != "destroy" || d.OnCrash != "destroy" {
				t.Errorf("on_poweroff=%q on_crash=%q, want destroy", d.OnPoweroff, d.OnCrash)
			}
			if len(d.Devices.Graphics) != 0 || d.Devices.MemBalloon.Model != "virtio" || d.Devices.RNGs[0].Model != "virtio" {
				t.Errorf("want no graphics, a virtio balloon and a virtio rng")
			}
			if d.MemoryBacking != nil {
				t.Errorf("memoryBacking set without virtiofs")
			}
		}},
		{"qemu uses maximum", func(s *Spec) {}, func(t *testing.T, d *libvirtxml.Domain) {
			if d.CPU.Mode != "maximum" {
				t.Errorf("cpu mode %q, want maximum", d.CPU.Mode)
			}
		}},
		{"memory in MiB", func(s *Spec) { s.MemoryMiB = 3000 }, func(t *testing.T, d *libvirtxml.Domain) {
			if d.Memory.Value != 3000 || d.Memory.Unit != "MiB" {
				t.Errorf("memory %d %s", d.Memory.Value, d.Memory.Unit)
			}
		}},
		{"virtiofs adds shared memfd memory", func(s *Spec) {
			s.SharedFolders = []SharedFolder{{Driver: ShareVirtiofs, Source: "/srv/a", Tag: "a"}}
		}, func(t *testing.T, d *libvirtxml.Domain) {
			mb := d.MemoryBacking
			if mb == nil || mb.MemorySource == nil || mb.MemorySource.Type != "memfd" || mb.MemoryAccess == nil || mb.MemoryAccess.Mode != "shared" {
				t.Errorf("memoryBacking = %+v, want memfd source and shared access", mb)
			}
		}},
		{"uefi autoselects firmware without secure boot", func(s *Spec) { s.Firmware = FirmwareUEFI }, func(t *testing.T, d *libvirtxml.Domain) {
			if d.OS.Firmware != "efi" || d.OS.Loader != nil {
				t.Errorf("os firmware=%q loader=%+v, want efi and no loader (libvirt 9.0 refuses loader attributes with autoselection)", d.OS.Firmware, d.OS.Loader)
			}
			if fi := d.OS.FirmwareInfo; fi == nil || len(fi.Features) != 1 || fi.Features[0] != (libvirtxml.DomainOSFirmwareFeature{Enabled: "no", Name: "secure-boot"}) {
				t.Errorf("firmware features = %+v, want secure-boot disabled", d.OS.FirmwareInfo)
			}
		}},
		{"kernel boot has no disk boot order", func(s *Spec) { s.Kernel, s.Initrd = "/k", "/i" }, func(t *testing.T, d *libvirtxml.Domain) {
			if d.OS.Kernel != "/k" || d.OS.Initrd != "/i" || d.Devices.Disks[0].Boot != nil {
				t.Errorf("kernel=%q initrd=%q boot=%+v", d.OS.Kernel, d.OS.Initrd, d.Devices.Disks[0].Boot)
			}
		}},
		{"disk boots first otherwise", func(s *Spec) {}, func(t *testing.T, d *libvirtxml.Domain) {
			disk := d.Devices.Disks[0]
			if disk.Boot == nil || disk.Boot.Order != 1 || disk.Target.Dev != "vda" || disk.Target.Bus != "virtio" || disk.Driver.Type != "qcow2" {
				t.Errorf("disk = %+v target %+v driver %+v", disk, disk.Target, disk.Driver)
			}
		}},
		{"seed on q35 is a read-only raw SATA CD-ROM", func(s *Spec) { s.Seed = seedVolume("vm1") }, func(t *testing.T, d *libvirtxml.Domain) {
			cd := d.Devices.Disks[1]
			if cd.Device != "cdrom" || cd.Target.Bus != "sata" || cd.ReadOnly == nil || cd.Driver.Type != "raw" {
				t.Errorf("seed = %+v target %+v", cd, cd.Target)
			}
		}},
		{"seed on pc is IDE", func(s *Spec) { s.Machine = MachinePC; s.Seed = seedVolume("vm1") }, func(t *testing.T, d *libvirtxml.Domain) {
			if bus := d.Devices.Disks[1].Target.Bus; bus != "ide" {
				t.Errorf("seed bus %q, want ide", bus)
			}
			for _, c := range d.Devices.Controllers {
				if c.Type == "pci" {
					t.Errorf("pc machine got a %s controller", c.Model)
				}
			}
		}},
		{"seed on scsi adds virtio-scsi", func(s *Spec) { s.Seed = &Seed{Source: Source{Path: "/s.iso"}, Bus: SeedBusSCSI} }, func(t *testing.T, d *libvirtxml.Domain) {
			found := false
			for _, c := range d.Devices.Controllers {
				found = found || (c.Type == "scsi" && c.Model == "virtio-scsi")
			}
			if !found {
				t.Errorf("no virtio-scsi controller")
			}
		}},
		{"hostdevs sorted, vfio, unmanaged", func(s *Spec) { s.Hostdevs = []string{"0000:0a:00.1", "0000:0A:00.0", "0000:09:1f.7"} }, func(t *testing.T, d *libvirtxml.Domain) {
			var got []string
			for _, h := range d.Devices.Hostdevs {
				a := h.SubsysPCI.Source.Address
				got = append(got, PCIAddress{uint16(*a.Domain), uint8(*a.Bus), uint8(*a.Slot), uint8(*a.Function)}.String())
				if h.Managed != "no" || h.SubsysPCI.Driver.Name != "vfio" {
					t.Errorf("hostdev managed=%q driver=%+v", h.Managed, h.SubsysPCI.Driver)
				}
			}
			if want := "0000:09:1f.7 0000:0a:00.0 0000:0a:00.1"; strings.Join(got, " ") != want {
				t.Errorf("hostdevs %v, want %s", got, want)
			}
		}},
		{"channels are unix virtio-serial", func(s *Spec) {}, func(t *testing.T, d *libvirtxml.Domain) {
			if len(d.Devices.Channels) != 2 {
				t.Fatalf("%d channels, want 2", len(d.Devices.Channels))
			}
			for i, want := range []string{GuestAgentChannel, phonehome.ReportChannel} {
				ch := d.Devices.Channels[i]
				if ch.Source.UNIX == nil || ch.Source.UNIX.Path != "" || ch.Target.VirtIO.Name != want {
					t.Errorf("channel %d = source %+v target %+v", i, ch.Source, ch.Target.VirtIO)
				}
			}
		}},
		{"serial logs to a file", func(s *Spec) {}, func(t *testing.T, d *libvirtxml.Domain) {
			ser, con := d.Devices.Serials[0], d.Devices.Consoles[0]
			want := "/var/log/libvirt/qemu/vm1-serial.log"
			if ser.Source.File == nil || ser.Source.File.Path != want || con.Source.File.Path != want || ser.Source.File.Append != "on" {
				t.Errorf("serial source %+v console %+v, want file %s appended", ser.Source.File, con.Source.File, want)
			}
		}},
		{"root ports cover devices plus spares", func(s *Spec) { s.HotplugPorts = 3; s.NICs = []NIC{{Type: NICUser}} }, func(t *testing.T, d *libvirtxml.Domain) {
			ports := 0
			for _, c := range d.Devices.Controllers {
				if c.Model == "pcie-root-port" {
					ports++
				}
			}
			// disk, nic, virtio-serial, balloon, rng + 3 spares
			if ports != 8 {
				t.Errorf("%d root ports, want 8", ports)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, build(t, tc.spec))
		})
	}
}
