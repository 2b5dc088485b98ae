package seed

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kdomanski/iso9660"
)

// ISOTimestamp is stamped into every date field of the image (volume
// descriptor and directory records) so the same files always give the same
// bytes, whatever the clock says.
var ISOTimestamp = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// isoSystemID replaces the writer's runtime.GOOS so an image built on macOS
// or Windows is identical to one built on Linux.
const isoSystemID = "linux"

const sectorSize = 2048

// SystemAreaBytes is the ISO 9660 system area: the first 16 sectors, which
// ISO 9660 readers (the guest kernel, cloud-init) never read and BuildISO
// leaves zero. A refresh compares everything after it (see ISODigest).
const SystemAreaBytes = 16 * sectorSize

// ISODigest is the hex SHA-256 of an image whose system area is zero (as
// BuildISO writes it) and whose bytes after it are tail: the digest of the
// whole image, computed from what a refresh reads. A change confined to the
// system area, invisible to the guest, is not seen.
func ISODigest(tail []byte) string {
	h := sha256.New()
	h.Write(make([]byte, SystemAreaBytes))
	h.Write(tail)
	return hex.EncodeToString(h.Sum(nil))
}

// isoNameOK reports whether a path component survives the writer's name
// mangling unchanged (lower-case d-characters plus '-' and one '.', within
// the ISO 9660 lengths), so the guest sees exactly the name cloud-init
// looks for once the kernel drops the ";1" version suffix.
func isoNameOK(name string, dir bool) bool {
	if name == "" {
		return false
	}
	maxLen := 30 - 2 // file identifier minus ";1"
	if dir {
		maxLen = 31
	}
	if len(name) > maxLen || strings.Count(name, ".") > 1 || (dir && strings.Contains(name, ".")) {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

// BuildISO writes a plain ISO 9660 image (no Joliet, no Rock Ridge) with the
// given volume label holding files (path inside the image -> content). Paths
// use '/' and must be lower-case names that ISO 9660 keeps as they are. The
// result is reproducible: every timestamp is ISOTimestamp.
func BuildISO(label string, files map[string][]byte) ([]byte, error) {
	if label == "" || len(label) > 32 {
		return nil, fmt.Errorf("iso: volume label %q must be 1-32 characters", label)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		parts := strings.Split(name, "/")
		for i, part := range parts {
			if !isoNameOK(part, i < len(parts)-1) {
				return nil, fmt.Errorf("iso: %q: name %q would be changed by ISO 9660 name mangling", name, part)
			}
		}
		names = append(names, name)
	}
	sort.Strings(names)

	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, fmt.Errorf("iso: creating writer: %w", err)
	}
	defer w.Cleanup() //nolint:errcheck // best effort removal of the staging directory
	for _, name := range names {
		if err := w.AddFile(bytes.NewReader(files[name]), name); err != nil {
			return nil, fmt.Errorf("iso: adding %s: %w", name, err)
		}
	}
	var out bytes.Buffer
	if err := w.WriteTo(&out, label); err != nil {
		return nil, fmt.Errorf("iso: writing image: %w", err)
	}
	img := out.Bytes()
	if err := fixTimestamps(img, ISOTimestamp); err != nil {
		return nil, fmt.Errorf("iso: fixing timestamps: %w", err)
	}
	return img, nil
}

// fixTimestamps overwrites the primary volume descriptor's dates and system
// identifier and the recording date of every directory record.
func fixTimestamps(img []byte, t time.Time) error {
	const pvdAt = 16 * sectorSize
	if len(img) < pvdAt+sectorSize || img[pvdAt] != 1 || string(img[pvdAt+1:pvdAt+6]) != "CD001" {
		return errors.New("no primary volume descriptor at sector 16")
	}
	pvd := img[pvdAt : pvdAt+sectorSize]
	copy(pvd[8:40], iso9660.MarshalString(isoSystemID, 32))
	vts := iso9660.VolumeDescriptorTimestampFromTime(t)
	stamp, err := vts.MarshalBinary()
	if err != nil {
		return err
	}
	for _, off := range []int{813, 830, 864} { // creation, modification, effective
		copy(pvd[off:off+17], stamp)
	}
	var rec [7]byte
	iso9660.RecordingTimestamp(t).MarshalBinary(rec[:])

	root := pvd[156:190]
	copy(root[18:25], rec[:])
	visited := map[uint32]bool{}
	var walk func(lba, size uint32, depth int) error
	walk = func(lba, size uint32, depth int) error {
		if depth > 16 || visited[lba] {
			return nil
		}
		visited[lba] = true
		start, end := int(lba)*sectorSize, int(lba)*sectorSize+int(size)
		if start < 0 || end > len(img) || start >= end {
			return fmt.Errorf("directory extent %d+%d outside the image", lba, size)
		}
		for off := start; off < end; {
			n := int(img[off])
			if n == 0 { // rest of this sector is padding
				off = (off/sectorSize + 1) * sectorSize
				continue
			}
			if n < 34 || off+n > end {
				return fmt.Errorf("bad directory record at byte %d", off)
			}
			r := img[off : off+n]
			copy(r[18:25], rec[:])
			idLen := int(r[32])
			isSelfOrParent := idLen == 1 && (r[33] == 0 || r[33] == 1)
			if r[25]&2 != 0 && !isSelfOrParent {
				if err := walk(binary.LittleEndian.Uint32(r[2:6]), binary.LittleEndian.Uint32(r[10:14]), depth+1); err != nil {
					return err
				}
			}
			off += n
		}
		return nil
	}
	return walk(binary.LittleEndian.Uint32(root[2:6]), binary.LittleEndian.Uint32(root[10:14]), 0)
}
