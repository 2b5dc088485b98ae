package gpubind

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// ResetHost is what a reset needs from a libvirt host. *virt.Client is one.
type ResetHost interface {
	PCINodeDevices(ctx context.Context) ([]string, error)
	PCIHostdevUsers(ctx context.Context) (map[string][]string, error)
	ReadHostFiles(ctx context.Context, paths []string, limit int64) (map[string][]byte, error)
	ResetPCIFunction(ctx context.Context, addr string) error
}

// ErrNotBound is wrapped by Reset's refusal of a group with a function
// that is not on vfio-pci.
var ErrNotBound = errors.New("not bound to vfio-pci")

// ErrNoResetMethod is wrapped by Reset's refusal of a group none of whose
// functions the kernel can reset.
var ErrNoResetMethod = errors.New("no reset method")

// ResetInUseError refuses a reset while running domains hold functions of
// the group; Uses is "0000:01:00.0 by web-1" for each.
type ResetInUseError struct{ Uses []string }

func (e *ResetInUseError) Error() string {
	return fmt.Sprintf("a running domain holds the device (%s): a reset would pull it from under the guest. "+
		"Stop the domain first (for example with the kohaku_vm_power action, operation = \"shutdown\"), then reset",
		strings.Join(e.Uses, "; "))
}

// Reset resets the PCI function target and the other functions of its
// IOMMU group (bridges aside) through the kernel, each with the first
// method its sysfs reset_method lists (function-level, power-management,
// slot or bus reset). A function with no method of its own is left to the
// others' resets: a slot or bus reset of one function of a device resets
// all of them. It refuses, before resetting anything, a function the host
// does not have, a group with a function that is not on vfio-pci (a host
// driver's device is the host's to reset), a group of which a running
// domain holds any function (a *ResetInUseError naming the domain), and a
// group with no reset method at all. progress hears of each function as it
// is reset. It returns the functions reset.
func Reset(ctx context.Context, h ResetHost, target vfio.Address, progress func(string)) ([]vfio.Address, error) {
	_, done, err := reset(ctx, h, target, progress)
	return done, err
}

// reset is Reset that also returns the group's functions it would reset
// (nil when it refused before learning them).
func reset(ctx context.Context, h ResetHost, target vfio.Address, progress func(string)) (group, done []vfio.Address, err error) {
	if progress == nil {
		progress = func(string) {}
	}
	docs, err := h.PCINodeDevices(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the host's PCI devices: %w", err)
	}
	inv, err := vfio.ParseInventory(docs)
	if err != nil {
		return nil, nil, err
	}
	fns, err := resetGroup(inv, target)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range fns {
		group = append(group, d.Address)
	}
	if err := checkResetNotInUse(ctx, h, target, fns); err != nil {
		return group, nil, err
	}
	methods, err := resetMethods(ctx, h, fns)
	if err != nil {
		return group, nil, err
	}
	for _, d := range fns {
		m := methods[d.Address]
		if m == "" {
			progress(fmt.Sprintf("%s has no reset method of its own: it is reset with the rest of its device", vfio.Describe(d)))
			continue
		}
		progress(fmt.Sprintf("Resetting %s by %s reset", vfio.Describe(d), m))
		if err := h.ResetPCIFunction(ctx, d.Address.String()); err != nil {
			msg := "nothing was reset"
			if len(done) > 0 {
				msg = "reset before it: " + vfio.JoinAddresses(done)
			}
			if errors.Is(err, hostapi.ErrResetUnusable) {
				return group, done, fmt.Errorf("the kernel could not reset %s by %s reset (%s): a bus or slot reset needs "+
					"the function alone on its bus or slot, which the functions of a multi-function device (a GPU "+
					"and its audio function) never are; such a device is reset only when a guest opens or "+
					"closes it through vfio: %w", d.Address, m, msg, err)
			}
			return group, done, fmt.Errorf("resetting %s: %w (%s)", d.Address, err, msg)
		}
		done = append(done, d.Address)
	}
	progress(fmt.Sprintf("Reset %s", vfio.JoinAddresses(done)))
	return group, done, nil
}

