package virt

import (
	"context"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// GrowDiskLive resizes the disk with target dev of a running domain to size
// bytes through QEMU (libvirt's block resize): the guest sees a larger block
// device at once, with no restart. The volume behind it grows with it.
func (c *Client) GrowDiskLive(ctx context.Context, ref DomainRef, target string, size int64) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	return c.Call(ctx, fmt.Sprintf("resize disk %s of domain %s", target, ref), func(l *libvirt.Libvirt) error {
		return l.DomainBlockResize(dom, target, uint64(size), libvirt.DomainBlockResizeBytes)
	})
}

// AttachDisk hot-plugs the <disk> diskXML into a running domain and adds it
// to its persistent definition (libvirt's live and config flags), so it
// stays attached across restarts.
func (c *Client) AttachDisk(ctx context.Context, ref DomainRef, diskXML string) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	return c.Call(ctx, "attach a disk to domain "+ref.String(), func(l *libvirt.Libvirt) error {
		return l.DomainAttachDeviceFlags(dom, diskXML, uint32(libvirt.DomainDeviceModifyLive|libvirt.DomainDeviceModifyConfig))
	})
}

// DetachDisk unplugs the <disk> diskXML (matched by its target) from a
// running domain, waits up to DetachWait for the guest to release it, and
// only then removes it from the persistent definition. A guest that does
// not release it (the disk still in use, or no hotplug support) leaves the
// disk attached and defined, and is an error: nothing may delete the volume
// QEMU still has open.
func (c *Client) DetachDisk(ctx context.Context, ref DomainRef, diskXML string) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	var disk libvirtxml.DomainDisk
	if err := disk.Unmarshal(diskXML); err != nil {
		return err
	}
	target := ""
	if disk.Target != nil {
		target = disk.Target.Dev
	}
	what := fmt.Sprintf("detach disk %s from domain %s", target, ref)
	if err := c.Call(ctx, what, func(l *libvirt.Libvirt) error {
		return l.DomainDetachDeviceFlags(dom, diskXML, uint32(libvirt.DomainDeviceModifyLive))
	}); err != nil {
		return err
	}
	deadline := time.Now().Add(DetachWait)
	for {
		var live bool
		if err := c.Call(ctx, what, func(l *libvirt.Libvirt) error {
			doc, err := l.DomainGetXMLDesc(dom, 0)
			if err != nil {
				return err
			}
			live, err = hasDiskTarget(doc, target)
			return err
		}); err != nil {
			return err
		}
		if !live {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the guest did not release disk %s within %s (is it mounted or in use, or does the guest lack PCI hotplug?); it stays attached: unmount it in the guest and apply again", target, DetachWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return c.Call(ctx, what, func(l *libvirt.Libvirt) error {
		return l.DomainDetachDeviceFlags(dom, diskXML, uint32(libvirt.DomainDeviceModifyConfig))
	})
}

// DetachWait is how long DetachDisk waits for the guest to release a disk.
var DetachWait = 20 * time.Second

func hasDiskTarget(doc, target string) (bool, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(doc); err != nil {
		return false, err
	}
	if d.Devices == nil {
		return false, nil
	}
	for _, x := range d.Devices.Disks {
		if x.Target != nil && x.Target.Dev == target {
			return true, nil
		}
	}
	return false, nil
}
