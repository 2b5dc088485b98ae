package volkind

import (
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/image"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// HeadBytes is how much of the start of a volume Recognise needs: the
// image checks' header window, which also covers an ISO 9660 primary
// volume descriptor (sector 16, 2 KiB sectors).
const HeadBytes = max(image.InspectHeadBytes, pvdOffset+sectorSize)

const (
	sectorSize = 2048
	pvdOffset  = 16 * sectorSize
	// The volume identifier's place in the primary volume descriptor.
	labelOffset = 40
	labelLength = 32
)

// Kind is what a volume holds.
type Kind int

const (
	// Other is anything else: an overlay, an installer ISO, an empty or
	// unformatted disk, another container format.
	Other Kind = iota
	// Image is a disk image kohaku_image could hold.
	Image
	// Seed is a cloud-init seed ISO.
	Seed
)

// Content is what Recognise found.
type Content struct {
	Kind Kind
	// Format is the image format (image.FormatQCOW2 or image.FormatRaw)
	// of an Image, or the seed.Format of a Seed.
	Format string
	// Why says, for Other, why the volume is neither.
	Why string
}

// Recognise tells what a volume of size bytes holds from head, its first
// HeadBytes bytes (all of them when the volume is smaller).
func Recognise(head []byte, size int64) Content {
	if label, ok := isoLabel(head); ok {
		switch strings.ToLower(label) {
		case seed.LabelNoCloud:
			return Content{Kind: Seed, Format: string(seed.FormatNoCloud)}
		case seed.LabelConfigDrive:
			return Content{Kind: Seed, Format: string(seed.FormatConfigDrive)}
		}
		return Content{Kind: Other, Why: "an ISO 9660 image labelled " + quoteLabel(label) + ", not cidata or config-2"}
	}
	format, err := image.InspectHead(head, size)
	if err != nil {
		return Content{Kind: Other, Why: err.Error()}
	}
	return Content{Kind: Image, Format: format}
}

// isoLabel reads the volume identifier of an ISO 9660 image's primary
// volume descriptor; ok is false when head holds none.
func isoLabel(head []byte) (string, bool) {
	if len(head) < pvdOffset+sectorSize {
		return "", false
	}
	pvd := head[pvdOffset : pvdOffset+sectorSize]
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" || pvd[6] != 1 {
		return "", false
	}
	return strings.TrimRight(string(pvd[labelOffset:labelOffset+labelLength]), " \x00"), true
}

func quoteLabel(l string) string {
	if l == "" {
		return "with nothing"
	}
	return `"` + l + `"`
}
