package volkind

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// qcow2 returns the start of a version 3 qcow2 image of 1 GiB, with a
// backing file name when backing is not empty.
func qcow2(backing string) []byte {
	be := binary.BigEndian
	h := make([]byte, 64<<10)
	copy(h, "QFI\xfb")
	be.PutUint32(h[4:], 3)
	be.PutUint32(h[20:], 16) // 64 KiB clusters
	be.PutUint64(h[24:], 1<<30)
	be.PutUint32(h[100:], 104)
	if backing != "" {
		be.PutUint64(h[8:], 512)
		be.PutUint32(h[16:], uint32(len(backing)))
		copy(h[512:], backing)
	}
	return h
}

func iso(t *testing.T, label string) []byte {
	t.Helper()
	img, err := seed.BuildISO(label, map[string][]byte{"meta-data": []byte("instance-id: i-1\n")})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func head(b []byte) []byte { return b[:min(len(b), HeadBytes)] }

func TestRecognise(t *testing.T) {
	t.Parallel()
	mbr := make([]byte, 1<<20)
	mbr[510], mbr[511] = 0x55, 0xAA
	gpt := make([]byte, 1<<20)
	copy(gpt[512:], "EFI PART")
	upper := iso(t, "CIDATA")
	for _, tc := range []struct {
		name   string
		data   []byte
		size   int64
		kind   Kind
		format string
		why    string
	}{
		{"nocloud seed", iso(t, "cidata"), 0, Seed, "nocloud", ""},
		{"nocloud seed labelled in capitals", upper, 0, Seed, "nocloud", ""},
		{"configdrive seed", iso(t, "config-2"), 0, Seed, "configdrive", ""},
		{"installer ISO", iso(t, "debian-12"), 0, Other, "", `labelled "debian-12"`},
		{"qcow2", qcow2(""), 1 << 30, Image, "qcow2", ""},
		{"qcow2 overlay", qcow2("/var/lib/libvirt/images/base.qcow2"), 1 << 30, Other, "", "backing file"},
		{"raw disk with an MBR", mbr, 0, Image, "raw", ""},
		{"raw disk with GPT", gpt, 8 << 30, Image, "raw", ""},
		{"blank disk", make([]byte, 1<<20), 0, Other, "", "not a recognised disk image"},
		{"empty volume", nil, 0, Other, "", "empty"},
		{"VMDK", append([]byte("KDMV"), make([]byte, 1020)...), 0, Other, "", "VMDK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			size := tc.size
			if size == 0 {
				size = int64(len(tc.data))
			}
			got := Recognise(head(tc.data), size)
			if got.Kind != tc.kind || got.Format != tc.format || !strings.Contains(got.Why, tc.why) {
				t.Errorf("Recognise = %+v, want kind %d, format %q, why containing %q", got, tc.kind, tc.format, tc.why)
			}
		})
	}
}

// A head cut short of the primary volume descriptor is not a seed, and a
// descriptor of another type at sector 16 is not read as a label.
func TestRecognise_partialISO(t *testing.T) {
	t.Parallel()
	img := iso(t, "cidata")
	if got := Recognise(img[:pvdOffset+100], int64(len(img))); got.Kind == Seed {
		t.Errorf("a head without the whole descriptor was taken for a seed: %+v", got)
	}
	img[pvdOffset] = 2 // supplementary, not primary
	if got := Recognise(head(img), int64(len(img))); got.Kind == Seed {
		t.Errorf("a supplementary descriptor was taken for the primary one: %+v", got)
	}
}
