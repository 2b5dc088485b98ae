package vfio

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Options shape a binding plan.
type Options struct {
	// Functions lists the functions to bind explicitly. Empty means the whole
	// IOMMU group; a list must still cover the group, since VFIO only lets a
	// VM use a group whose every endpoint is bound to it.
	Functions []Address
	// AllowOtherClasses permits groups that hold storage (01xx), network
	// (02xx) or bridge (06xx) devices. Bridges are never bound: VFIO accepts
	// them in a group while they keep their own driver.
	AllowOtherClasses bool
}

// Binding is one function a plan moves to vfio-pci.
type Binding struct {
	*Device
	// OriginalDriver is the driver the function had before; empty when it had
	// none, or when it was already on vfio-pci (then the original is unknown).
	OriginalDriver string
	// AlreadyBound is true when the function is on vfio-pci already.
	AlreadyBound bool
}

// Plan says which functions of an IOMMU group to bind to vfio-pci.
type Plan struct {
	Target Address
	Group  int
	// Bind lists the functions to move to vfio-pci, sorted by address.
	Bind []Binding
	// Stay lists group members that keep their driver (PCI bridges).
	Stay []*Device
}

// Addresses returns the addresses of the functions to bind.
func (p *Plan) Addresses() []Address {
	out := make([]Address, 0, len(p.Bind))
	for _, b := range p.Bind {
		out = append(out, b.Address)
	}
	return out
}

// PlanBinding plans the binding of target's IOMMU group: it refuses an
// unknown address, a host without IOMMU, a bridge, an explicit list that
// misses part of the group, and (unless allowed) groups that hold storage,
// network or bridge devices.
func PlanBinding(inv *Inventory, target Address, opts Options) (*Plan, error) {
	dev := inv.Lookup(target)
	if dev == nil {
		return nil, &UnknownDeviceError{Address: target, Displays: displays(inv)}
	}
	if !dev.HasIOMMU() {
		return nil, &NoIOMMUError{Address: target, HostHasGroups: inv.HasIOMMU()}
	}
	if dev.Bridge {
		return nil, fmt.Errorf("%s is a %s: bridges cannot be bound to vfio-pci; give the address of the device behind it", target, dev.ClassName())
	}
	plan := &Plan{Target: target, Group: dev.Group}
	var members, bindable []*Device
	for _, a := range dev.GroupMembers {
		m := inv.Lookup(a)
		if m == nil {
			return nil, fmt.Errorf("IOMMU group %d of %s lists %s, which libvirt does not show as a PCI node "+
				"device; check the host with `ls /sys/kernel/iommu_groups/%d/devices` and retry", dev.Group, target, a, dev.Group)
		}
		members = append(members, m)
		if m.Bridge {
			plan.Stay = append(plan.Stay, m)
		} else {
			bindable = append(bindable, m)
		}
	}
	if len(opts.Functions) > 0 {
		if err := checkExplicit(dev, members, bindable, opts.Functions); err != nil {
			return nil, err
		}
	}
	if !opts.AllowOtherClasses {
		var risky []*Device
		for _, m := range members {
			if riskKind(m.Class) != "" {
				risky = append(risky, m)
			}
		}
		if len(risky) > 0 {
			return nil, &OtherClassError{Target: target, Group: dev.Group, Devices: risky}
		}
	}
	for _, m := range bindable {
		b := Binding{Device: m, OriginalDriver: m.Driver}
		if m.Driver == DriverVFIO {
			b.OriginalDriver, b.AlreadyBound = "", true
		}
		plan.Bind = append(plan.Bind, b)
	}
	return plan, nil
}

