package image

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os/exec"
	"runtime"
	"testing"

	"github.com/ulikunitz/xz"
)

// xzWith compresses b with the given writer settings.
func xzWith(t testing.TB, b []byte, cfg xz.WriterConfig) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := cfg.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// setXZDict rewrites the LZMA2 dictionary property of the first block
// header of an xz file (and the header's CRC32), as a hostile file would.
func setXZDict(t testing.TB, x []byte, prop byte) []byte {
	t.Helper()
	x = append([]byte(nil), x...)
	h := x[12:]
	size := (int(h[0]) + 1) * 4
	pos := 2
	for _, bit := range []byte{0x40, 0x80} {
		if h[1]&bit != 0 {
			_, n := binary.Uvarint(h[pos:])
			pos += n
		}
	}
	if h[pos] != 0x21 || h[pos+1] != 1 {
		t.Fatalf("first filter of the test file is %#x, not LZMA2", h[pos])
	}
	h[pos+2] = prop
	binary.LittleEndian.PutUint32(h[size-4:], crc32.ChecksumIEEE(h[:size-4]))
	return x
}

// heapGrowth returns the bytes f allocates on the heap.
func heapGrowth(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestXZDictionaryBombRefused(t *testing.T) {
	data := bytes.Repeat([]byte("a hostile image "), 1<<16)
	bomb := setXZDict(t, xzBytes(t, data), 40) // 4 GiB - 1

	var err error
	grew := heapGrowth(func() {
		_, err = unpack(bufio.NewReader(bytes.NewReader(bomb)), pathDir(t.TempDir()), "x.*.part", Limits{})
	})
	errContains(t, err, "decompressing xz data", "4.0 GiB LZMA2 dictionary", "more than the 256 MiB allowed")
	if grew > 64<<20 {
		t.Errorf("refusing the header allocated %d MiB", grew>>20)
	}

	// Just over the bound is refused too; within it the file decodes.
	over := setXZDict(t, xzBytes(t, data), 33) // 384 MiB
	_, err = unpack(bufio.NewReader(bytes.NewReader(over)), pathDir(t.TempDir()), "x.*.part", Limits{})
	errContains(t, err, "384 MiB LZMA2 dictionary")
	got, err := io.ReadAll(newXZReader(bytes.NewReader(setXZDict(t, xzBytes(t, data), 22)), MaxXZDictionary)) // 4 MiB
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("4 MiB dictionary: %d bytes, %v", len(got), err)
	}
}

// desyncXZ builds the file of the second review: a valid one-block xz
// file of data whose first LZMA2 chunk declares more packed bytes than
// its data uses, hiding in the surplus what the decoder reads once it
// stops at the real end of the chunk: an end-of-chunks byte, the block's
// padding and check, and a second block header asking for a 4 GiB
// dictionary. A guard that skips chunks by their declared size never sees
// that header.
func desyncXZ(t testing.TB, data []byte) []byte {
	t.Helper()
	x := xzWith(t, data, xz.WriterConfig{CheckSum: xz.CRC32})
	hlen := (int(x[12]) + 1) * 4
	c := 12 + hlen // first chunk header
	if x[c] < 0xe0 {
		t.Fatalf("first chunk control %#x is not an LZMA chunk with a dictionary reset", x[c])
	}
	packed := int(binary.BigEndian.Uint16(x[c+3:c+5])) + 1
	if x[c+6+packed] != 0 {
		t.Fatal("the test data takes more than one chunk")
	}
	// What the decoder reads after the real chunk data.
	hidden := []byte{0}
	comp := 6 + packed + 1
	hidden = append(hidden, make([]byte, (4-(hlen+comp)%4)%4)...)
	hidden = binary.LittleEndian.AppendUint32(hidden, crc32.ChecksumIEEE(data))
	bombHdr := []byte{0x02, 0x00, 0x21, 0x01, 40, 0, 0, 0}
	bombHdr = binary.LittleEndian.AppendUint32(bombHdr, crc32.ChecksumIEEE(bombHdr))
	hidden = append(hidden, bombHdr...)
	var out []byte
	out = append(out, x[:c+6+packed]...)
	binary.BigEndian.PutUint16(out[c+3:c+5], uint16(packed+len(hidden)-1))
	out = append(out, hidden...)
	// Where the declared size ends: an end of chunks, and the rest of the
	// original file after its first block's data.
	return append(out, x[c+6+packed:]...)
}

