package virt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// UploadImage creates a volume and streams an image into it over a libvirt
// connection of its own (so a multi-GiB upload neither holds the shared
// connection nor runs into the per-call timeout): memory stays bounded by
// go-libvirt's 4 MiB stream packets whatever the image size. The upload is
// bounded by progress rather than by time: when libvirtd takes no bytes for
// the client's call timeout, it is cut off. An existing volume of that name
// is never touched. Whatever ends the upload early (an error, ctx, a lost
// connection) deletes the volume it made, so no partial image is left.
func (c *Client) UploadImage(ctx context.Context, up ImageUpload) (*VolumeDetail, error) {
	op := fmt.Sprintf("upload image %s/%s", up.Pool, up.Name)
	td := &trackingDialer{inner: c.dialer.inner}
	defer func() { c.dialer.rpcs.Add(td.rpcs.Load()) }()
	lv := libvirt.NewWithDialer(td)
	c.dials.Add(1)

	var created atomic.Bool
	var out *VolumeDetail
	src := &watchedReader{r: up.Source}
	src.touch()
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			if err := lv.ConnectToURI(libvirt.ConnectURI(c.ep.Name)); err != nil {
				return &ConnectionError{Endpoint: c.ep, Op: op, Err: err}
			}
			p, err := poolByName(lv, up.Pool)
			if err != nil {
				return err
			}
			if err := volumeNameFree(lv, p, up.Pool, up.Name); err != nil {
				return err
			}
			doc, err := (&libvirtxml.StorageVolume{
				Name:       up.Name,
				Capacity:   &libvirtxml.StorageVolumeSize{Value: up.Capacity, Unit: "bytes"},
				Allocation: &libvirtxml.StorageVolumeSize{Value: 0, Unit: "bytes"},
				Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: up.Format}},
			}).Marshal()
			if err != nil {
				return err
			}
			v, err := lv.StorageVolCreateXML(p, doc, 0)
			if err != nil {
				return fmt.Errorf("creating the volume: %w", err)
			}
			created.Store(true)
			src.touch()
			if up.Format == "raw" {
				// Only the data: libvirt made the volume a hole of its
				// full size, and each run lands at its own offset.
				if _, err := uploadSparse(src, up.Length, func(off int64, data []byte) error {
					return lv.StorageVolUpload(v, &touchingReader{r: bytes.NewReader(data), w: src}, uint64(off), uint64(len(data)), 0)
				}); err != nil {
					return fmt.Errorf("uploading %d bytes (%d read): %w", up.Length, src.n.Load(), err)
				}
			} else if err := lv.StorageVolUpload(v, src, 0, uint64(up.Length), 0); err != nil {
				return fmt.Errorf("uploading %d bytes (%d sent): %w", up.Length, src.n.Load(), err)
			}
			if sent := src.n.Load(); sent != up.Length {
				return fmt.Errorf("the image gave %d bytes, %d expected", sent, up.Length)
			}
			// Let the pool see the content as uploaded (allocation, and the
			// format libvirt probes) before describing the volume.
			_ = lv.StoragePoolRefresh(p, 0)
			if v, err = lv.StorageVolLookupByName(p, up.Name); err != nil {
				return err
			}
			out, err = volumeDetail(lv, up.Pool, v)
			return err
		}()
	}()

	stall := c.settings.CallTimeout
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var err error
	lastReport := int64(-1)
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-ctx.Done():
			// The reader fails from now on, which makes go-libvirt abort
			// the stream; the connection is ended below in any case.
			src.cancel()
			err = fmt.Errorf("%s: %w", op, ctx.Err())
			break wait
		case <-tick.C:
			if n := src.n.Load(); up.Progress != nil && n != lastReport {
				lastReport = n
				up.Progress(n)
			}
			if idle := time.Since(src.last()); idle > stall {
				src.cancel()
				err = &ConnectionError{Endpoint: c.ep, Op: op, Err: fmt.Errorf("libvirt took no bytes for %s (%d of %d sent); the upload was cut off", idle.Round(time.Second), src.n.Load(), up.Length)}
				break wait
			}
		}
	}
	// The connection ends either way. After an error this is also what
	// stops the upload: go-libvirt cannot cancel a stream call, and ending
	// the connection ends the call (and its goroutine) and makes libvirtd
	// drop the stream.
	c.endConn(lv, td)
	if err == nil {
		return out, nil
	}
	select {
	case <-done: //nolint:errcheck // waits for the upload call to end; err already says why it failed
	case <-time.After(channelEndTimeout):
	}
	if !created.Load() {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostconn.Unreachable+c.settings.CallTimeout)
	defer cancel()
	if derr := hostconn.WhileUnreachable(cctx, hostconn.Unreachable, func() error { return c.deleteUnused(cctx, up.Pool, up.Name) }); derr != nil {
		return nil, fmt.Errorf("%w (deleting the partial volume failed: %v; delete %s/%s by hand)", err, derr, up.Pool, up.Name)
	}
	return nil, fmt.Errorf("%w (the partial volume was deleted)", err)
}

// endConn ends a connection of its own: CONNECT_CLOSE when it still
// answers, then the socket, each step bounded.
func (c *Client) endConn(lv *libvirt.Libvirt, td *trackingDialer) {
	if lv.IsConnected() {
		closed := make(chan struct{})
		go func() { _ = lv.Disconnect(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(channelEndTimeout):
		}
	}
	td.shutDown()
	select {
	case <-lv.Disconnected():
	case <-time.After(channelEndTimeout):
	}
}

// watchedReader counts what it hands out, remembers when, and fails once
// cancelled (a failing reader makes go-libvirt abort the stream).
type watchedReader struct {
	r        io.Reader
	n        atomic.Int64
	at       atomic.Int64
	stopped  atomic.Bool
	stopOnce sync.Once
}

var errUploadCancelled = errors.New("the upload was cancelled")

func (w *watchedReader) Read(p []byte) (int, error) {
	if w.stopped.Load() {
		return 0, errUploadCancelled
	}
	n, err := w.r.Read(p)
	w.n.Add(int64(n))
	w.touch()
	return n, err
}

// touchingReader hands out a run already read from w, keeping w's clock
// going (and its cancel working) while libvirt takes the run.
type touchingReader struct {
	r io.Reader
	w *watchedReader
}

func (t *touchingReader) Read(p []byte) (int, error) {
	if t.w.stopped.Load() {
		return 0, errUploadCancelled
	}
	n, err := t.r.Read(p)
	t.w.touch()
	return n, err
}

func (w *watchedReader) touch()          { w.at.Store(time.Now().UnixNano()) }
func (w *watchedReader) last() time.Time { return time.Unix(0, w.at.Load()) }
func (w *watchedReader) cancel()         { w.stopOnce.Do(func() { w.stopped.Store(true) }) }

// BackedBy lists the volumes of every pool of the host whose backing file
// is path (overlays of an image), as "pool/name", sorted.
func (c *Client) BackedBy(ctx context.Context, path string) ([]string, error) {
	var out []string
	err := c.Call(ctx, "list volumes backed by "+path, func(l *libvirt.Libvirt) error {
		pools, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive)
		if err != nil {
			return err
		}
		for _, p := range pools {
			vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
			if err != nil {
				continue // a pool that went inactive meanwhile
			}
			for _, v := range vols {
				d, err := volumeDetail(l, p.Name, v)
				if err == nil && d.BackingPath == path {
					out = append(out, p.Name+"/"+v.Name)
				}
			}
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
