package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// rawTarHeader builds a 512-byte tar header by hand, for the kinds of
// member archive/tar does not write: GNU sparse, PAX sparse, base-256
// sizes. size is written in octal unless huge is set (then in base-256).
func rawTarHeader(name string, typeflag byte, size int64, huge bool, gnu func(h []byte)) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], "0000644\x00")
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	if huge {
		h[124] = 0x80
		for i, v := 0, size; i < 11; i, v = i+1, v>>8 {
			h[135-i] = byte(v)
		}
	} else {
		copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	}
	copy(h[136:148], fmt.Sprintf("%011o\x00", 1700000000))
	h[156] = typeflag
	copy(h[257:265], "ustar  \x00")
	if gnu != nil {
		gnu(h)
	}
	copy(h[148:156], "        ")
	sum := 0
	for _, b := range h {
		sum += int(b)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// pad512 pads b to a multiple of 512 bytes.
func pad512(b []byte) []byte {
	return append(b, make([]byte, (512-len(b)%512)%512)...)
}

// gnuSparseTar is a GNU sparse member of 512 stored bytes declaring a
// 1 GiB file: archive/tar expands it to 1 GiB of mostly zeros.
func gnuSparseTar() []byte {
	const declared = 1 << 30
	h := rawTarHeader("disk.raw", 'S', 512, false, func(h []byte) {
		copy(h[386:398], fmt.Sprintf("%011o\x00", declared-512)) // offset
		copy(h[398:410], fmt.Sprintf("%011o\x00", 512))          // bytes
		copy(h[483:495], fmt.Sprintf("%011o\x00", declared))     // real size
	})
	b := append(h, bytes.Repeat([]byte{0xEE}, 512)...)
	return append(b, make([]byte, 1024)...)
}

// paxSparseTar is a PAX sparse member (format 0.1) declaring 1 GiB.
func paxSparseTar() []byte {
	rec := func(k, v string) string {
		s := " " + k + "=" + v + "\n"
		n := len(s) + 1
		for len(fmt.Sprint(n))+len(s) != n {
			n++
		}
		return fmt.Sprint(n) + s
	}
	pax := rec("GNU.sparse.major", "0") + rec("GNU.sparse.minor", "1") +
		rec("GNU.sparse.size", fmt.Sprint(1<<30)) + rec("GNU.sparse.numblocks", "1") +
		rec("GNU.sparse.map", fmt.Sprintf("%d,512", 1<<30-512)) + rec("GNU.sparse.name", "disk.raw")
	b := rawTarHeader("PaxHeaders/disk.raw", 'x', int64(len(pax)), false, nil)
	b = append(b, pad512([]byte(pax))...)
	b = append(b, rawTarHeader("GNUSparseFile.0/disk.raw", '0', 512, false, nil)...)
	b = append(b, bytes.Repeat([]byte{0xEE}, 512)...)
	return append(b, make([]byte, 1024)...)
}

func TestTarSparseMembersRefused(t *testing.T) {
	for name, archive := range map[string][]byte{"gnu": gnuSparseTar(), "pax": paxSparseTar()} {
		for _, packed := range [][]byte{archive, zstdBytes(t, archive)} {
			dir := t.TempDir()
			_, err := unpack(bufio.NewReader(bytes.NewReader(packed)), pathDir(dir), "x.*.part", Limits{})
			if !errors.Is(err, ErrUnsupportedImage) {
				t.Fatalf("%s: error %v is not ErrUnsupportedImage", name, err)
			}
			errContains(t, err, `member "`, "is a sparse file")
			if n := dirBytes(t, dir); n != 0 {
				t.Errorf("%s: %d bytes left behind", name, n)
			}
		}
	}
}

func TestTarHugeDeclaredSizeRefused(t *testing.T) {
	// A base-256 size field declaring 1 PiB, with nothing behind it.
	b := append(rawTarHeader("disk.raw", '0', 1<<50, true, nil), make([]byte, 1024)...)
	dir := t.TempDir()
	_, err := unpack(bufio.NewReader(bytes.NewReader(b)), pathDir(dir), "x.*.part", Limits{})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("error %v does not wrap ErrLimit", err)
	}
	errContains(t, err, `tar member "disk.raw" declares 1048576 GiB, more than 64 GiB`)
	if n := dirBytes(t, dir); n != 0 {
		t.Errorf("%d bytes left behind", n)
	}
}

func TestTarStopsAtSecondDiskImage(t *testing.T) {
	first := makeRaw(1<<20, true)
	second := randomish(8<<20, 3)
	archive := tarBytes(t, tar.FormatPAX, tarFile{"a.img", first}, tarFile{"b.raw", second}, tarFile{"c.qcow2", first})
	in := &counter{r: bytes.NewReader(archive)}
	dir := t.TempDir()
	_, err := unpack(bufio.NewReader(in), pathDir(dir), "x.*.part", Limits{})
	errContains(t, err, "at least 2 end in", "ambiguous", `"a.img", "b.raw"`)
	if in.n > int64(len(first))+int64(len(second))/2 {
		t.Errorf("read %d bytes of the archive: the second disk image was read, not refused at its header", in.n)
	}
	if n := dirBytes(t, dir); n != 0 {
		t.Errorf("%d bytes left behind", n)
	}
	// A README next to one disk image still works.
	u, err := unpack(bufio.NewReader(bytes.NewReader(tarBytes(t, tar.FormatPAX,
		tarFile{"README", []byte("hi")}, tarFile{"a.img", first}))), pathDir(dir), "x.*.part", Limits{})
	if err != nil || u.member != "a.img" {
		t.Fatalf("member %q, %v", u.member, err)
	}
	assertFile(t, u.path, first)
}
