package gpubind

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// ResetHost is what a reset needs from a libvirt host. *virt.Client is one.
type ResetHost interface {
	PCINodeDevices(ctx context.Context) ([]string, error)
	PCIHostdevUsers(ctx context.Context) (map[string][]string, error)
	ResetNodeDevice(ctx context.Context, name string) error
}

var _ ResetHost = (*virt.Client)(nil)

// ErrNotBound is wrapped by Reset's refusal of a group with a function
// that is not on vfio-pci.
var ErrNotBound = errors.New("not bound to vfio-pci")

// ResetInUseError refuses a reset while running domains hold functions of
// the group; Uses is "0000:01:00.0 by web-1" for each.
type ResetInUseError struct{ Uses []string }

func (e *ResetInUseError) Error() string {
	return fmt.Sprintf("a running domain holds the device (%s): a reset would pull it from under the guest. "+
		"Stop the domain first (for example with the kohaku_vm_power action, operation = \"shutdown\"), then reset",
		strings.Join(e.Uses, "; "))
}

// Reset resets the PCI function target and every other function of its
// IOMMU group (bridges aside), each through libvirt's node-device reset,
// which picks a function-level reset or a reset of the slot or bus. It
// refuses, before resetting anything, a function the host does not have, a
// group with a function that is not on vfio-pci (a host driver's device is
// the host's to reset), and a group of which a running domain holds any
// function, with a *ResetInUseError naming the domain. progress hears of
// each function as it is reset. It returns the functions reset.
func Reset(ctx context.Context, h ResetHost, target vfio.Address, progress func(string)) ([]vfio.Address, error) {
	if progress == nil {
		progress = func(string) {}
	}
	docs, err := h.PCINodeDevices(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the host's PCI devices: %w", err)
	}
	inv, err := vfio.ParseInventory(docs)
	if err != nil {
		return nil, err
	}
	fns, err := resetGroup(inv, target)
	if err != nil {
		return nil, err
	}
	addrs := make([]vfio.Address, 0, len(fns))
	for _, d := range fns {
		addrs = append(addrs, d.Address)
	}
	raw, err := h.PCIHostdevUsers(ctx)
	if err != nil {
		return nil, fmt.Errorf("learning which running domains use %s: %w", target, err)
	}
	users := map[vfio.Address][]string{}
	for s, doms := range raw {
		if a, err := vfio.ParseAddress(s); err == nil {
			users[a] = doms
		}
	}
	var inUse *vfio.InUseError
	if err := vfio.CheckNotInUse(addrs, users); errors.As(err, &inUse) {
		return nil, &ResetInUseError{Uses: inUse.Uses}
	}
	var done []vfio.Address
	for _, d := range fns {
		progress(fmt.Sprintf("Resetting %s", vfio.Describe(d)))
		if err := h.ResetNodeDevice(ctx, d.Name); err != nil {
			msg := "nothing was reset"
			if len(done) > 0 {
				msg = "reset before it: " + joinAddresses(done)
			}
			return done, fmt.Errorf("resetting %s: %w (%s)", d.Address, err, msg)
		}
		done = append(done, d.Address)
	}
	progress(fmt.Sprintf("Reset %s", joinAddresses(done)))
	return done, nil
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

func joinAddresses(as []vfio.Address) string {
	parts := make([]string, 0, len(as))
	for _, a := range as {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, ", ")
}
