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
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
	"libvirt.org/go/libvirtxml"
)

// VolumeExistsError refuses to overwrite a volume Kohaku did not create.
type VolumeExistsError struct{ Pool, Name, Path string }

func (e *VolumeExistsError) Error() string {
	return fmt.Sprintf("pool %q already has a volume named %q (%s), which this resource did not create; Kohaku "+
		"never overwrites it. Choose another name, delete the volume if it is stale, or import it with "+
		"terraform import", e.Pool, e.Name, e.Path)
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

func volumeInfo(l *libvirt.Libvirt, pool string, v libvirt.StorageVol) (*Volume, error) {
	path, err := l.StorageVolGetPath(v)
	if err != nil {
		return nil, err
	}
	_, capacity, alloc, err := l.StorageVolGetInfo(v)
	if err != nil {
		return nil, err
	}
	return &Volume{Pool: pool, Name: v.Name, Key: v.Key, Path: path, CapacityBytes: int64(capacity), AllocationBytes: int64(alloc)}, nil
}

// UploadVolume creates a raw volume holding data, through libvirt's stream
// API so it works on remote hosts. An existing volume of that name is never
// touched; a failure after the volume was created deletes it again. When
// the connection is lost after the name was found free, whether the volume
// was made is unknown: it is deleted once libvirt answers again
// (WhileUnreachable), so a libvirtd restart leaves no partial volume.
func (c *Client) UploadVolume(ctx context.Context, pool, name string, data []byte) (*Volume, error) {
	var out *Volume
	var nameFree atomic.Bool
	var used atomic.Pointer[libvirt.Libvirt]
	err := c.Call(ctx, fmt.Sprintf("upload volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		used.Store(l)
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		if v, err := l.StorageVolLookupByName(p, name); err == nil {
			path, _ := l.StorageVolGetPath(v)
			return &VolumeExistsError{Pool: pool, Name: name, Path: path}
		} else if !notFound(err) {
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
		err := c.DeleteVolume(ctx, pool, name)
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
func (c *Client) ReadVolume(ctx context.Context, pool, name string, limit int64) (*Volume, []byte, error) {
	return c.ReadVolumeAt(ctx, pool, name, 0, limit)
}

// ReadVolumeAt is ReadVolume from byte offset on: the volume's info and its
// bytes from offset to its end (none when offset is past it). Only those
// bytes cross the connection.
func (c *Client) ReadVolumeAt(ctx context.Context, pool, name string, offset, limit int64) (*Volume, []byte, error) {
	var buf bytes.Buffer
	var vol *Volume
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

// DeleteVolume deletes a volume; one that is already gone is not an error.
func (c *Client) DeleteVolume(ctx context.Context, pool, name string) error {
	return c.Call(ctx, fmt.Sprintf("delete volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := l.StorageVolLookupByName(p, name)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.StorageVolDelete(v, 0); err != nil && !notFound(err) {
			return err
		}
		return nil
	})
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
