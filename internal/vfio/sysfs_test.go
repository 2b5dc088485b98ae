package vfio

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio/vfiotest"
)

// sysfsTree is a host's /sys read the way the provider reads a host's files.
type sysfsTree = vfiotest.Sysfs

// resourceFile writes a non-bridge function's sysfs resource file as the
// kernel prints it: 13 lines (six BARs, the ROM, six SR-IOV BARs) of
// "0x%016llx 0x%016llx 0x%016llx", unused lines all zero.
func resourceFile(lines map[int][3]uint64) *fstest.MapFile {
	var b strings.Builder
	for i := 0; i < 13; i++ {
		l := lines[i]
		b.WriteString(hex16(l[0]) + " " + hex16(l[1]) + " " + hex16(l[2]) + "\n")
	}
	return &fstest.MapFile{Data: []byte(b.String()), Mode: 0o444}
}

func hex16(v uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return "0x" + string(b[:])
}

// Flags as a real host's kernel prints them: IORESOURCE_SIZEALIGN (0x40000)
// and IORESOURCE_MEM, with IORESOURCE_PREFETCH and IORESOURCE_MEM_64 and
// the BAR's own type bits (0xc: 64-bit prefetchable) where they apply.
const (
	flagsMem32      = 0x40200
	flagsMem64Pref  = 0x14220c
	flagsROM        = 0x46200
	flagsMem32Pref  = 0x42208
	sizeGiB         = uint64(1) << 30
	sizeMiB         = uint64(1) << 20
	h100Addr        = "0000:c1:00.0"
	rtxAddr         = "0000:01:00.0"
	rtxAudioAddr    = "0000:01:00.1"
	twoGPUFirstAddr = "0000:1b:00.0"
	twoGPUOtherAddr = "0000:9a:00.0"
)

// h100Resource is an H100 PCIe 80GB's resource file: BAR0 16 MiB 32-bit
// non-prefetchable (registers), BAR1 128 GiB 64-bit prefetchable (the
// frame buffer), BAR3 32 MiB 64-bit prefetchable, a 512 KiB ROM. The
// A100 80GB has the same layout.
func h100Resource(bar0, bar1, bar3 uint64) *fstest.MapFile {
	return resourceFile(map[int][3]uint64{
		0: {bar0, bar0 + 16*sizeMiB - 1, flagsMem32},
		1: {bar1, bar1 + 128*sizeGiB - 1, flagsMem64Pref},
		3: {bar3, bar3 + 32*sizeMiB - 1, flagsMem64Pref},
		6: {bar0 + 16*sizeMiB, bar0 + 16*sizeMiB + 512<<10 - 1, flagsROM},
	})
}

func dev(addr, file string) string { return "sys/bus/pci/devices/" + addr + "/" + file }

// The hosts the readers are tested on, laid out as their /sys is.
var (
	// One H100 PCIe 80GB, a single function: no HDMI audio.
	hostH100 = sysfsTree{
		dev(h100Addr, "resource"):     h100Resource(0xe2000000, 0x20000000000, 0x22000000000),
		dev(h100Addr, "reset_method"): {Data: []byte("flr bus\n")},
		dev(h100Addr, "vendor"):       {Data: []byte("0x10de\n")},
	}
	// One A100 80GB PCIe (10de:20b5), single function, same BARs.
	hostA100 = sysfsTree{
		dev("0000:17:00.0", "resource"):     h100Resource(0xb9000000, 0x38000000000, 0x3a000000000),
		dev("0000:17:00.0", "reset_method"): {Data: []byte("flr bus\n")},
	}
	// Two H100s on two sockets.
	hostTwoGPUs = sysfsTree{
		dev(twoGPUFirstAddr, "resource"):     h100Resource(0xa2000000, 0x28000000000, 0x2a000000000),
		dev(twoGPUFirstAddr, "reset_method"): {Data: []byte("flr bus\n")},
		dev(twoGPUOtherAddr, "resource"):     h100Resource(0xd8000000, 0x60000000000, 0x62000000000),
		dev(twoGPUOtherAddr, "reset_method"): {Data: []byte("flr bus\n")},
	}
	// A workstation card with HDMI audio: BAR1 32 GiB (resizable BAR
	// enabled), no FLR on the VGA (bus reset only) and no reset method at
	// all on the audio function (its reset_method file is absent).
	hostWorkstation = sysfsTree{
		dev(rtxAddr, "resource"): resourceFile(map[int][3]uint64{
			0: {0xf0000000, 0xf0ffffff, flagsMem32},
			1: {0x7800000000, 0x7fffffffff, flagsMem64Pref},
			3: {0x8000000000, 0x8001ffffff, flagsMem64Pref},
			4: {0xe000, 0xe07f, 0x40101},
			6: {0xf1000000, 0xf107ffff, flagsROM},
		}),
		dev(rtxAddr, "reset_method"): {Data: []byte("bus\n")},
		dev(rtxAudioAddr, "resource"): resourceFile(map[int][3]uint64{
			0: {0xf1080000, 0xf1083fff, flagsMem32},
		}),
	}
)

