package hostapi

import (
	"encoding/hex"
	"hash"
	"io"
)

// VolumeDetail is a storage volume as Kohaku reads it: where it is, its
// size, and what an overlay needs to know.
type VolumeDetail struct {
	Pool string
	Name string
	// Key is libvirt's key of the volume, unique on the host.
	Key           string
	Path          string
	Format        string // qcow2, raw, ...; empty when libvirt does not say
	CapacityBytes int64
	// BackingPath is the backing file of an overlay; empty for other volumes.
	BackingPath string
}

// VolumeHead is a volume with the first bytes of its content, as libvirt
// stores it (a qcow2 volume's container, not the disk it describes).
type VolumeHead struct {
	VolumeDetail
	// Head is the start of the volume's content: as many bytes as asked
	// for, or the whole volume when it is smaller.
	Head []byte
}

// DiskUse is a writable disk of a domain: a file, or a volume of a pool.
type DiskUse struct {
	Domain       string
	Path         string // the file, for a file disk
	Pool, Volume string // for a volume disk
}

// ImageUpload describes a disk image to stream into a new volume.
type ImageUpload struct {
	Pool, Name string
	// Format is the volume's format: "qcow2" or "raw".
	Format string
	// Capacity is the image's virtual size in bytes.
	Capacity uint64
	// Length is the number of bytes Source delivers (the image file's size).
	Length int64
	Source io.Reader
	// Progress, when set, is called with the bytes sent so far, at most
	// about once a second.
	Progress func(sent int64)
}

// ImageDigest is the SHA-256 of a volume's bytes as libvirt streams them
// (the file as stored, qcow2 container included), and how many there were.
type ImageDigest struct {
	SHA256 string // lower-case hex
	Bytes  int64
}

// String is the digest as kohaku_image records it: `sha256:<hex>`.
func (d ImageDigest) String() string { return "sha256:" + d.SHA256 }

// DigestOf is the digest of what h (a SHA-256) hashed, n bytes.
func DigestOf(h hash.Hash, n int64) ImageDigest {
	return ImageDigest{SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: n}
}
