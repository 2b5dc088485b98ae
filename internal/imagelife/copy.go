package imagelife

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// CopySource is the host an image is copied from. *virt.Client is one.
type CopySource interface {
	VolumeInfo(ctx context.Context, pool, name string) (*hostapi.VolumeDetail, error)
	StreamVolumeOut(ctx context.Context, pool, name string, w io.Writer) error
}

// CopyTarget is the host an image is copied to. *virt.Client is one.
type CopyTarget interface {
	StreamVolumeIn(ctx context.Context, pool, name, format string, capacity int64, r io.Reader) (*hostapi.VolumeDetail, error)
	HashVolume(ctx context.Context, pool, name string) (hostapi.ImageDigest, error)
	RemoveVolume(ctx context.Context, pool, name string) error
}

// ErrSourceChanged is a copy whose source no longer reads as the digest
// recorded for it.
var ErrSourceChanged = errors.New("the source image changed since it was recorded")

// DigestMismatchError is a copy whose landed bytes differ from what was read.
type DigestMismatchError struct{ Read, Landed hostapi.ImageDigest }

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("the copy read %d bytes with %s from the source, but the volume that landed holds %d bytes with %s",
		e.Read.Bytes, e.Read, e.Landed.Bytes, e.Landed)
}

// Copied is an image copied to another host (or pool).
type Copied struct {
	Volume *Volume
	Digest hostapi.ImageDigest
}

// Copy streams the image volume srcPool/srcName of src into a new volume
// dstPool/dstName of dst through this process (host to runner to host, one
// stream packet in memory), hashing what it reads, then reads what landed
// back and compares. want, when not empty, is the digest the source must
// read as (`sha256:<hex>`): a source changed since it was recorded is not
// spread. An overlay is refused (its backing chain would not travel). A
// copy that fails, is interrupted or does not match leaves no volume; an
// existing volume of that name is never touched. src and dst may be the
// same host.
func Copy(ctx context.Context, src CopySource, srcPool, srcName string, dst CopyTarget, dstPool, dstName, want string) (*Copied, error) {
	info, err := src.VolumeInfo(ctx, srcPool, srcName)
	if err != nil {
		return nil, fmt.Errorf("reading the source image %s/%s: %w", srcPool, srcName, err)
	}
	if info.BackingPath != "" {
		return nil, fmt.Errorf("%s/%s is an overlay on %s, not a standalone image; copy the image it is backed by", srcPool, srcName, info.BackingPath)
	}
	format := info.Format
	if format == "" {
		format = "raw"
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	h := sha256.New()
	var read atomic.Int64
	tee := writerFunc(func(p []byte) (int, error) {
		h.Write(p)
		read.Add(int64(len(p)))
		return pw.Write(p)
	})
	downErr := make(chan error, 1)
	go func() {
		err := src.StreamVolumeOut(cctx, srcPool, srcName, tee)
		pw.CloseWithError(err) // nil: the upload sees EOF
		downErr <- err
	}()
	vol, upErr := dst.StreamVolumeIn(cctx, dstPool, dstName, format, info.CapacityBytes, pr)
	if upErr != nil {
		pr.CloseWithError(upErr) // the download fails at its next write
		cancel()
	}
	dErr := <-downErr
	switch {
	case upErr != nil:
		// StreamVolumeIn deleted what it made.
		if dErr != nil && !errors.Is(upErr, dErr) && !errors.Is(dErr, upErr) && !errors.Is(dErr, io.ErrClosedPipe) {
			return nil, fmt.Errorf("copying to %s/%s: %w (reading the source: %v)", dstPool, dstName, upErr, dErr)
		}
		return nil, fmt.Errorf("copying to %s/%s: %w", dstPool, dstName, upErr)
	case dErr != nil:
		err = fmt.Errorf("reading the source image %s/%s: %w", srcPool, srcName, dErr)
	}
	got := hostapi.DigestOf(h, read.Load())
	if err == nil && want != "" && want != got.String() {
		err = fmt.Errorf("%w: %s/%s reads as %s, not %s", ErrSourceChanged, srcPool, srcName, got, want)
	}
	if err == nil {
		landed, herr := dst.HashVolume(ctx, dstPool, dstName)
		switch {
		case herr != nil:
			err = fmt.Errorf("verifying the copy %s/%s: %w", dstPool, dstName, herr)
		case landed != got:
			err = &DigestMismatchError{Read: got, Landed: landed}
		default:
			return &Copied{Volume: vol, Digest: got}, nil
		}
	}
	if derr := dst.RemoveVolume(context.WithoutCancel(ctx), dstPool, dstName); derr != nil {
		return nil, fmt.Errorf("%w (deleting the copy failed: %v; delete %s/%s by hand)", err, derr, dstPool, dstName)
	}
	return nil, fmt.Errorf("%w (the copy was deleted)", err)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