func TestReadFunctionsH100(t *testing.T) {
	a := addr(t, h100Addr)
	got, err := ReadFunctions(context.Background(), hostH100, []Address{a})
	if err != nil {
		t.Fatal(err)
	}
	want := Function{
		BARs: []BAR{
			{Index: 0, Start: 0xe2000000, Size: 16 * sizeMiB},
			{Index: 1, Start: 0x20000000000, Size: 128 * sizeGiB, Is64: true, Prefetchable: true},
			{Index: 3, Start: 0x22000000000, Size: 32 * sizeMiB, Is64: true, Prefetchable: true},
		},
		ResetMethods: []string{"flr", "bus"},
	}
	if !reflect.DeepEqual(got[a], want) {
		t.Fatalf("H100:\n got %+v\nwant %+v", got[a], want)
	}
	if !got[a].HasFLR() {
		t.Fatal("the H100 has FLR")
	}
}

func TestReadFunctionsA100(t *testing.T) {
	a := addr(t, "0000:17:00.0")
	got, err := ReadFunctions(context.Background(), hostA100, []Address{a})
	if err != nil {
		t.Fatal(err)
	}
	bars := got[a].BARs
	if len(bars) != 3 || bars[1].Size != 128*sizeGiB || !bars[1].Is64 || !bars[1].Prefetchable || bars[0].Is64 || bars[0].Prefetchable {
		t.Fatalf("A100 80GB BARs: %+v", bars)
	}
}

func TestReadFunctionsWorkstationNoReset(t *testing.T) {
	vga, audio, gone := addr(t, rtxAddr), addr(t, rtxAudioAddr), addr(t, "0000:02:00.0")
	got, err := ReadFunctions(context.Background(), hostWorkstation, []Address{vga, audio, gone})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got[gone]; ok {
		t.Fatalf("a function the host does not have was read: %+v", got[gone])
	}
	if m := got[vga].ResetMethods; !reflect.DeepEqual(m, []string{"bus"}) || got[vga].HasFLR() {
		t.Fatalf("VGA reset methods %q, want bus alone (no FLR)", m)
	}
	if m := got[audio].ResetMethods; len(m) != 0 {
		t.Fatalf("the audio function has no reset_method file, read %q", m)
	}
	// BAR4 is I/O ports: listed, never 64-bit.
	if b := got[vga].BARs; len(b) != 4 || !b[3].IO || b[3].Index != 4 || b[3].Size != 0x80 {
		t.Fatalf("VGA BARs: %+v", b)
	}
	if b := got[audio].BARs; len(b) != 1 || b[0].Size != 16<<10 || b[0].Is64 {
		t.Fatalf("audio BARs: %+v", b)
	}
}

