package virt

import (
	"context"
	"fmt"
	"io"

	"github.com/digitalocean/go-libvirt"
)

// VolumeLength is the size of a volume's file: what a download gives.
func (c *Client) VolumeLength(ctx context.Context, pool, name string) (int64, error) {
	var n int64
	err := c.Call(ctx, fmt.Sprintf("size volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		v, err := lookupVolume(l, p, name)
		if err != nil {
			return err
		}
		_, _, phys, err := l.StorageVolGetInfoFlags(v, uint32(libvirt.StorageVolGetPhysical))
		n = int64(phys)
		return err
	})
	return n, err
}

// StreamVolume writes a volume's first length bytes to w through libvirt's
// stream API, over a connection of its own (a multi-GiB volume neither
// holds the shared connection nor runs into the per-call timeout). ctx
// ends the download by ending that connection.
func (c *Client) StreamVolume(ctx context.Context, pool, name string, length int64, w io.Writer) error {
	return c.ownConn(ctx, fmt.Sprintf("download volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		v, err := lookupVolume(l, p, name)
		if err != nil {
			return err
		}
		cw := &countingWriter{w: w}
		if err := l.StorageVolDownload(v, cw, 0, uint64(length), 0); err != nil {
			return err
		}
		if cw.n.Load() != length {
			return fmt.Errorf("the download gave %d bytes, %d expected", cw.n.Load(), length)
		}
		return nil
	})
}
