package seedlife

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// Host is what a seed's life needs from a libvirt host. *virt.Client is one.
type Host interface {
	UploadVolume(ctx context.Context, pool, name string, data []byte) (*hostapi.VolumeDetail, error)
	ReadVolumeAt(ctx context.Context, pool, name string, offset, limit int64) (*hostapi.VolumeDetail, []byte, error)
	RemoveVolume(ctx context.Context, pool, name string) error
}

// ErrGone is a seed whose volume is no longer on the host.
var ErrGone = errors.New("seed volume is gone")

// Stored is a seed's volume as the host keeps it.
type Stored struct {
	Key, Path string
	SizeBytes int64
}

// Store uploads iso as the raw volume pool/name. An existing volume of that
// name is never touched.
func Store(ctx context.Context, h Host, pool, name string, iso []byte) (*Stored, error) {
	vol, err := h.UploadVolume(ctx, pool, name, iso)
	if err != nil {
		return nil, err
	}
	return &Stored{Key: vol.Key, Path: vol.Path, SizeBytes: vol.CapacityBytes}, nil
}

// Delete deletes the seed's volume.
func Delete(ctx context.Context, h Host, pool, name string) error {
	return h.RemoveVolume(ctx, pool, name)
}

// Read is a seed as read back from its volume.
type Read struct {
	Stored
	// SHA256 is the digest the seed resource records: seed.ISODigest of
	// the volume after the ISO's system area, or the plain SHA-256 of a
	// volume read whole.
	SHA256 string
	// Inspection is what an imported seed holds; InspectErr says why a
	// volume read whole is not a seed Kohaku can read.
	Inspection *seed.Inspection
	InspectErr error
}

// ReadBack reads the seed pool/name. A refresh (whole false) reads the
// volume after the ISO's system area, which no ISO 9660 reader looks at
// and Kohaku writes zero: 24 KiB of a typical 56 KiB seed. An import
// (whole true) reads it whole, to learn what it holds. A volume that is
// gone is ErrGone.
func ReadBack(ctx context.Context, h Host, pool, name string, whole bool) (*Read, error) {
	var skip int64
	if !whole {
		skip = seed.SystemAreaBytes
	}
	vol, iso, err := h.ReadVolumeAt(ctx, pool, name, skip, seed.MaxVolumeBytes)
	if errors.Is(err, hostapi.ErrNotFound) {
		return nil, fmt.Errorf("%s/%s: %w", pool, name, ErrGone)
	}
	if err != nil {
		return nil, err
	}
	r := &Read{Stored: Stored{Key: vol.Key, Path: vol.Path, SizeBytes: vol.CapacityBytes}}
	if skip > 0 && vol.CapacityBytes > skip {
		r.SHA256 = seed.ISODigest(iso)
	} else {
		sum := sha256.Sum256(iso)
		r.SHA256 = hex.EncodeToString(sum[:])
	}
	if whole {
		r.Inspection, r.InspectErr = seed.Inspect(iso)
	}
	return r, nil
}