// TestXZChunkDesyncRefused: a chunk the decoder stops early in is refused,
// and the header hidden in its surplus never reaches an allocation.
func TestXZChunkDesyncRefused(t *testing.T) {
	data := bytes.Repeat([]byte("a small image "), 64)
	bomb := desyncXZ(t, data)
	if len(bomb) > 600 {
		t.Fatalf("test file is %d bytes", len(bomb))
	}
	var err error
	grew := heapGrowth(func() {
		_, err = unpack(bufio.NewReader(bytes.NewReader(bomb)), pathDir(t.TempDir()), "x.*.part", Limits{})
	})
	if grew > 64<<20 {
		t.Errorf("decoding a %d-byte file allocated %d MiB", len(bomb), grew>>20)
	}
	errContains(t, err, "decompressing xz data", "xz data is malformed", "unused")
}

// TestXZTrailingDataRefused: after the last stream come only whole words
// of stream padding.
func TestXZTrailingDataRefused(t *testing.T) {
	data := []byte("disk image bytes")
	x := xzBytes(t, data)
	for name, tail := range map[string][]byte{
		"garbage":       []byte("trailing garbage"),
		"short padding": {0, 0, 0},
		"odd padding":   {0, 0, 0, 0, 0},
		"after padding": {0, 0, 0, 0, 1, 2, 3, 4},
	} {
		_, err := io.ReadAll(newXZReader(bytes.NewReader(append(append([]byte(nil), x...), tail...)), MaxXZDictionary))
		if err == nil {
			t.Errorf("%s after the stream: accepted", name)
		}
	}
	got, err := io.ReadAll(newXZReader(bytes.NewReader(append(append([]byte(nil), x...), 0, 0, 0, 0, 0, 0, 0, 0)), MaxXZDictionary))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("stream padding: %q, %v", got, err)
	}
}

// TestXZRefusesCorruption: the checks the decoder no longer does for us.
func TestXZRefusesCorruption(t *testing.T) {
	data := bytes.Repeat([]byte("corrupt me "), 3000)
	x := xzWith(t, data, xz.WriterConfig{CheckSum: xz.SHA256})
	for name, at := range map[string]int{
		"stream header flags": 7,
		"block header":        13,
		"check":               len(x) - 12 - 8 - 9,
		"index":               len(x) - 12 - 6,
		"footer":              len(x) - 3,
	} {
		bad := append([]byte(nil), x...)
		bad[at] ^= 0x10
		if _, err := io.ReadAll(newXZReader(bytes.NewReader(bad), MaxXZDictionary)); err == nil {
			t.Errorf("flipping a bit of the %s (byte %d): accepted", name, at)
		}
	}
}

