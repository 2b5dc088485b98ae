package imagelife

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/image"
)

// Host is what an image's life needs from a libvirt host. *virt.Client is one.
type Host interface {
	UploadImage(ctx context.Context, up hostapi.ImageUpload) (*hostapi.VolumeDetail, error)
	VolumeInfo(ctx context.Context, pool, name string) (*hostapi.VolumeDetail, error)
	BackedBy(ctx context.Context, path string) ([]string, error)
	RemoveVolume(ctx context.Context, pool, name string) error
}

// Volume is an image's volume as the host keeps it.
type Volume = hostapi.VolumeDetail

// ErrGone is an image whose volume is no longer on the host.
var ErrGone = errors.New("image volume is gone")

// Upload streams the fetched image res, read from src, into pool/name as a
// volume of its format and virtual size; progress hears the bytes sent. A
// failed upload leaves no volume.
func Upload(ctx context.Context, h Host, pool, name string, res *image.Result, src io.Reader, progress func(sent int64)) (*Volume, error) {
	return h.UploadImage(ctx, hostapi.ImageUpload{
		Pool: pool, Name: name, Format: res.Format, Capacity: res.VirtualSize, Length: res.Size, Source: src,
		Progress: progress,
	})
}

// Read reads the image's volume; a volume that is gone is ErrGone.
func Read(ctx context.Context, h Host, pool, name string) (*Volume, error) {
	vol, err := h.VolumeInfo(ctx, pool, name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return nil, fmt.Errorf("%s/%s: %w", pool, name, ErrGone)
	}
	return vol, err
}

// InUseError is an image that overlays are backed by: deleting it would
// break them silently.
type InUseError struct {
	Pool, Name string
	Users      []string // the overlays' volumes
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("%s/%s is the backing image of %s", e.Pool, e.Name, strings.Join(e.Users, ", "))
}

// BackingListError is a failure to list the volumes backed by the image:
// nothing was deleted.
type BackingListError struct{ Err error }

func (e *BackingListError) Error() string {
	return "listing the volumes backed by it: " + e.Err.Error()
}
func (e *BackingListError) Unwrap() error { return e.Err }

// Delete deletes the image's volume unless a volume is backed by it (an
// *InUseError). A volume already gone is no error.
func Delete(ctx context.Context, h Host, pool, name string) error {
	vol, err := Read(ctx, h, pool, name)
	if errors.Is(err, ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	users, err := h.BackedBy(ctx, vol.Path)
	if err != nil {
		return &BackingListError{Err: err}
	}
	if len(users) > 0 {
		return &InUseError{Pool: pool, Name: name, Users: users}
	}
	return h.RemoveVolume(ctx, pool, name)
}