func TestParseResourceRefusesGarbage(t *testing.T) {
	for _, in := range []string{"0x1 0x2\n", "0xzz 0x0 0x200\n"} {
		if _, err := ParseResource([]byte(in)); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
	// The nested test host's VGA stand-in: 16 MiB 32-bit prefetchable,
	// a 4 KiB register BAR, and the ROM line ignored.
	bars, err := ParseResource([]byte("0x00000000fc000000 0x00000000fcffffff 0x0000000000042208\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n" +
		"0x00000000fe414000 0x00000000fe414fff 0x0000000000040200\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n" +
		"0x00000000000c0000 0x00000000000dffff 0x0000000000000212\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []BAR{{Index: 0, Start: 0xfc000000, Size: 16 * sizeMiB, Prefetchable: true}, {Index: 2, Start: 0xfe414000, Size: 4096}}
	if !reflect.DeepEqual(bars, want) {
		t.Fatalf("got %+v, want %+v", bars, want)
	}
}

func readBARs(t *testing.T, h sysfsTree, addrs ...string) map[Address][]BAR {
	t.Helper()
	var as []Address
	for _, s := range addrs {
		as = append(as, addr(t, s))
	}
	fns, err := ReadFunctions(context.Background(), h, as)
	if err != nil {
		t.Fatal(err)
	}
	out := map[Address][]BAR{}
	for a, f := range fns {
		out[a] = f.BARs
	}
	return out
}

func TestMMIOWindow(t *testing.T) {
	for _, tc := range []struct {
		name         string
		host         sysfsTree
		addrs        []string
		need         uint64
		minGiB, gGiB int
		fits         bool
	}{{
		// One H100: BAR1 (128 GiB) and BAR3 (32 MiB) share the root port's
		// prefetchable window: 128 GiB + 32 MiB, aligned to 128 GiB. That is
		// 129 GiB in whole GiB, and the firmware's aperture is a power of two:
		// 256 GiB. 128 is too small by the 32 MiB BAR. BAR0 is 32-bit.
		name: "H100", host: hostH100, addrs: []string{h100Addr},
		need: 128*sizeGiB + 32*sizeMiB, minGiB: 129, gGiB: 256,
	}, {
		name: "A100 80GB", host: hostA100, addrs: []string{"0000:17:00.0"},
		need: 128*sizeGiB + 32*sizeMiB, minGiB: 129, gGiB: 256,
	}, {
		// Two H100s: the first window ends at 128 GiB + 32 MiB, the second
		// must start on a 128 GiB boundary (256 GiB) and ends at 384 GiB +
		// 32 MiB: 385 GiB, so 512 GiB.
		name: "two H100s", host: hostTwoGPUs, addrs: []string{twoGPUFirstAddr, twoGPUOtherAddr},
		need: 384*sizeGiB + 32*sizeMiB, minGiB: 385, gGiB: 512,
	}, {
		// 32 GiB + 32 MiB no longer fits the default 32 GiB: 64. The audio
		// function has only a 32-bit BAR.
		name: "workstation card and its audio", host: hostWorkstation, addrs: []string{rtxAddr, rtxAudioAddr},
		need: 32*sizeGiB + 32*sizeMiB, minGiB: 33, gGiB: 64,
	}, {
		name: "audio alone: nothing 64-bit", host: hostWorkstation, addrs: []string{rtxAudioAddr},
		fits: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := MMIOWindow(readBARs(t, tc.host, tc.addrs...))
			if w.NeedBytes != tc.need || w.MinGiB != tc.minGiB || w.GiB != tc.gGiB || w.Fits() != tc.fits {
				t.Fatalf("need %s (%d), min %d GiB, window %d GiB, fits %v; want %s, %d, %d, %v (%s)",
					HumanBytes(w.NeedBytes), w.NeedBytes, w.MinGiB, w.GiB, w.Fits(), HumanBytes(tc.need), tc.minGiB, tc.gGiB, tc.fits, w)
			}
		})
	}
}

// A small BAR after a large one keeps the large one's alignment, whatever
// order the functions come in.
func TestMMIOWindowOrdersByAlignment(t *testing.T) {
	small := []BAR{{Index: 1, Size: 256 * sizeMiB, Is64: true, Prefetchable: true}}
	large := []BAR{{Index: 1, Size: 64 * sizeGiB, Is64: true, Prefetchable: true}}
	nonPref := []BAR{{Index: 0, Size: 64 * sizeGiB, Is64: true}} // below 4 GiB in a guest
	w := MMIOWindow(map[Address][]BAR{
		{Bus: 1}: small, {Bus: 2}: large, {Bus: 3}: nonPref,
	})
	if w.NeedBytes != 64*sizeGiB+256*sizeMiB || w.GiB != 128 || len(w.Functions) != 2 || w.Functions[0].Address.Bus != 2 {
		t.Fatalf("got %+v", w)
	}
	if got := HumanBytes(w.NeedBytes); got != "64 GiB + 256 MiB" {
		t.Fatalf("HumanBytes: %q", got)
	}
	// A span that is exactly a power of two gets the next one: OVMF needs
	// room beside the BAR (HeadroomGiB), measured with a 256 GiB BAR.
	if w := MMIOWindow(map[Address][]BAR{{Bus: 1}: {{Index: 2, Size: 256 * sizeGiB, Is64: true, Prefetchable: true}}}); w.MinGiB != 256 || w.GiB != 512 {
		t.Fatalf("one 256 GiB BAR: min %d GiB, window %d GiB; want 256 and 512", w.MinGiB, w.GiB)
	}
	// One GiB short of a power of two keeps it: the room is there.
	if w := MMIOWindow(map[Address][]BAR{{Bus: 1}: {{Index: 2, Size: 128 * sizeGiB, Is64: true, Prefetchable: true}, {Index: 4, Size: 64 * sizeGiB, Is64: true, Prefetchable: true}, {Index: 6, Size: 32 * sizeGiB, Is64: true, Prefetchable: true}, {Index: 8, Size: 16 * sizeGiB, Is64: true, Prefetchable: true}, {Index: 10, Size: 8 * sizeGiB, Is64: true, Prefetchable: true}}}); w.MinGiB != 248 || w.GiB != 256 {
		t.Fatalf("248 GiB of BARs: min %d GiB, window %d GiB; want 248 and 256", w.MinGiB, w.GiB)
	}
	// A BAR that is not a power of two (never on real hardware) is rounded up.
	if w := MMIOWindow(map[Address][]BAR{{Bus: 1}: {{Size: 3 * sizeGiB, Is64: true, Prefetchable: true}}}); w.NeedBytes != 4*sizeGiB {
		t.Fatalf("3 GiB BAR: %+v", w)
	}
}
