package virt

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// ActivePoolNames returns the names of the host's active storage pools,
// sorted.
func (c *Client) ActivePoolNames(ctx context.Context) ([]string, error) {
	var names []string
	err := c.Call(ctx, "list storage pools", func(l *libvirt.Libvirt) error {
		pools, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive)
		if err != nil {
			return err
		}
		for _, p := range pools {
			names = append(names, p.Name)
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

// VolumeHeads returns every volume of a pool whose name starts with prefix,
// sorted by name, each with the first n bytes of its content: enough to
// tell what a volume holds without downloading it (a ranged download
// through the stream API, so remote hosts work). A volume removed while the
// pool is listed is left out.
func (c *Client) VolumeHeads(ctx context.Context, pool, prefix string, n int64) ([]VolumeHead, error) {
	var out []VolumeHead
	err := c.Call(ctx, "read the volumes of pool "+pool, func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		if err != nil {
			return err
		}
		sort.Slice(vols, func(i, j int) bool { return vols[i].Name < vols[j].Name })
		for _, v := range vols {
			if !strings.HasPrefix(v.Name, prefix) {
				continue
			}
			d, err := volumeDetail(l, pool, v)
			if notFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("reading volume %s/%s: %w", pool, v.Name, err)
			}
			var buf bytes.Buffer
			if size := min(n, d.CapacityBytes); size > 0 {
				if err := l.StorageVolDownload(v, &buf, 0, uint64(size), 0); err != nil {
					if notFound(err) {
						continue
					}
					return fmt.Errorf("reading the start of volume %s/%s: %w", pool, v.Name, err)
				}
			}
			out = append(out, VolumeHead{VolumeDetail: *d, Head: buf.Bytes()})
		}
		return nil
	})
	return out, err
}

// WritableDisks lists the writable disks (not CD-ROMs, not read-only) of
// every domain of the host, running or not.
func (c *Client) WritableDisks(ctx context.Context) ([]DiskUse, error) {
	var out []DiskUse
	err := c.Call(ctx, "list the disks of the domains", func(l *libvirt.Libvirt) error {
		doms, _, err := l.ConnectListAllDomains(1, 0)
		if err != nil {
			return err
		}
		for _, d := range doms {
			doc, err := l.DomainGetXMLDesc(d, libvirt.DomainXMLInactive)
			if notFound(err) {
				continue // undefined while we listed
			}
			if err != nil {
				return fmt.Errorf("reading domain %s: %w", d.Name, err)
			}
			var x libvirtxml.Domain
			if err := x.Unmarshal(doc); err != nil {
				return fmt.Errorf("parsing domain %s: %w", d.Name, err)
			}
			if x.Devices == nil {
				continue
			}
			for _, disk := range x.Devices.Disks {
				if disk.Device == "cdrom" || disk.Device == "floppy" || disk.ReadOnly != nil || disk.Source == nil {
					continue
				}
				switch s := disk.Source; {
				case s.File != nil:
					out = append(out, DiskUse{Domain: d.Name, Path: s.File.File})
				case s.Volume != nil:
					out = append(out, DiskUse{Domain: d.Name, Pool: s.Volume.Pool, Volume: s.Volume.Volume})
				}
			}
		}
		return nil
	})
	return out, err
}
