package virt

import (
	"context"
	"fmt"

	"github.com/digitalocean/go-libvirt"
)

// GrowVolume resizes a volume that no running domain uses to capacity bytes.
// It only grows: libvirt refuses a smaller capacity without the shrink flag,
// which Kohaku never passes, so no data is ever cut off.
func (c *Client) GrowVolume(ctx context.Context, pool, name string, capacity int64) error {
	return c.Call(ctx, fmt.Sprintf("resize volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		v, err := lookupVolume(l, p, name)
		if err != nil {
			return err
		}
		return l.StorageVolResize(v, uint64(capacity), 0)
	})
}

// GrowDiskLive resizes the disk with target dev of a running domain to size
// bytes through QEMU (libvirt's block resize): the guest sees a larger block
// device at once, with no restart. The volume behind it grows with it.
func (c *Client) GrowDiskLive(ctx context.Context, ref DomainRef, target string, size int64) error {
	dom, err := ref.handle()
	if err != nil {
		return err
	}
	return c.Call(ctx, fmt.Sprintf("resize disk %s of domain %s", target, ref), func(l *libvirt.Libvirt) error {
		return l.DomainBlockResize(dom, target, uint64(size), libvirt.DomainBlockResizeBytes)
	})
}
