package virt

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"
)

// TestUploadSparseSendsOnlyData: what put receives, laid over zeros, is the
// image; long zero stretches are not sent, short gaps are; a short source
// is an error.
func TestUploadSparseSendsOnlyData(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	img := make([]byte, 40<<20+1234) // spans three buffers, ends mid-block
	fill := func(off, n int) { rng.Read(img[off : off+n]) }
	fill(0, 512)            // a boot sector
	fill(8<<10, 4<<10)      // 7.5 KiB gap: sent as data
	fill(5<<20, 3<<20)      // after a 5 MiB hole
	fill(16<<20-4096, 8192) // across the first buffer's end
	fill(len(img)-100, 100) // the partial last block
	img[30<<20] = 1         // one byte alone
	var sent [][2]int64
	got := make([]byte, len(img))
	n, err := uploadSparse(bytes.NewReader(img), int64(len(img)), func(off int64, data []byte) error {
		sent = append(sent, [2]int64{off, int64(len(data))})
		copy(got[off:], data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, img) {
		t.Fatal("the runs laid over zeros are not the image")
	}
	if n > 5<<20 {
		t.Errorf("sent %d bytes of a %d-byte image holding about 3.1 MiB of data", n, len(img))
	}
	if sent[0] != [2]int64{0, 12 << 10} {
		t.Errorf("first run %v, want the boot sector and the block 7.5 KiB after it as one run of 12 KiB", sent[0])
	}
	if len(sent) != 6 {
		t.Errorf("%d runs, want 6 (boot, 3 MiB, two halves of the buffer-crossing run, the lone byte, the tail): %v", len(sent), sent)
	}

	if _, err := uploadSparse(bytes.NewReader(img[:1000]), 4096, func(int64, []byte) error { return nil }); !errors.Is(err, errShortImage) {
		t.Errorf("short source: %v, want errShortImage", err)
	}
	allZero := make([]byte, 3<<20)
	if n, err := uploadSparse(bytes.NewReader(allZero), int64(len(allZero)), func(int64, []byte) error {
		t.Error("put called for an all-zero image")
		return nil
	}); err != nil || n != 0 {
		t.Errorf("all zeros: %d sent, %v", n, err)
	}
}
