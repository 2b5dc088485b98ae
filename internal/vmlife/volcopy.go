package vmlife

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// volumeSource is a host a volume is copied from.
type volumeSource interface {
	VolumeInfo(ctx context.Context, pool, name string) (*hostapi.VolumeDetail, error)
	// VolumeLength is the number of bytes a download of the volume gives:
	// the size of its file (a qcow2's own bytes, not its virtual size).
	VolumeLength(ctx context.Context, pool, name string) (int64, error)
	// StreamVolume writes the volume's first length bytes to w.
	StreamVolume(ctx context.Context, pool, name string, length int64, w io.Writer) error
}

// volumeTarget is a host a volume is copied to.
type volumeTarget interface {
	volumeSource
	UploadImage(ctx context.Context, up hostapi.ImageUpload) (*hostapi.VolumeDetail, error)
	RemoveVolume(ctx context.Context, pool, name string) error
}

// copiedVolume is a volume copied and verified.
type copiedVolume struct {
	Bytes int64
	// SHA256 is the hex digest of the bytes read from the source, which
	// the target's volume, read back, matched.
	SHA256 string
}

// errBackedVolume refuses to copy an overlay: its bytes mean nothing
// without its backing file. Flatten it first (FlattenVolume).
var errBackedVolume = errors.New("the volume is an overlay on a backing file")

// copyVerified copies a standalone volume (raw, or qcow2 without a backing
// file) from one host to another as its file's bytes: the source's
// download stream feeds the target's upload through a pipe, so memory
// stays bounded by the stream packets whatever the size. The bytes are
// hashed (SHA-256) as the upload takes them; then the target's volume is
// read back through libvirt and hashed again, so the digest checks what
// landed in the target pool, not what was sent. A failed or mismatched copy
// deletes the target volume. The target volume must not exist. The target
// is made as a raw volume holding the file's bytes, so its host needs no
// qemu-img; libvirt reads a qcow2's format from the file.
func copyVerified(ctx context.Context, src volumeSource, fromPool, fromName string, dst volumeTarget, toPool, toName string) (*copiedVolume, error) {
	info, err := src.VolumeInfo(ctx, fromPool, fromName)
	if err != nil {
		return nil, fmt.Errorf("reading source volume %s/%s: %w", fromPool, fromName, err)
	}
	if info.BackingPath != "" {
		return nil, fmt.Errorf("copying %s/%s: %w (%s)", fromPool, fromName, errBackedVolume, info.BackingPath)
	}
	n, err := src.VolumeLength(ctx, fromPool, fromName)
	if err != nil {
		return nil, fmt.Errorf("reading the size of source volume %s/%s: %w", fromPool, fromName, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	sent := sha256.New()
	downloaded := make(chan error, 1)
	go func() {
		err := src.StreamVolume(ctx, fromPool, fromName, n, pw)
		if err != nil {
			pw.CloseWithError(err)
		} else {
			_ = pw.Close()
		}
		downloaded <- err
	}()
	// The target volume is made raw and as long as the file, and the file
	// lands as it is: a qcow2 stays qcow2 (libvirt probes it when the pool
	// is refreshed), and the target needs no qemu-img to make a qcow2.
	_, err = dst.UploadImage(ctx, hostapi.ImageUpload{Pool: toPool, Name: toName, Format: "raw",
		Capacity: uint64(n), Length: n, Source: io.TeeReader(pr, sent)})
	_ = pr.CloseWithError(errCopyEnded)
	if err != nil {
		cancel() // ends the download, which may wait on the pipe
	}
	derr := <-downloaded
	if err != nil {
		return nil, fmt.Errorf("copying %s/%s to %s/%s: %w", fromPool, fromName, toPool, toName, err)
	}
	if derr != nil {
		return nil, removeAfter(ctx, dst, toPool, toName, fmt.Errorf("copying %s/%s to %s/%s: reading the source: %w", fromPool, fromName, toPool, toName, derr))
	}
	want := hex.EncodeToString(sent.Sum(nil))
	landed := sha256.New()
	if err := dst.StreamVolume(ctx, toPool, toName, n, landed); err != nil {
		return nil, removeAfter(ctx, dst, toPool, toName, fmt.Errorf("verifying %s/%s: reading it back: %w", toPool, toName, err))
	}
	if got := hex.EncodeToString(landed.Sum(nil)); got != want {
		return nil, removeAfter(ctx, dst, toPool, toName, fmt.Errorf("verifying %s/%s: its %d bytes read back hash to sha256:%s, the source's to sha256:%s", toPool, toName, n, got, want))
	}
	return &copiedVolume{Bytes: n, SHA256: want}, nil
}

var errCopyEnded = errors.New("the copy ended")

// removeAfter deletes a failed copy's target volume, on a context the
// failure has not cancelled.
func removeAfter(ctx context.Context, dst volumeTarget, pool, name string, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeCopyTimeout)
	defer cancel()
	if rerr := dst.RemoveVolume(rctx, pool, name); rerr != nil {
		return fmt.Errorf("%w (and deleting the partial copy failed: %v; delete %s/%s by hand)", err, rerr, pool, name)
	}
	return fmt.Errorf("%w (the partial copy was deleted)", err)
}

// removeCopyTimeout bounds the deletion of a failed copy: one libvirt
// call's time (internal/virt's DefaultCallTimeout).
const removeCopyTimeout = 2 * time.Minute
