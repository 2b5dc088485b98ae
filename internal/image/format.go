package image

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
)

// Disk image formats a Result can have.
const (
	// FormatQCOW2 is a qcow2 image (version 2 or 3).
	FormatQCOW2 = "qcow2"
	// FormatRaw is a raw disk image with an MBR or GPT partition table.
	FormatRaw = "raw"
)

// ErrUnsupportedImage is wrapped by the errors Fetch returns when the
// (decompressed) image is not a qcow2 or raw disk image that is safe to use:
// another container format, a qcow2 with a backing file, an external data
// file or encryption, a file that is not a disk image at all.
var ErrUnsupportedImage = errors.New("unsupported disk image")

// inspectHeadSize is how much of the start of an image inspect reads at once;
// it covers the ISO 9660 volume descriptor at 32769.
const inspectHeadSize = 64 << 10

// qcow2 header fields (big-endian).
const (
	qcowMagic               = "QFI\xfb"
	qcowOffBackingOffset    = 8
	qcowOffBackingSize      = 16
	qcowOffClusterBits      = 20
	qcowOffSize             = 24
	qcowOffCryptMethod      = 32
	qcowOffIncompatible     = 72
	qcowOffHeaderLength     = 100
	qcowV2HeaderLength      = 72
	qcowV3MinHeaderLength   = 104
	qcowIncompatCorrupt     = 1 << 1
	qcowIncompatDataFile    = 1 << 2
	qcowExtEnd              = 0x00000000
	qcowExtDataFile         = 0x44415441
	qcowExtCryptoHeader     = 0x0537be77
	qcowMaxHeaderExtensions = 4096
)

// imageInfo is what inspection learns about a disk image.
type imageInfo struct {
	Format      string
	VirtualSize uint64
	Size        int64
}

// unsupportedError describes why an image is refused; it matches
// ErrUnsupportedImage.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrUnsupportedImage) true.
func (e *unsupportedError) Is(target error) bool { return target == ErrUnsupportedImage }

// unsupported returns an error matching ErrUnsupportedImage whose message
// describes the image ("is a VMDK image; ...").
func unsupported(format string, args ...any) error {
	return &unsupportedError{fmt.Sprintf(format, args...)}
}

// convertHint is appended to errors about other container formats.
const convertHint = "only qcow2 and raw disk images are accepted (convert it with qemu-img convert -O qcow2)"

// inspectImage identifies the disk image of the given size read through r
// and refuses anything that is not a plain qcow2 or raw disk image. The
// returned errors describe the image ("is a VMDK image; ...") and are meant to
// follow the image's name.
func inspectImage(r io.ReaderAt, size int64) (imageInfo, error) {
	if size <= 0 {
		return imageInfo{}, unsupported("is empty")
	}
	head := make([]byte, min(size, inspectHeadSize))
	if _, err := r.ReadAt(head, 0); err != nil && err != io.EOF {
		return imageInfo{}, fmt.Errorf("reading image header: %w", err)
	}
	at := func(off int, s string) bool {
		return len(head) >= off+len(s) && string(head[off:off+len(s)]) == s
	}

	if c := detectCompression(head); c != "" {
		return imageInfo{}, unsupported("is %s-compressed data inside the image; only one layer of compression (optionally holding a tar archive) is supported", c)
	}
	if isTar(head) {
		return imageInfo{}, unsupported("is a tar archive inside the image; only one tar archive (optionally compressed) holding the disk image is supported")
	}
	switch {
	case at(0, qcowMagic):
		return inspectQCOW2(r, head, size)
	case at(0, "QED\x00"):
		return imageInfo{}, unsupported("is a QED image; %s", convertHint)
	case at(0, "KDMV"), at(0, "COWD"), at(0, "# Disk DescriptorFile"):
		return imageInfo{}, unsupported("is a VMDK image; %s", convertHint)
	case len(head) >= 68 && binary.LittleEndian.Uint32(head[64:68]) == 0xbeda107f:
		return imageInfo{}, unsupported("is a VDI (VirtualBox) image; %s", convertHint)
	case at(0, "vhdxfile"):
		return imageInfo{}, unsupported("is a VHDX image; %s", convertHint)
	case at(0, "conectix"):
		return imageInfo{}, unsupported("is a VHD image; %s", convertHint)
	case at(0, "Bochs Virtual HD Image"):
		return imageInfo{}, unsupported("is a Bochs image; %s", convertHint)
	case at(0, "OOOM"):
		return imageInfo{}, unsupported("is a COW (User Mode Linux) image; %s", convertHint)
	case at(0, "WithoutFreeSpace"), at(0, "WithouFreSpacExt"):
		return imageInfo{}, unsupported("is a Parallels image; %s", convertHint)
	case at(0, "#!/bin/sh\n#V2.0 Format\n"):
		return imageInfo{}, unsupported("is a cloop image; %s", convertHint)
	case at(0, "LUKS\xba\xbe"):
		return imageInfo{}, unsupported("is a LUKS-encrypted volume; only unencrypted qcow2 and raw disk images are accepted")
	}
	if size >= 512 {
		var foot [8]byte
		if _, err := r.ReadAt(foot[:], size-512); err != nil && err != io.EOF {
			return imageInfo{}, fmt.Errorf("reading image footer: %w", err)
		}
		if string(foot[:]) == "conectix" {
			return imageInfo{}, unsupported("is a VHD image (fixed, footer at the end); %s", convertHint)
		}
	}
	if at(32769, "CD001") {
		return imageInfo{}, unsupported("is an ISO 9660 CD/DVD image, not a disk image; only qcow2 and raw disk images are accepted")
	}
	return inspectRaw(head, size)
}