// TestXZValidFiles runs the decoder over the shapes of xz file that
// encoders write (several blocks, stored chunks, every check, several
// streams with padding) and asserts it decodes them all.
func TestXZValidFiles(t *testing.T) {
	text := bytes.Repeat([]byte("compressible text of a disk image\n"), 10000)
	noise := randomish(150000, 7) // stored as uncompressed LZMA2 chunks
	mixed := append(append(append([]byte(nil), text...), noise...), text...)
	cases := map[string][]byte{
		"crc32":  xzWith(t, mixed, xz.WriterConfig{CheckSum: xz.CRC32}),
		"crc64":  xzWith(t, mixed, xz.WriterConfig{CheckSum: xz.CRC64}),
		"sha256": xzWith(t, mixed, xz.WriterConfig{CheckSum: xz.SHA256}),
		"none":   xzWith(t, mixed, xz.WriterConfig{NoCheckSum: true}),
		"blocks": xzWith(t, mixed, xz.WriterConfig{BlockSize: 100000}),
		"empty":  xzWith(t, nil, xz.WriterConfig{}),
	}
	want := map[string][]byte{}
	for k := range cases {
		want[k] = mixed
	}
	want["empty"] = nil
	two := append(append(append([]byte(nil), cases["blocks"]...), 0, 0, 0, 0, 0, 0, 0, 0), cases["crc32"]...)
	cases["streams"], want["streams"] = two, append(append([]byte(nil), mixed...), mixed...)
	// xz(1), where installed, as the encoder vendors use: its presets,
	// checks, and the multi-threaded mode that records sizes in block
	// headers.
	if _, err := exec.LookPath("xz"); err == nil {
		for name, args := range map[string][]string{
			"xz -0": {"-0"}, "xz -6 crc32": {"-6", "--check=crc32"}, "xz -9e sha256": {"-9e", "--check=sha256"},
			"xz -T2 blocks": {"-T2", "--block-size=100000"}, "xz none": {"--check=none"},
		} {
			cmd := exec.Command("xz", append([]string{"-c"}, args...)...)
			cmd.Stdin = bytes.NewReader(mixed)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			cases[name], want[name] = out, mixed
		}
	} else {
		t.Log("xz(1) not installed: only this package's encoder's files are tried")
	}
	for name, x := range cases {
		r := newXZReader(iotestOneByte(x, name == "blocks"), MaxXZDictionary)
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want[name]) {
			t.Errorf("%s: %d bytes (want %d), %v", name, len(got), len(want[name]), err)
		}
	}
}

// FuzzXZ is differential: the bytes go to this package's decoder (with a
// 1 MiB dictionary bound) and, where it accepts them, to
// github.com/ulikunitz/xz's unbounded reader, which must read the same
// structure: give the same output and allocate no more than the bound
// allows. Whatever the input, this package's decoder stays within the
// bound.
func FuzzXZ(f *testing.F) {
	const limit = 1 << 20
	data := bytes.Repeat([]byte("fuzz "), 2000)
	f.Add(xzBytes(f, data))
	f.Add(xzWith(f, append(append([]byte(nil), data...), randomish(70000, 3)...), xz.WriterConfig{BlockSize: 4096, CheckSum: xz.CRC32}))
	f.Add(desyncXZ(f, data[:500]))
	f.Add(setXZDict(f, xzBytes(f, data), 21)) // 3 MiB: over the bound
	f.Fuzz(func(t *testing.T, in []byte) {
		var (
			got []byte
			err error
		)
		grew := heapGrowth(func() {
			got, err = io.ReadAll(io.LimitReader(newXZReader(bytes.NewReader(in), limit), 8<<20))
		})
		if grew > 4*limit+uint64(len(got))*4+(8<<20) {
			t.Fatalf("decoding %d bytes allocated %d MiB", len(in), grew>>20)
		}
		if err != nil || len(got) == 8<<20 {
			return
		}
		var want []byte
		grew = heapGrowth(func() {
			var r io.Reader
			r, err = xz.NewReader(bytes.NewReader(in))
			if err == nil {
				want, err = io.ReadAll(r)
			}
		})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("accepted %d bytes (%d out) that github.com/ulikunitz/xz reads as %d bytes, %v", len(in), len(got), len(want), err)
		}
		if grew > 4*limit+uint64(len(want))*4+(8<<20) {
			t.Fatalf("accepted %d bytes for which github.com/ulikunitz/xz allocates %d MiB", len(in), grew>>20)
		}
	})
}

// iotestOneByte reads b one byte at a time when slow, else in one piece.
func iotestOneByte(b []byte, slow bool) io.Reader {
	if slow {
		return oneByteReader{bytes.NewReader(b)}
	}
	return bytes.NewReader(b)
}

type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}
