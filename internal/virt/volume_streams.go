package virt

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// ownConn runs fn on a libvirt connection of its own, bounded by ctx only
// (not by the client's call timeout: a flatten or a stream of many GiB runs
// for minutes), and ends the connection afterwards. When ctx ends first the
// connection is cut, which ends whatever libvirt call fn was in.
func (c *Client) ownConn(ctx context.Context, op string, fn func(*libvirt.Libvirt) error) error {
	td := &trackingDialer{inner: c.dialer.inner}
	defer func() { c.dialer.rpcs.Add(td.rpcs.Load()) }()
	lv := libvirt.NewWithDialer(td)
	c.dials.Add(1)
	done := make(chan error, 1)
	go func() {
		if err := lv.ConnectToURI(libvirt.ConnectURI(c.ep.Name)); err != nil {
			done <- &ConnectionError{Endpoint: c.ep, Op: op, Err: err}
			return
		}
		done <- fn(lv)
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("%s: %w", op, ctx.Err())
	}
	c.endConn(lv, td)
	if ctx.Err() != nil {
		select {
		case <-done: //nolint:errcheck // waits for fn to end; err already says why it failed
		case <-time.After(channelEndTimeout):
		}
	}
	if err != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return err
}

// FlattenVolume makes pool/name a standalone qcow2 copy of the volume
// srcPool/srcName with its backing chain merged in: libvirt's
// StorageVolCreateXMLFrom with a target that names no backing store runs
// `qemu-img convert` on the host, which reads through the chain. The source
// is only read; it should not be in use by a running guest. An existing
// volume of that name is never touched, and a flatten that fails or is
// interrupted deletes what it made.
func (c *Client) FlattenVolume(ctx context.Context, srcPool, srcName, pool, name string) (*VolumeDetail, error) {
	op := fmt.Sprintf("flatten volume %s/%s into %s/%s", srcPool, srcName, pool, name)
	var out *VolumeDetail
	var made atomic.Bool
	err := c.ownConn(ctx, op, func(l *libvirt.Libvirt) error {
		sp, err := poolByName(l, srcPool)
		if err != nil {
			return err
		}
		sv, err := lookupVolume(l, sp, srcName)
		if err != nil {
			return err
		}
		src, err := volumeDetail(l, srcPool, sv)
		if err != nil {
			return err
		}
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		if err := volumeNameFree(l, p, pool, name); err != nil {
			return err
		}
		doc, err := flattenXML(name, src.CapacityBytes)
		if err != nil {
			return err
		}
		made.Store(true)
		v, err := l.StorageVolCreateXMLFrom(p, doc, sv, 0)
		if err != nil {
			return fmt.Errorf("copying through libvirt (qemu-img convert): %w", err)
		}
		_ = l.StoragePoolRefresh(p, 0)
		out, err = volumeDetail(l, pool, v)
		if err != nil {
			return err
		}
		if out.BackingPath != "" {
			return fmt.Errorf("the copy still has a backing file (%s); libvirt did not flatten it", out.BackingPath)
		}
		return nil
	})
	if err == nil {
		return out, nil
	}
	if !made.Load() {
		return nil, err
	}
	return nil, c.dropPartial(ctx, pool, name, err)
}

// flattenXML is the target of a flatten: a qcow2 volume of the source's
// virtual size with no backing store, so qemu-img convert writes every
// cluster the chain holds into it.
func flattenXML(name string, capacity int64) (string, error) {
	return (&libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(capacity), Unit: "bytes"},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
	}).Marshal()
}

// dropPartial deletes a volume an operation made before failing with err,
// once libvirt answers, and says so in the error it returns.
func (c *Client) dropPartial(ctx context.Context, pool, name string, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostconn.Unreachable+c.settings.CallTimeout)
	defer cancel()
	if derr := hostconn.WhileUnreachable(cctx, hostconn.Unreachable, func() error { return c.deleteUnused(cctx, pool, name) }); derr != nil {
		return fmt.Errorf("%w (deleting the partial volume failed: %v; delete %s/%s by hand)", err, derr, pool, name)
	}
	return fmt.Errorf("%w (the partial volume was deleted)", err)
}

// HashVolume reads a volume back through libvirt's stream API and returns
// the SHA-256 of its bytes; memory stays at one stream packet whatever the
// volume's size.
func (c *Client) HashVolume(ctx context.Context, pool, name string) (ImageDigest, error) {
	h := sha256.New()
	cw := &countingWriter{w: h}
	if err := c.StreamVolumeOut(ctx, pool, name, cw); err != nil {
		return ImageDigest{}, fmt.Errorf("reading it back for its digest: %w", err)
	}
	return hostapi.DigestOf(h, cw.n.Load()), nil
}

type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// StreamVolumeOut writes a volume's bytes, as libvirt streams them, to w,
// on a connection of its own bounded by ctx only; memory stays at one
// stream packet whatever the volume's size.
func (c *Client) StreamVolumeOut(ctx context.Context, pool, name string, w io.Writer) error {
	return c.ownConn(ctx, fmt.Sprintf("download volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		v, err := lookupVolume(l, p, name)
		if err != nil {
			return err
		}
		return l.StorageVolDownload(v, w, 0, 0, 0)
	})
}

// StreamVolumeIn creates pool/name as a volume of format and capacity
// (virtual size) and uploads what r gives until EOF into it, on a
// connection of its own bounded by ctx only. An existing volume of that
// name is never touched (a *VolumeExistsError); a failed or interrupted
// upload deletes the volume it made.
func (c *Client) StreamVolumeIn(ctx context.Context, pool, name, format string, capacity int64, r io.Reader) (*VolumeDetail, error) {
	var made atomic.Bool
	var out *VolumeDetail
	var n countingReader
	n.r = r
	err := c.ownConn(ctx, fmt.Sprintf("upload volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		if err := volumeNameFree(l, p, pool, name); err != nil {
			return err
		}
		doc, err := (&libvirtxml.StorageVolume{
			Name:       name,
			Capacity:   &libvirtxml.StorageVolumeSize{Value: uint64(capacity), Unit: "bytes"},
			Allocation: &libvirtxml.StorageVolumeSize{Value: 0, Unit: "bytes"},
			Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
		}).Marshal()
		if err != nil {
			return err
		}
		v, err := l.StorageVolCreateXML(p, doc, 0)
		if err != nil {
			return fmt.Errorf("creating the volume: %w", err)
		}
		made.Store(true)
		if err := l.StorageVolUpload(v, &n, 0, 0, 0); err != nil {
			return fmt.Errorf("uploading (%d bytes sent): %w", n.n.Load(), err)
		}
		_ = l.StoragePoolRefresh(p, 0)
		if v, err = l.StorageVolLookupByName(p, name); err != nil {
			return err
		}
		out, err = volumeDetail(l, pool, v)
		return err
	})
	if err == nil {
		return out, nil
	}
	if !made.Load() {
		return nil, err
	}
	return nil, c.dropPartial(ctx, pool, name, err)
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

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