// inspectRaw accepts a raw disk image carrying an MBR boot signature or a GPT
// header.
func inspectRaw(head []byte, size int64) (imageInfo, error) {
	hasMBR := len(head) >= 512 && head[510] == 0x55 && head[511] == 0xAA
	hasGPT := len(head) >= 520 && string(head[512:520]) == "EFI PART" ||
		len(head) >= 4104 && string(head[4096:4104]) == "EFI PART"
	if !hasMBR && !hasGPT {
		return imageInfo{}, unsupported("is not a recognised disk image (not qcow2, and no MBR boot signature or GPT header as a raw disk image has); it starts with %s", describeBytes(head, 16))
	}
	if size%512 != 0 {
		return imageInfo{}, unsupported("looks like a raw disk image but its size, %d bytes, is not a multiple of 512 (truncated?)", size)
	}
	return imageInfo{Format: FormatRaw, VirtualSize: uint64(size), Size: size}, nil
}

// inspectQCOW2 checks a qcow2 header and returns its virtual size.
func inspectQCOW2(r io.ReaderAt, head []byte, size int64) (imageInfo, error) {
	be := binary.BigEndian
	if len(head) < qcowV2HeaderLength {
		return imageInfo{}, unsupported("is a truncated qcow2 image (%d bytes)", len(head))
	}
	version := be.Uint32(head[4:8])
	if version != 2 && version != 3 {
		return imageInfo{}, unsupported("is a qcow2 image of version %d; only versions 2 and 3 are supported", version)
	}
	clusterBits := be.Uint32(head[qcowOffClusterBits:])
	if clusterBits < 9 || clusterBits > 21 {
		return imageInfo{}, unsupported("is a qcow2 image with an invalid cluster size (cluster_bits %d)", clusterBits)
	}
	if off := be.Uint64(head[qcowOffBackingOffset:]); off != 0 {
		name := readBackingName(r, off, be.Uint32(head[qcowOffBackingSize:]))
		return imageInfo{}, unsupported("is a qcow2 image with a backing file (%q); only self-contained images are accepted (flatten it with qemu-img convert -O qcow2)", name)
	}
	if m := be.Uint32(head[qcowOffCryptMethod:]); m != 0 {
		method := map[uint32]string{1: "AES", 2: "LUKS"}[m]
		if method == "" {
			method = fmt.Sprintf("method %d", m)
		}
		return imageInfo{}, unsupported("is an encrypted qcow2 image (%s); only unencrypted images are accepted", method)
	}
	headerLen := uint64(qcowV2HeaderLength)
	if version == 3 {
		if len(head) < qcowV3MinHeaderLength {
			return imageInfo{}, unsupported("is a truncated qcow2 version 3 image (%d bytes)", len(head))
		}
		incompat := be.Uint64(head[qcowOffIncompatible:])
		if incompat&qcowIncompatDataFile != 0 {
			return imageInfo{}, unsupported("is a qcow2 image with an external data file (incompatible feature bit 2); only self-contained images are accepted")
		}
		if incompat&qcowIncompatCorrupt != 0 {
			return imageInfo{}, unsupported("is a qcow2 image marked corrupt (incompatible feature bit 1); repair it with qemu-img check -r all")
		}
		headerLen = uint64(be.Uint32(head[qcowOffHeaderLength:]))
		if headerLen < qcowV3MinHeaderLength {
			return imageInfo{}, unsupported("is a qcow2 version 3 image with an invalid header length %d", headerLen)
		}
	}
	if err := scanQCOW2Extensions(r, headerLen, uint64(1)<<clusterBits); err != nil {
		return imageInfo{}, err
	}
	return imageInfo{Format: FormatQCOW2, VirtualSize: be.Uint64(head[qcowOffSize:]), Size: size}, nil
}

