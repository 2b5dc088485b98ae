package image

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func inspectBytes(b []byte) (imageInfo, error) {
	return inspectImage(bytes.NewReader(b), int64(len(b)))
}

func TestInspectSynthetic(t *testing.T) {
	const gib = 1 << 30
	raw := makeRaw(1<<20, true)
	gpt := makeRaw(1<<20, false)
	copy(gpt[512:], "EFI PART")
	okCases := []struct {
		name   string
		b      []byte
		format string
		vsize  uint64
	}{
		{"qcow2 v3", makeQCOW2(10*gib, qcowOpts{}), FormatQCOW2, 10 * gib},
		{"qcow2 v2", makeQCOW2(3*gib+512, qcowOpts{version: 2}), FormatQCOW2, 3*gib + 512},
		{"raw mbr", raw, FormatRaw, 1 << 20},
		{"raw gpt", gpt, FormatRaw, 1 << 20},
	}
	for _, c := range okCases {
		t.Run(c.name, func(t *testing.T) {
			info, err := inspectBytes(c.b)
			if err != nil {
				t.Fatal(err)
			}
			if info.Format != c.format || info.VirtualSize != c.vsize || info.Size != int64(len(c.b)) {
				t.Fatalf("got %+v, want format %s, virtual size %d, size %d", info, c.format, c.vsize, len(c.b))
			}
		})
	}

	vmdkDesc := append([]byte("# Disk DescriptorFile\nversion=1\n"), make([]byte, 512)...)
	iso := makeRaw(64<<10, true) // hybrid ISOs carry an MBR too
	copy(iso[32769:], "CD001")
	vhdFixed := append(makeRaw(1<<20, true), make([]byte, 512)...)
	copy(vhdFixed[1<<20:], "conectix")
	vdi := make([]byte, 4096)
	copy(vdi, "<<< Oracle VM VirtualBox Disk Image >>>\n")
	copy(vdi[64:], []byte{0x7f, 0x10, 0xda, 0xbe})
	html := []byte("<!DOCTYPE html><html><body>moved</body></html>")
	noSig := makeRaw(1<<20, false)
	copy(noSig, "kohaku raw image without signature")
	badCases := []struct {
		name string
		b    []byte
		want string
	}{
		{"backing file", makeQCOW2(gib, qcowOpts{backing: "base-image.qcow2"}), `is a qcow2 image with a backing file ("base-image.qcow2")`},
		{"backing file v2", makeQCOW2(gib, qcowOpts{version: 2, backing: "/var/lib/base.img"}), `backing file ("/var/lib/base.img")`},
		{"external data bit", makeQCOW2(gib, qcowOpts{dataFileBit: true}), "is a qcow2 image with an external data file (incompatible feature bit 2)"},
		{"external data extension", makeQCOW2(gib, qcowOpts{dataFileExt: "data.raw"}), `is a qcow2 image with an external data file ("data.raw")`},
		{"external data extension v2", makeQCOW2(gib, qcowOpts{version: 2, dataFileExt: "d.raw"}), `external data file ("d.raw")`},
		{"aes", makeQCOW2(gib, qcowOpts{crypt: 1}), "is an encrypted qcow2 image (AES)"},
		{"luks", makeQCOW2(gib, qcowOpts{crypt: 2}), "is an encrypted qcow2 image (LUKS)"},
		{"corrupt", makeQCOW2(gib, qcowOpts{corrupt: true}), "marked corrupt"},
		{"qcow v1", func() []byte { b := makeQCOW2(gib, qcowOpts{}); b[7] = 1; return b }(), "qcow2 image of version 1"},
		{"vmdk sparse", append([]byte("KDMV"), make([]byte, 4096)...), "is a VMDK image; only qcow2 and raw disk images are accepted (convert it with qemu-img convert -O qcow2)"},
		{"vmdk descriptor", vmdkDesc, "is a VMDK image"},
		{"vdi", vdi, "is a VDI (VirtualBox) image"},
		{"vhdx", append([]byte("vhdxfile"), make([]byte, 4096)...), "is a VHDX image"},
		{"vhd dynamic", append([]byte("conectix"), make([]byte, 4096)...), "is a VHD image"},
		{"vhd fixed", vhdFixed, "is a VHD image (fixed, footer at the end)"},
		{"iso", iso, "is an ISO 9660 CD/DVD image"},
		{"raw without signature", noSig, "is not a recognised disk image (not qcow2, and no MBR boot signature or GPT header as a raw disk image has); it starts with bytes 6b 6f 68 61 6b 75 20 72 61 77 20 69 6d 61 67 65 (text \"kohaku raw image\")"},
		{"zeros", make([]byte, 1<<20), "it starts with bytes 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
		{"html", html, "looks like an HTML page"},
		{"raw odd size", makeRaw(1<<20+100, true), "is not a multiple of 512"},
		{"still compressed", append([]byte{0xFD, '7', 'z', 'X', 'Z', 0}, make([]byte, 100)...), "is xz-compressed data inside the image"},
		{"nested tar", tarBytes(t, 0, tarFile{"disk.raw", makeRaw(4096, true)}), "is a tar archive inside the image"},
		{"empty", nil, "is empty"},
	}
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := inspectBytes(c.b)
			errContains(t, err, c.want)
			if err != nil && !errors.Is(err, ErrUnsupportedImage) {
				t.Errorf("error %v does not match ErrUnsupportedImage", err)
			}
		})
	}
}

