package domain

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/validation"
)

// ErrInvalidSpec is wrapped by every error Validate returns.
var ErrInvalidSpec = errors.New("invalid VM spec")

// ValidationError is one problem with a Spec.
//
// Path is the attribute path in the kohaku_vm schema's terms: name, uuid, type,
// vcpu, memory_mib, machine, firmware, cpu_mode, disk.path, disk.pool,
// disk.volume, disk.format, kernel, initrd, cmdline, seed.{path,pool,volume,bus},
// network_interface[i].{type,source,model,mac}, shared_folder[i].{driver,source,
// tag,access_mode,read_only}, hostdev[i], mdev[i], serial_log_path, hotplug_ports,
// owned_volume[i].{pool,volume}.
type ValidationError = validation.Error

// invalid is a problem at a written path.
func invalid(path, problem, example string, cause error) *ValidationError {
	return &ValidationError{Path: validation.ParsePath(path), Problem: problem, Example: example, Err: cause, Kind: ErrInvalidSpec}
}

// ValidationErrors is every problem Validate found, in attribute order.
type ValidationErrors []*ValidationError

func (es ValidationErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.As find each *ValidationError.
func (es ValidationErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	macRE  = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)
	tagRE  = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

var nicModels = []string{"virtio", "e1000e", "e1000", "rtl8139"}

type validator struct{ errs ValidationErrors }

func (v *validator) add(path, example, format string, args ...any) {
	v.errs = append(v.errs, invalid(path, fmt.Sprintf(format, args...), example, nil))
}

// Validate reports every problem with s as ValidationErrors (nil when s is
// fine). Each error names the attribute, what is wrong and what would be right.
func Validate(s Spec) error {
	v := &validator{}
	v.identity(s)
	v.hardware(s)
	v.boot(s)
	v.seed(s)
	v.dataDisks(s.DataDisks)
	v.nics(s.NICs)
	v.shares(s.SharedFolders)
	v.hostdevs(s.Hostdevs)
	v.mdevs(s.Mdevs)
	v.misc(s)
	v.numa(s)
	if len(v.errs) == 0 {
		return nil
	}
	return v.errs
}

func (v *validator) identity(s Spec) {
	switch {
	case s.Name == "":
		v.add("name", `"gpu-worker-1"`, "is empty")
	case len(s.Name) > MaxNameLen:
		v.add("name", `"gpu-worker-1"`, "is %d characters, more than %d", len(s.Name), MaxNameLen)
	case !nameRE.MatchString(s.Name):
		v.add("name", `"gpu-worker-1"`, "%q has characters other than letters, digits, '.', '_' and '-', or does not start with a letter or digit", s.Name)
	}
	if s.UUID != "" && !uuidRE.MatchString(s.UUID) {
		v.add("uuid", `"6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"`, "%q is not a UUID in 8-4-4-4-12 hex form", s.UUID)
	}
}

func (v *validator) hardware(s Spec) {
	switch s.Type {
	case "", TypeKVM, TypeQEMU:
	default:
		v.add("type", `"kvm", or "qemu" on hosts without KVM`, "unknown domain type %q", s.Type)
	}
	if s.VCPU < 1 || s.VCPU > MaxVCPU {
		v.add("vcpu", "2", "%d is outside 1..%d", s.VCPU, MaxVCPU)
	}
	if s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > MaxMemoryMiB {
		v.add("memory_mib", "2048", "%d MiB is outside %d..%d MiB", s.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	}
	switch s.Machine {
	case "", MachineQ35, MachinePC:
	default:
		v.add("machine", `"q35" or "pc"`, "unknown machine %q", s.Machine)
	}
	switch s.Firmware {
	case "", FirmwareBIOS, FirmwareUEFI:
	default:
		v.add("firmware", `"bios" or "uefi"`, "unknown firmware %q", s.Firmware)
	}
	switch s.CPUMode {
	case "", CPUHostModel, CPUMaximum, CPUCustom:
	case CPUHostPassthrough:
		if s.Type == TypeQEMU {
			v.add("cpu_mode", `"maximum"`, "host-passthrough needs KVM; QEMU refuses it under TCG (type \"qemu\")")
		}
	default:
		v.add("cpu_mode", `"host-passthrough", "host-model", "maximum" or "custom"`, "unknown CPU mode %q", s.CPUMode)
	}
	if s.PCIMMIO64GiB < 0 || s.PCIMMIO64GiB > MaxPCIMMIO64GiB {
		v.add("pci_mmio64_gib", "256", "%d GiB is outside 0..%d (0 keeps the firmware's default)", s.PCIMMIO64GiB, MaxPCIMMIO64GiB)
	}
	if s.HotplugPorts < 0 || s.HotplugPorts > MaxHotplugPorts {
		v.add("hotplug_ports", "4", "%d is outside 0..%d", s.HotplugPorts, MaxHotplugPorts)
	} else if s.Machine == MachinePC && s.HotplugPorts != 0 {
		v.add("hotplug_ports", "0 (unset)", "only applies to q35; the pc machine hotplugs on its PCI bus")
	}
}

// source checks a Path-or-Pool/Volume source under the attribute prefix p.
func (v *validator) source(p string, src Source, example string) {
	switch {
	case src.IsZero():
		v.add(p+".path", example, "neither a path nor a pool and volume is set")
	case src.Path != "" && (src.Pool != "" || src.Volume != ""):
		v.add(p+".path", example, "set either path or pool and volume, not both")
	case src.Path != "":
		if !path.IsAbs(src.Path) {
			v.add(p+".path", example, "%q is not an absolute path", src.Path)
		}
	case src.Pool == "":
		v.add(p+".pool", example, "volume %q has no pool", src.Volume)
	case src.Volume == "":
		v.add(p+".volume", example, "pool %q has no volume", src.Pool)
	}
}

func (v *validator) boot(s Spec) {
	if s.Disk != nil {
		v.source("disk", s.Disk.Source, `pool = "default", volume = "vm1-root.qcow2"`)
		switch s.Disk.Format {
		case "", DiskQCOW2, DiskRaw:
		default:
			v.add("disk.format", `"qcow2"`, "unknown format %q", s.Disk.Format)
		}
	}
	for _, f := range []struct{ attr, val string }{{"kernel", s.Kernel}, {"initrd", s.Initrd}} {
		if f.val != "" && !path.IsAbs(f.val) {
			v.add(f.attr, `"/var/lib/kohaku/boot/vmlinuz"`, "%q is not an absolute path", f.val)
		}
	}
	if s.Kernel == "" {
		if s.Initrd != "" {
			v.add("initrd", `kernel = "/var/lib/kohaku/boot/vmlinuz"`, "is set without a kernel")
		}
		if s.Cmdline != "" {
			v.add("cmdline", `kernel = "/var/lib/kohaku/boot/vmlinuz"`, "is set without a kernel")
		}
	} else if s.Disk == nil && s.Initrd == "" {
		v.add("initrd", `"/var/lib/kohaku/boot/initrd.img"`, "a kernel without a disk needs an initrd to hold its userspace")
	}
}

func (v *validator) seed(s Spec) {
	if s.Seed == nil {
		return
	}
	v.source("seed", s.Seed.Source, `pool = "default", volume = "vm1-seed.iso"`)
	switch s.Seed.Bus {
	case "", SeedBusSATA, SeedBusSCSI:
	case SeedBusIDE:
		if s.Machine == "" || s.Machine == MachineQ35 {
			v.add("seed.bus", `"sata"`, "q35 has no IDE bus")
		}
	default:
		v.add("seed.bus", `"sata" on q35, "ide" on pc, or "scsi"`, "unknown bus %q", s.Seed.Bus)
	}
}

func (v *validator) nics(nics []NIC) {
	seenMAC := map[string]int{}
	for i, n := range nics {
		p := fmt.Sprintf("network_interface[%d]", i)
		switch n.Type {
		case NICNetwork, NICBridge:
			if n.Source == "" {
				ex := `"default"`
				if n.Type == NICBridge {
					ex = `"br0"`
				}
				v.add(p+".source", ex, "a %s interface needs the %s name", n.Type, n.Type)
			}
		case NICUser:
			if n.Source != "" {
				v.add(p+".source", `"" (unset)`, "user-mode networking takes no source, got %q", n.Source)
			}
		case "":
			v.add(p+".type", `"network", "bridge" or "user"`, "is empty")
		default:
			v.add(p+".type", `"network", "bridge" or "user"`, "unknown interface type %q", n.Type)
		}
		if n.Model != "" && !contains(nicModels, n.Model) {
			v.add(p+".model", `"virtio"`, "unknown model %q; want one of %s", n.Model, strings.Join(nicModels, ", "))
		}
		if n.MAC == "" {
			continue
		}
		if !macRE.MatchString(n.MAC) {
			v.add(p+".mac", `"52:54:00:12:34:56"`, "%q is not six ':'-separated hex octets", n.MAC)
			continue
		}
		mac := strings.ToLower(n.MAC)
		first, _ := strconv.ParseUint(mac[:2], 16, 8) // two hex digits: macRE matched
		switch {
		case first&1 == 1:
			v.add(p+".mac", `"52:54:00:12:34:56"`, "%s is a multicast address", n.MAC)
		case mac == "00:00:00:00:00:00":
			v.add(p+".mac", `"52:54:00:12:34:56"`, "the all-zero address is not usable")
		}
		if j, dup := seenMAC[mac]; dup {
			v.add(p+".mac", `a different address`, "%s is already used by network_interface[%d]", n.MAC, j)
		} else {
			seenMAC[mac] = i
		}
	}
}

func (v *validator) shares(shares []SharedFolder) {
	seenTag := map[string]int{}
	for i, sf := range shares {
		p := fmt.Sprintf("shared_folder[%d]", i)
		maxTag := Max9pTagLen
		switch sf.Driver {
		case "", Share9p:
		case ShareVirtiofs:
			maxTag = MaxVirtiofsTagLen
		default:
			v.add(p+".driver", `"9p" or "virtiofs"`, "unknown driver %q", sf.Driver)
		}
		if sf.Source == "" {
			v.add(p+".source", `"/srv/kohaku/shared"`, "is empty")
		} else if !path.IsAbs(sf.Source) {
			v.add(p+".source", `"/srv/kohaku/shared"`, "%q is not an absolute path", sf.Source)
		}
		switch {
		case sf.Tag == "":
			v.add(p+".tag", `"kohaku_shared"`, "is empty")
		case len(sf.Tag) > maxTag:
			v.add(p+".tag", `"kohaku_shared"`, "%q is %d bytes, more than the %d a %s tag can hold", sf.Tag, len(sf.Tag), maxTag, driverName(sf.Driver))
		case !tagRE.MatchString(sf.Tag):
			v.add(p+".tag", `"kohaku_shared"`, "%q has characters other than letters, digits, '_', '.' and '-'", sf.Tag)
		}
		if sf.Tag != "" {
			if j, dup := seenTag[sf.Tag]; dup {
				v.add(p+".tag", `"kohaku_local"`, "%q is already the tag of shared_folder[%d]; the guest mounts by tag, so tags must be unique", sf.Tag, j)
			} else {
				seenTag[sf.Tag] = i
			}
		}
		switch sf.AccessMode {
		case "", AccessPassthrough:
		case AccessMapped, AccessSquash:
			if sf.Driver == ShareVirtiofs {
				v.add(p+".access_mode", `"passthrough"`, "virtiofs supports only passthrough, got %q", sf.AccessMode)
			}
		default:
			v.add(p+".access_mode", `"passthrough", "mapped" or "squash"`, "unknown access mode %q", sf.AccessMode)
		}
		if sf.ReadOnly && sf.Driver == ShareVirtiofs {
			v.add(p+".read_only", `false, or driver "9p"`, "libvirt 9.0 cannot make a virtiofs share read-only")
		}
	}
}

func (v *validator) hostdevs(hostdevs []string) {
	seen := map[PCIAddress]int{}
	for i, h := range hostdevs {
		p := fmt.Sprintf("hostdev[%d]", i)
		a, err := ParsePCIAddress(h)
		if err != nil {
			var pe *PCIAddressError
			problem := err.Error()
			if errors.As(err, &pe) {
				problem = fmt.Sprintf("%q: %s", pe.Input, pe.Problem)
			}
			v.errs = append(v.errs, invalid(p, problem, `"0000:01:00.0"`, err))
			continue
		}
		if j, dup := seen[a]; dup {
			v.add(p, "each address once", "%s is already hostdev[%d]", a, j)
		} else {
			seen[a] = i
		}
	}
}

func (v *validator) misc(s Spec) {
	if s.SerialLogPath != "" && !path.IsAbs(s.SerialLogPath) {
		v.add("serial_log_path", `"`+DefaultSerialLogPath("vm1")+`"`, "%q is not an absolute path", s.SerialLogPath)
	}
	for i, vol := range s.Owner.Volumes {
		p := fmt.Sprintf("owned_volume[%d]", i)
		if vol.Pool == "" {
			v.add(p+".pool", `"default"`, "is empty")
		}
		if vol.Volume == "" {
			v.add(p+".volume", `"vm1-root.qcow2"`, "is empty")
		}
	}
}

func driverName(d ShareDriver) string {
	if d == ShareVirtiofs {
		return "virtiofs"
	}
	return "virtio-9p"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var mdevUUIDPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func (v *validator) mdevs(uuids []string) {
	seen := map[string]int{}
	for i, u := range uuids {
		p := fmt.Sprintf("mdev[%d]", i)
		if !mdevUUIDPattern.MatchString(u) {
			v.add(p, `"6b6f6861-6b75-4d64-8000-000000000001"`, "%q is not a UUID", u)
			continue
		}
		k := strings.ToLower(u)
		if j, dup := seen[k]; dup {
			v.add(p, "each UUID once", "%s is already mdev[%d]", u, j)
		} else {
			seen[k] = i
		}
	}
}