// scanQCOW2Extensions walks the header extensions, which follow the header
// within the first cluster, and refuses an external data file or an
// encryption header.
func scanQCOW2Extensions(r io.ReaderAt, off, clusterSize uint64) error {
	be := binary.BigEndian
	for i := 0; i < qcowMaxHeaderExtensions; i++ {
		if off+8 > clusterSize {
			return nil
		}
		var h [8]byte
		if n, err := r.ReadAt(h[:], int64(off)); n < len(h) {
			if err == io.EOF || err == nil {
				return unsupported("is a truncated qcow2 image (header extensions cut short)")
			}
			return fmt.Errorf("reading qcow2 header extensions: %w", err)
		}
		typ, length := be.Uint32(h[0:4]), uint64(be.Uint32(h[4:8]))
		switch typ {
		case qcowExtEnd:
			return nil
		case qcowExtDataFile:
			name := make([]byte, min(length, 1024))
			n, _ := r.ReadAt(name, int64(off+8))
			return unsupported("is a qcow2 image with an external data file (%q); only self-contained images are accepted", name[:n])
		case qcowExtCryptoHeader:
			return unsupported("is an encrypted qcow2 image (full disk encryption header); only unencrypted images are accepted")
		}
		off += 8 + (length+7)&^7
	}
	return nil
}

// readBackingName reads the backing file name of a qcow2 image for an error
// message.
func readBackingName(r io.ReaderAt, off uint64, size uint32) string {
	if size == 0 || size > 1023 || off > 1<<30 {
		return "?"
	}
	b := make([]byte, size)
	n, _ := r.ReadAt(b, int64(off))
	return string(b[:n])
}

// describeBytes shows the first n bytes of b in hex, plus a hint about what
// they look like when they look like text.
func describeBytes(b []byte, n int) string {
	b = b[:min(len(b), n)]
	var hx strings.Builder
	for i, c := range b {
		if i > 0 {
			hx.WriteByte(' ')
		}
		fmt.Fprintf(&hx, "%02x", c)
	}
	s := fmt.Sprintf("bytes %s", hx.String())
	if len(b) == 0 {
		return "no bytes"
	}
	printable := true
	for _, r := range string(b) {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			printable = false
			break
		}
	}
	if printable {
		s += fmt.Sprintf(" (text %q", string(b))
		low := bytes.ToLower(b)
		if bytes.Contains(low, []byte("<!doctype")) || bytes.Contains(low, []byte("<html")) {
			s += ", looks like an HTML page, not an image"
		}
		s += ")"
	}
	return s
}

// InspectHeadBytes is how much of an image InspectHead needs to see.
const InspectHeadBytes = inspectHeadSize

// InspectHead applies the checks Fetch makes to a disk image of size bytes
// of which only the first bytes, head (InspectHeadBytes of them, or the
// whole image when smaller), are at hand, as when a volume already on a
// host is looked at: it returns the format (FormatQCOW2 or FormatRaw) of an
// image Fetch would accept, or an error matching ErrUnsupportedImage that
// says why not (a qcow2 with a backing file, an ISO image, no partition
// table...).
func InspectHead(head []byte, size int64) (string, error) {
	info, err := inspectImage(bytes.NewReader(head), size)
	return info.Format, err
}
