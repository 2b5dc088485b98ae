package virt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// VolumeExistsError refuses to overwrite a volume Kohaku did not create.
type VolumeExistsError struct{ Pool, Name, Path string }

func (e *VolumeExistsError) Error() string {
	at := ""
	if e.Path != "" { // the host may not have said where
		at = " (" + e.Path + ")"
	}
	return fmt.Sprintf("pool %q already has a volume named %q%s, which this resource did not create; Kohaku "+
		"never overwrites it. Choose another name, delete the volume if it is stale, or import it with "+
		"terraform import", e.Pool, e.Name, at)
}

// poolByName looks a pool up, and when it is missing says which pools exist.
func poolByName(l *libvirt.Libvirt, name string) (libvirt.StoragePool, error) {
	p, err := l.StoragePoolLookupByName(name)
	if err == nil {
		return p, nil
	}
	if !notFound(err) {
		return p, err
	}
	var names []string
	if all, _, lerr := l.ConnectListAllStoragePools(1, 0); lerr == nil {
		for _, q := range all {
			names = append(names, q.Name)
		}
	}
	sort.Strings(names)
	have := "it has none"
	if len(names) > 0 {
		have = "its pools are " + strings.Join(names, ", ")
	}
	return p, fmt.Errorf("%w: the host has no pool %q (%s). Create it (virsh pool-define-as %s dir --target "+
		"/var/lib/libvirt/images/%s; virsh pool-build/pool-start/pool-autostart) or use one of these", ErrPoolNotFound, name, have, name, name)
}

// volumeInfo is a volume's key, path and capacity, what a seed's volume
// needs, in two calls; Format and BackingPath are left empty (volumeDetail
// reads them from the volume's XML).
func volumeInfo(l *libvirt.Libvirt, pool string, v libvirt.StorageVol) (*VolumeDetail, error) {
	path, err := l.StorageVolGetPath(v)
	if err != nil {
		return nil, err
	}
	_, capacity, _, err := l.StorageVolGetInfo(v)
	if err != nil {
		return nil, err
	}
	return &VolumeDetail{Pool: pool, Name: v.Name, Key: v.Key, Path: path, CapacityBytes: int64(capacity)}, nil
}

// UploadVolume creates a raw volume holding data, through libvirt's stream
// API so it works on remote hosts. An existing volume of that name is never
// touched; a failure after the volume was created deletes it again. When
// the connection is lost after the name was found free, whether the volume
// was made is unknown: it is deleted once libvirt answers again
// (WhileUnreachable), so a libvirtd restart leaves no partial volume.
func (c *Client) UploadVolume(ctx context.Context, pool, name string, data []byte) (*VolumeDetail, error) {
	var out *VolumeDetail
	var nameFree atomic.Bool
	var used atomic.Pointer[libvirt.Libvirt]
	err := c.Call(ctx, fmt.Sprintf("upload volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		used.Store(l)
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		if err := volumeNameFree(l, p, pool, name); err != nil {
			return err
		}
		nameFree.Store(true)
		doc, err := (&libvirtxml.StorageVolume{
			Name:     name,
			Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(len(data)), Unit: "bytes"},
			Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
		}).Marshal()
		if err != nil {
			return err
		}
		v, err := l.StorageVolCreateXML(p, doc, 0)
		if err != nil {
			return fmt.Errorf("creating the volume: %w", err)
		}
		if err := l.StorageVolUpload(v, bytes.NewReader(data), 0, uint64(len(data)), 0); err != nil {
			if derr := l.StorageVolDelete(v, 0); derr != nil {
				return fmt.Errorf("uploading %d bytes: %w (and deleting the partial volume failed: %v; delete %s/%s by hand)", len(data), err, derr, pool, name)
			}
			return fmt.Errorf("uploading %d bytes: %w (the partial volume was deleted)", len(data), err)
		}
		out, err = volumeInfo(l, pool, v)
		return err
	})
	var lost *ConnectionError
	interrupted := err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err())
	if err != nil && nameFree.Load() && (interrupted || errors.As(err, &lost)) {
		if l := used.Load(); interrupted && l != nil {
			// The call goes on without us (Call returns at once on
			// ctx): end its connection, so that an upload in flight is
			// aborted on libvirtd's side and cannot finish after the
			// delete, and libvirtd lets go of the volume.
			c.abandon(l)
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostconn.Unreachable+c.settings.CallTimeout)
		defer cancel()
		if derr := hostconn.WhileUnreachable(cctx, hostconn.Unreachable, func() error { return c.deleteUnused(cctx, pool, name) }); derr != nil {
			return nil, fmt.Errorf("%w (the volume may have been made before the upload was cut off, and deleting it failed: %v; delete %s/%s by hand if it is there)", err, derr, pool, name)
		}
		if interrupted {
			return nil, fmt.Errorf("%w (the upload was interrupted; whatever of the volume was made was deleted)", err)
		}
		return nil, fmt.Errorf("%w (whatever of the volume was made was deleted once libvirt answered again)", err)
	}
	return out, err
}