func checkExplicit(dev *Device, members, bindable []*Device, listed []Address) error {
	inGroup := map[Address]*Device{}
	for _, m := range members {
		inGroup[m.Address] = m
	}
	have := map[Address]bool{}
	for _, a := range listed {
		m, ok := inGroup[a]
		if !ok {
			return &NotInGroupError{Function: a, Target: dev.Address, Group: dev.Group, Members: members}
		}
		if m.Bridge {
			return fmt.Errorf("functions lists %s, a %s: bridges are never bound to vfio-pci (VFIO accepts them in the group on their own driver); remove it from functions", a, m.ClassName())
		}
		have[a] = true
	}
	var missing []*Device
	for _, m := range bindable {
		if !have[m.Address] {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		return &PartialGroupError{Target: dev.Address, Group: dev.Group, Members: bindable, Missing: missing}
	}
	return nil
}

func displays(inv *Inventory) []*Device {
	var out []*Device
	for _, d := range inv.Devices() {
		if IsDisplay(d.Class) {
			out = append(out, d)
		}
	}
	return out
}

// CheckNotInUse refuses when a running domain uses one of the functions.
// users maps a function to the running domains whose hostdevs name it.
func CheckNotInUse(functions []Address, users map[Address][]string) error {
	var parts []string
	for _, a := range functions {
		if doms := users[a]; len(doms) > 0 {
			d := slices.Clone(doms)
			sort.Strings(d)
			parts = append(parts, fmt.Sprintf("%s by %s", a, strings.Join(d, ", ")))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return &InUseError{Uses: parts}
}

// Describe is "0000:01:00.0 (VGA compatible controller, NVIDIA Corporation GA102, driver nvidia)".
func Describe(d *Device) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s", d.Address, d.ClassName())
	if name := strings.TrimSpace(d.VendorName + " " + d.ProductName); name != "" {
		fmt.Fprintf(&b, ", %s", name)
	}
	if d.Driver != "" {
		fmt.Fprintf(&b, ", driver %s", d.Driver)
	} else {
		b.WriteString(", no driver")
	}
	b.WriteString(")")
	return b.String()
}

func describeAll(ds []*Device) string {
	parts := make([]string, 0, len(ds))
	for _, d := range ds {
		parts = append(parts, Describe(d))
	}
	return strings.Join(parts, "; ")
}

func addressList(ds []*Device) string {
	parts := make([]string, 0, len(ds))
	for _, d := range ds {
		parts = append(parts, d.Address.String())
	}
	return strings.Join(parts, ", ")
}

// UnknownDeviceError means the host has no PCI function at the address.
type UnknownDeviceError struct {
	Address  Address
	Displays []*Device
}

func (e *UnknownDeviceError) Error() string {
	have := "it has no display devices"
	if len(e.Displays) > 0 {
		have = "its display devices are " + describeAll(e.Displays)
	}
	return fmt.Sprintf("the host has no PCI function %s; %s. List the host's devices with the kohaku_pci_devices data source (or lspci -D on the host)", e.Address, have)
}

// NoIOMMUError means libvirt reports no IOMMU group for the device, so VFIO
// cannot use it.
type NoIOMMUError struct {
	Address Address
	// HostHasGroups is true when other devices do have groups (unusual).
	HostHasGroups bool
}

func (e *NoIOMMUError) Error() string {
	if e.HostHasGroups {
		return fmt.Sprintf("%s is in no IOMMU group although other devices of the host are; VFIO cannot use it. Check `ls /sys/bus/pci/devices/%s/iommu_group` on the host", e.Address, e.Address)
	}
	return fmt.Sprintf("the host has no usable IOMMU: libvirt reports no IOMMU group for %s or any other PCI device, and VFIO needs one. "+
		"Enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the firmware, boot the host kernel with intel_iommu=on (Intel) or amd_iommu=on (AMD) and iommu=pt, "+
		"and check that /sys/kernel/iommu_groups is not empty. (A virtual host needs an emulated IOMMU its kernel supports, e.g. QEMU's intel-iommu)", e.Address)
}

// PartialGroupError means an explicit function list leaves part of the group on
// the host, which VFIO would refuse when a VM starts.
type PartialGroupError struct {
	Target  Address
	Group   int
	Members []*Device
	Missing []*Device
}

func (e *PartialGroupError) Error() string {
	return fmt.Sprintf("IOMMU group %d of %s holds %s; functions leaves out %s. "+
		"All functions of an IOMMU group must move to vfio-pci together, or no VM can use any of them (QEMU would report that the group \"is not viable\"). "+
		"Add %s to functions, or leave functions unset to bind the whole group",
		e.Group, e.Target, describeAll(e.Members), addressList(e.Missing), addressList(e.Missing))
}

// NotInGroupError means an explicit function is not in the target's group.
type NotInGroupError struct {
	Function Address
	Target   Address
	Group    int
	Members  []*Device
}

func (e *NotInGroupError) Error() string {
	return fmt.Sprintf("functions lists %s, which is not in IOMMU group %d of %s (the group holds %s); a binding covers one IOMMU group: use another kohaku_gpu_binding for %s",
		e.Function, e.Group, e.Target, addressList(e.Members), e.Function)
}

// OtherClassError means the group holds devices the host likely needs.
type OtherClassError struct {
	Target  Address
	Group   int
	Devices []*Device
}

func (e *OtherClassError) Error() string {
	parts := make([]string, 0, len(e.Devices))
	for _, d := range e.Devices {
		parts = append(parts, fmt.Sprintf("%s [%s]", Describe(d), riskKind(d.Class)))
	}
	return fmt.Sprintf("IOMMU group %d of %s holds %s. Binding the group would take these from the host (its disks, network or PCI topology). "+
		"Set allow_other_classes = true if that is intended (bridges then keep their driver, everything else moves to vfio-pci), or move the card to a slot with an IOMMU group of its own",
		e.Group, e.Target, strings.Join(parts, "; "))
}

// InUseError means running domains use some of the functions.
type InUseError struct{ Uses []string }

func (e *InUseError) Error() string {
	return fmt.Sprintf("in use by running domains: %s. Stop those domains first (a kohaku_vm that names this binding in gpus is stopped before the binding changes)", strings.Join(e.Uses, "; "))
}
