package virt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Raw images are mostly zeros (a 2 GiB cloud disk holds a few hundred MiB),
// and a raw volume written byte for byte allocates every zero. libvirt can
// take holes in a stream (VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM), but
// go-libvirt has no way to send one, so a raw image is uploaded as its data
// runs instead: each run by its own upload at its offset into the volume,
// which libvirt made sparse at its full size (allocation 0), so what is not
// written stays a hole.
const (
	// sparseBlock is the unit a run is made of: the filesystem's block, so a
	// zero block skipped is a block not allocated.
	sparseBlock = 4 << 10
	// sparseMinGap is the shortest zero gap worth a separate upload: a
	// shorter one is sent as data, which keeps the calls few on a disk whose
	// data and zeros alternate finely.
	sparseMinGap = 1 << 20
	// sparseBuffer bounds the memory: runs are found and sent a buffer at a
	// time (a run crossing a buffer's end is sent as two).
	sparseBuffer = 16 << 20
)

// errShortImage is a source that ended before the length it was said to have.
var errShortImage = errors.New("the image ended early")

// uploadSparse reads length bytes from r and hands each run of data, with
// zero gaps shorter than sparseMinGap inside it, to put with its offset;
// zero stretches of sparseMinGap or more are skipped. It returns the number
// of bytes it passed to put.
func uploadSparse(r io.Reader, length int64, put func(off int64, data []byte) error) (int64, error) {
	buf := make([]byte, sparseBuffer)
	zero := make([]byte, sparseBlock)
	var off, sent int64
	for off < length {
		n := int64(len(buf))
		if rest := length - off; rest < n {
			n = rest
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return sent, fmt.Errorf("%w: %d of %d bytes", errShortImage, off, length)
			}
			return sent, err
		}
		for _, run := range dataRuns(buf[:n], zero) {
			if err := put(off+int64(run[0]), buf[run[0]:run[1]]); err != nil {
				return sent, err
			}
			sent += int64(run[1] - run[0])
		}
		off += n
	}
	return sent, nil
}

// dataRuns lists b's runs of data as [start, end) byte ranges, block by
// block, merging runs whose zero gap is shorter than sparseMinGap.
func dataRuns(b, zero []byte) [][2]int {
	var runs [][2]int
	for i := 0; i < len(b); i += sparseBlock {
		end := min(i+sparseBlock, len(b))
		if bytes.Equal(b[i:end], zero[:end-i]) {
			continue
		}
		if k := len(runs) - 1; k >= 0 && i-runs[k][1] < sparseMinGap {
			runs[k][1] = end
			continue
		}
		runs = append(runs, [2]int{i, end})
	}
	return runs
}