// deleteUnused deletes a volume, waiting (up to volumeInUseWait) while
// libvirtd still holds it for a stream it is tearing down ("volume ... is
// still in use").
func (c *Client) deleteUnused(ctx context.Context, pool, name string) error {
	deadline := time.Now().Add(volumeInUseWait)
	for {
		err := c.RemoveVolume(ctx, pool, name)
		if err == nil || !strings.Contains(err.Error(), "in use") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// volumeInUseWait bounds the wait for libvirtd to let go of a volume.
const volumeInUseWait = 15 * time.Second

// DownloadVolume reads a whole volume through libvirt's stream API. Volumes
// larger than limit bytes are refused rather than read.
func (c *Client) DownloadVolume(ctx context.Context, pool, name string, limit int64) ([]byte, error) {
	_, data, err := c.ReadVolume(ctx, pool, name, limit)
	return data, err
}

// ReadVolume returns a volume's description and its whole content, in one
// call on the connection. Volumes larger than limit bytes are refused.
func (c *Client) ReadVolume(ctx context.Context, pool, name string, limit int64) (*VolumeDetail, []byte, error) {
	return c.ReadVolumeAt(ctx, pool, name, 0, limit)
}

// ReadVolumeAt is ReadVolume from byte offset on: the volume's info and its
// bytes from offset to its end (none when offset is past it). Only those
// bytes cross the connection.
func (c *Client) ReadVolumeAt(ctx context.Context, pool, name string, offset, limit int64) (*VolumeDetail, []byte, error) {
	var buf bytes.Buffer
	var vol *VolumeDetail
	err := c.Call(ctx, fmt.Sprintf("download volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		v, err := lookupVolume(l, p, name)
		if err != nil {
			return err
		}
		if vol, err = volumeInfo(l, pool, v); err != nil {
			return err
		}
		if vol.CapacityBytes > limit {
			return fmt.Errorf("volume %s/%s holds %d bytes, more than the %d expected", pool, name, vol.CapacityBytes, limit)
		}
		if offset >= vol.CapacityBytes {
			return nil
		}
		buf.Grow(int(vol.CapacityBytes - offset))
		return l.StorageVolDownload(v, &buf, uint64(offset), uint64(vol.CapacityBytes-offset), 0)
	})
	if err != nil {
		return nil, nil, err
	}
	return vol, buf.Bytes(), nil
}

// notFound reports whether libvirt said the object does not exist: a domain,
// network, pool, volume or node device (go-libvirt's IsNotFound knows only
// domains).
func notFound(err error) bool {
	for _, code := range []libvirt.ErrorNumber{libvirt.ErrNoDomain, libvirt.ErrNoNetwork, libvirt.ErrNoStoragePool, libvirt.ErrNoStorageVol, libvirt.ErrNoNodeDevice} {
		if libvirtCode(err, code) {
			return true
		}
	}
	return false
}

// unitBytes is the multiplier of a libvirt size unit ("KiB", "G", "bytes"...).
func unitBytes(unit string) uint64 {
	switch strings.ToLower(unit) {
	case "k", "kib":
		return 1 << 10
	case "kb":
		return 1e3
	case "m", "mib":
		return 1 << 20
	case "mb":
		return 1e6
	case "g", "gib":
		return 1 << 30
	case "gb":
		return 1e9
	case "t", "tib":
		return 1 << 40
	case "tb":
		return 1e12
	}
	return 1 // "", "b", "bytes"
}

// lookupVolume finds a volume in a pool, saying which volumes the pool has
// when it is missing.
func lookupVolume(l *libvirt.Libvirt, pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	v, err := l.StorageVolLookupByName(pool, name)
	if err == nil || !libvirtCode(err, libvirt.ErrNoStorageVol) {
		return v, err
	}
	have := "it is empty"
	if vols, _, lerr := l.StoragePoolListAllVolumes(pool, 1, 0); lerr == nil && len(vols) > 0 {
		names := make([]string, 0, len(vols))
		for _, x := range vols {
			names = append(names, x.Name)
		}
		sort.Strings(names)
		if len(names) > 20 {
			names = append(names[:20], "...")
		}
		have = "it has " + strings.Join(names, ", ")
	}
	return v, fmt.Errorf("pool %q has no volume %q (%s): %w", pool.Name, name, have, ErrVolumeNotFound)
}

func volumeDetail(l *libvirt.Libvirt, pool string, v libvirt.StorageVol) (*VolumeDetail, error) {
	doc, err := l.StorageVolGetXMLDesc(v, 0)
	if err != nil {
		return nil, err
	}
	var x libvirtxml.StorageVolume
	if err := x.Unmarshal(doc); err != nil {
		return nil, fmt.Errorf("parse the XML of volume %s/%s: %w", pool, v.Name, err)
	}
	d := &VolumeDetail{Pool: pool, Name: v.Name, Key: v.Key}
	if x.Target != nil {
		d.Path = x.Target.Path
		if x.Target.Format != nil {
			d.Format = x.Target.Format.Type
		}
	}
	if x.Capacity != nil {
		d.CapacityBytes = int64(sizeInBytes(x.Capacity))
	}
	if x.BackingStore != nil {
		d.BackingPath = x.BackingStore.Path
	}
	return d, nil
}

func sizeInBytes(s *libvirtxml.StorageVolumeSize) uint64 { return s.Value * unitBytes(s.Unit) }

// VolumeInfo describes a volume: path, format, capacity and backing file.
func (c *Client) VolumeInfo(ctx context.Context, pool, name string) (*VolumeDetail, error) {
	var out *VolumeDetail
	err := c.Call(ctx, fmt.Sprintf("look up volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		v, err := lookupVolume(l, p, name)
		if err != nil {
			return err
		}
		out, err = volumeDetail(l, pool, v)
		return err
	})
	return out, err
}

// VolumeByPath finds the pool and name of the volume at a host path.
func (c *Client) VolumeByPath(ctx context.Context, path string) (pool, name string, err error) {
	err = c.Call(ctx, "look up volume at "+path, func(l *libvirt.Libvirt) error {
		v, err := l.StorageVolLookupByPath(path)
		if libvirtCode(err, libvirt.ErrNoStorageVol) {
			return fmt.Errorf("no storage pool holds %s: %w", path, ErrVolumeNotFound)
		}
		if err != nil {
			return err
		}
		p, err := l.StoragePoolLookupByVolume(v)
		if err != nil {
			return err
		}
		pool, name = p.Name, v.Name
		return nil
	})
	return pool, name, err
}

// CreateOverlay creates a qcow2 volume name in pool backed by the volume
// basePool/baseName, so the base stays untouched. capacity is the virtual size
// in bytes; 0 means the base's size, and a smaller one is refused (qcow2
// overlays cannot shrink their backing image).
func (c *Client) CreateOverlay(ctx context.Context, pool, name, basePool, baseName string, capacity int64) (*VolumeDetail, error) {
	var out *VolumeDetail
	err := c.Call(ctx, fmt.Sprintf("create overlay volume %s/%s on %s/%s", pool, name, basePool, baseName), func(l *libvirt.Libvirt) error {
		bp, err := poolByName(l, basePool)
		if err != nil {
			return err
		}
		bv, err := lookupVolume(l, bp, baseName)
		if err != nil {
			return err
		}
		base, err := volumeDetail(l, basePool, bv)
		if err != nil {
			return err
		}
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		if err := volumeAbsent(l, p, pool, name); err != nil {
			return err
		}
		if capacity == 0 {
			capacity = base.CapacityBytes
		}
		if capacity < base.CapacityBytes {
			return fmt.Errorf("the overlay would be %d bytes, smaller than its base %s/%s (%d bytes); a qcow2 "+
				"overlay cannot be smaller than its backing image: leave size_gib unset or make it at least %d", capacity, basePool, baseName, base.CapacityBytes, (base.CapacityBytes+(1<<30)-1)>>30)
		}
		format := base.Format
		if format == "" {
			format = "raw"
		}
		out, err = createVolumeXML(l, p, pool, &libvirtxml.StorageVolume{
			Name:     name,
			Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(capacity), Unit: "bytes"},
			Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
			BackingStore: &libvirtxml.StorageVolumeBackingStore{
				Path:   base.Path,
				Format: &libvirtxml.StorageVolumeTargetFormat{Type: format},
			},
		})
		return err
	})
	return out, err
}

// volumeNameFree is nil when pool p has no volume name; one that exists is a
// *VolumeExistsError naming its path (Kohaku never overwrites a volume).
func volumeNameFree(l *libvirt.Libvirt, p libvirt.StoragePool, pool, name string) error {
	v, err := l.StorageVolLookupByName(p, name)
	switch {
	case err == nil:
		path, _ := l.StorageVolGetPath(v)
		return &VolumeExistsError{Pool: pool, Name: name, Path: path}
	case notFound(err):
		return nil
	}
	return err
}

// volumeAbsent is nil when pool p has no volume name; one that exists is an
// *OverlayExistsError (Kohaku never takes over a volume it did not make).
func volumeAbsent(l *libvirt.Libvirt, p libvirt.StoragePool, pool, name string) error {
	if _, err := l.StorageVolLookupByName(p, name); err == nil {
		return &OverlayExistsError{Pool: pool, Name: name}
	} else if !libvirtCode(err, libvirt.ErrNoStorageVol) {
		return err
	}
	return nil
}

// createVolumeXML creates vol in pool p and returns what libvirt made.
func createVolumeXML(l *libvirt.Libvirt, p libvirt.StoragePool, pool string, vol *libvirtxml.StorageVolume) (*VolumeDetail, error) {
	doc, err := vol.Marshal()
	if err != nil {
		return nil, err
	}
	v, err := l.StorageVolCreateXML(p, doc, 0)
	if err != nil {
		return nil, err
	}
	return volumeDetail(l, pool, v)
}

// RemoveVolume deletes a volume; one that (or whose pool) is already gone is
// not an error.
func (c *Client) RemoveVolume(ctx context.Context, pool, name string) error {
	return c.Call(ctx, fmt.Sprintf("delete volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if libvirtCode(err, libvirt.ErrNoStoragePool) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := l.StorageVolLookupByName(p, name)
		if libvirtCode(err, libvirt.ErrNoStorageVol) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.StorageVolDelete(v, 0); err != nil && !libvirtCode(err, libvirt.ErrNoStorageVol) {
			return err
		}
		return nil
	})
}

// VolumeExists reports whether pool has a volume name. A missing pool is false.
func (c *Client) VolumeExists(ctx context.Context, pool, name string) (bool, error) {
	var ok bool
	err := c.Call(ctx, fmt.Sprintf("look up volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if libvirtCode(err, libvirt.ErrNoStoragePool) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = l.StorageVolLookupByName(p, name)
		if libvirtCode(err, libvirt.ErrNoStorageVol) {
			return nil
		}
		ok = err == nil
		return err
	})
	return ok, err
}

// ListVolumeNames lists the volume names of a pool, sorted.
func (c *Client) ListVolumeNames(ctx context.Context, pool string) ([]string, error) {
	var names []string
	err := c.Call(ctx, "list volumes of pool "+pool, func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		if err != nil {
			return err
		}
		for _, v := range vols {
			names = append(names, v.Name)
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

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

// CreateVolume creates an empty volume of capacity bytes in format (qcow2
// or raw) in pool. A volume of that name that exists already is an
// *OverlayExistsError, and is left as it is.
func (c *Client) CreateVolume(ctx context.Context, pool, name, format string, capacity int64) (*VolumeDetail, error) {
	var out *VolumeDetail
	err := c.Call(ctx, fmt.Sprintf("create volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		if err := volumeAbsent(l, p, pool, name); err != nil {
			return err
		}
		out, err = createVolumeXML(l, p, pool, &libvirtxml.StorageVolume{
			Name:     name,
			Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(capacity), Unit: "bytes"},
			Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
		})
		return err
	})
	return out, err
}