// TestInspectQemuImages checks the inspector against images made by
// qemu-img and friends (testdata/make-fixtures.sh).
func TestInspectQemuImages(t *testing.T) {
	dir := qemuFixtures(t)
	cases := []struct {
		file   string
		format string
		vsize  uint64
		want   string
	}{
		{file: "plain.qcow2", format: FormatQCOW2, vsize: 1 << 20},
		{file: "v2.qcow2", format: FormatQCOW2, vsize: 1 << 20},
		{file: "gpt.raw", format: FormatRaw, vsize: 4 << 20},
		{file: "mbr.raw", format: FormatRaw, vsize: 2 << 20},
		{file: "backing.qcow2", want: `backing file ("plain.qcow2")`},
		{file: "datafile.qcow2", want: "external data file"},
		{file: "luks-header.qcow2", want: "is an encrypted qcow2 image (LUKS)"},
		{file: "sparse.vmdk", want: "is a VMDK image"},
		{file: "flat.vmdk", want: "is a VMDK image"},
		{file: "x.vdi", want: "is a VDI"},
		{file: "x.vhdx", want: "is a VHDX image"},
		{file: "dynamic.vhd", want: "is a VHD image"},
		{file: "fixed.vhd", want: "is a VHD image"},
		{file: "x.qed", want: "is a QED image"},
		{file: "small.iso", want: "is an ISO 9660"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join(dir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			info, err := inspectImage(f, fi.Size())
			if c.want != "" {
				errContains(t, err, c.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.Format != c.format || info.VirtualSize != c.vsize {
				t.Fatalf("got %+v, want %s of %d bytes", info, c.format, c.vsize)
			}
		})
	}
}

// TestSyntheticQCOW2MatchesQemu checks that the images the tests build are
// what qemu-img takes them for, when it is installed.
func TestSyntheticQCOW2MatchesQemu(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img not installed")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		o    qcowOpts
		want string
	}{
		{"v3.qcow2", qcowOpts{}, `"virtual-size": 5368709120`},
		{"v2.qcow2", qcowOpts{version: 2}, `"compat": "0.10"`},
		{"backing.qcow2", qcowOpts{backing: "base.qcow2"}, `"backing-filename": "base.qcow2"`},
		{"datafile.qcow2", qcowOpts{dataFileBit: true, dataFileExt: "data.raw"}, `"data-file": "data.raw"`},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, makeQCOW2(5<<30, c.o), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(qemuImg, "info", "-U", "--output=json", p).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "Could not open") {
			t.Fatalf("qemu-img info %s: %v\n%s", c.name, err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("qemu-img info %s does not show %s:\n%s", c.name, c.want, out)
		}
	}
}

// TestRawWithOtherMagicRefused: a file that carries an MBR boot signature
// but starts with another format's magic is that format, which libvirt or
// QEMU might probe, not a raw disk.
func TestRawWithOtherMagicRefused(t *testing.T) {
	for magic, name := range map[string]string{
		"Bochs Virtual HD Image\x00": "Bochs",
		"OOOM\x00\x00\x00\x02":       "COW",
		"WithoutFreeSpace":           "Parallels",
		"WithouFreSpacExt":           "Parallels",
		"#!/bin/sh\n#V2.0 Format\n":  "cloop",
	} {
		img := makeRaw(1<<20, true)
		copy(img, magic)
		_, err := inspectImage(bytes.NewReader(img), int64(len(img)))
		if !errors.Is(err, ErrUnsupportedImage) {
			t.Fatalf("%s: error %v is not ErrUnsupportedImage", name, err)
		}
		errContains(t, err, "is a "+name)
	}
}