// resetGroup is the functions a reset of target resets: its IOMMU group's,
// bridges aside (target alone on a host without an IOMMU), each on vfio-pci.
func resetGroup(inv *vfio.Inventory, target vfio.Address) ([]*vfio.Device, error) {
	dev := inv.Lookup(target)
	if dev == nil {
		return nil, fmt.Errorf("the host has no PCI function %s", target)
	}
	if dev.Bridge {
		return nil, fmt.Errorf("%s is a %s: give the address of the device behind it", target, dev.ClassName())
	}
	members := []vfio.Address{target}
	if dev.HasIOMMU() && len(dev.GroupMembers) > 0 {
		members = dev.GroupMembers
	}
	var fns, notBound []*vfio.Device
	for _, a := range members {
		m := inv.Lookup(a)
		if m == nil || m.Bridge {
			continue
		}
		if m.Driver != vfio.DriverVFIO {
			notBound = append(notBound, m)
		}
		fns = append(fns, m)
	}
	if len(notBound) > 0 {
		parts := make([]string, 0, len(notBound))
		for _, m := range notBound {
			parts = append(parts, vfio.Describe(m))
		}
		return nil, fmt.Errorf("%w: %s. A reset is for a device given to guests: bind its group with "+
			"kohaku_gpu_binding first (a function on a host driver is the host's, and resetting it under "+
			"the driver can crash the driver)", ErrNotBound, strings.Join(parts, "; "))
	}
	return fns, nil
}

// checkResetNotInUse refuses when a running domain holds one of fns.
func checkResetNotInUse(ctx context.Context, h ResetHost, target vfio.Address, fns []*vfio.Device) error {
	raw, err := h.PCIHostdevUsers(ctx)
	if err != nil {
		return fmt.Errorf("learning which running domains use %s: %w", target, err)
	}
	users := hostdevUsers(raw)
	addrs := make([]vfio.Address, 0, len(fns))
	for _, d := range fns {
		addrs = append(addrs, d.Address)
	}
	var inUse *vfio.InUseError
	if err := vfio.CheckNotInUse(addrs, users); errors.As(err, &inUse) {
		return &ResetInUseError{Uses: inUse.Uses}
	}
	return nil
}

// resetMethods reads the first reset method the kernel would use for each
// function ("" for none), and refuses a group with none at all.
func resetMethods(ctx context.Context, h ResetHost, fns []*vfio.Device) (map[vfio.Address]string, error) {
	paths := make([]string, 0, len(fns))
	for _, d := range fns {
		paths = append(paths, vfio.ResetMethodPath(d.Address))
	}
	files, err := h.ReadHostFiles(ctx, paths, 256)
	if errors.Is(err, hostapi.ErrHostFilesUnsupported) {
		return nil, fmt.Errorf("resetting a function bound to vfio-pci goes through the host's kernel (its sysfs "+
			"reset file; libvirt's node-device reset skips functions on vfio-pci), which needs a local "+
			"(qemu:///system) or qemu+ssh:// connection to the host; this host's connection (tcp or tls) "+
			"reaches libvirt only: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the reset methods of %s: %w", joinDevices(fns), err)
	}
	methods := map[vfio.Address]string{}
	for _, d := range fns {
		if f := vfio.ParseResetMethod(files[vfio.ResetMethodPath(d.Address)]); len(f) > 0 {
			methods[d.Address] = f[0]
		}
	}
	if len(methods) == 0 {
		return nil, fmt.Errorf("%w: the kernel offers no function-level, power-management, slot or bus reset for "+
			"any of %s", ErrNoResetMethod, joinDevices(fns))
	}
	return methods, nil
}

func joinDevices(ds []*vfio.Device) string {
	as := make([]vfio.Address, 0, len(ds))
	for _, d := range ds {
		as = append(as, d.Address)
	}
	return vfio.JoinAddresses(as)
}
