package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Compression kinds, as they appear in Result.Compression (possibly with a
// "+tar" suffix).
const (
	compXZ    = "xz"
	compGzip  = "gzip"
	compZstd  = "zstd"
	compBzip2 = "bzip2"
	compTar   = "tar"
)

// zstdMaxWindow bounds the zstd window (and so the decoder's memory); it is
// the limit the zstd command applies by default without --long.
const zstdMaxWindow = 1 << 27

// streamBufSize is the size of the read buffers of the pipeline.
const streamBufSize = 256 << 10

// diskExtensions are the file name extensions that mark the disk image among
// several files of a tar archive.
var diskExtensions = []string{".raw", ".img", ".qcow2"}

// detectCompression names the compression whose magic bytes start b, or "".
func detectCompression(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}):
		return compXZ
	case bytes.HasPrefix(b, []byte{0x1F, 0x8B}):
		return compGzip
	case bytes.HasPrefix(b, []byte{0x28, 0xB5, 0x2F, 0xFD}):
		return compZstd
	case len(b) >= 4 && string(b[:3]) == "BZh" && '1' <= b[3] && b[3] <= '9':
		return compBzip2
	}
	return ""
}

// isTar reports whether b starts with a tar header: POSIX "ustar\x0000" or
// old GNU "ustar  \x00" magic at offset 257.
func isTar(b []byte) bool {
	if len(b) < 265 {
		return false
	}
	m := string(b[257:265])
	return m == "ustar\x0000" || m == "ustar  \x00"
}

// openDecompressor returns a reader of the data decompressed from r.
func openDecompressor(kind string, r io.Reader) (io.ReadCloser, error) {
	switch kind {
	case compXZ:
		return io.NopCloser(newXZReader(r, MaxXZDictionary)), nil
	case compGzip:
		return gzip.NewReader(r)
	case compZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case compBzip2:
		return io.NopCloser(bzip2.NewReader(r)), nil
	}
	return nil, fmt.Errorf("unknown compression %q", kind)
}

// unpacked is the disk image a source unpacked to.
type unpacked struct {
	// path is the temporary file holding the image.
	path string
	// compression is "", a compression kind, "tar" or "<kind>+tar".
	compression string
	// member is the name of the tar member that held the image.
	member string
	// sum is the SHA-256 of the file at path, computed as it was written.
	sum string
}

// decompressError marks an error of the data (not of reading the source).
type decompressError struct {
	kind string
	err  error
}

func (e *decompressError) Error() string {
	if e.kind == "" {
		return e.err.Error()
	}
	return fmt.Sprintf("decompressing %s data: %v", e.kind, e.err)
}

func (e *decompressError) Unwrap() error { return e.err }

// unpack reads src (the source bytes), decompresses it when it starts with
// the magic bytes of a known compression, takes the disk image out of a tar
// archive when the (decompressed) data is one, and writes the image to a new
// temporary file in dir named after pattern (see os.CreateTemp), within
// lim: past a limit it stops writing, removes what it wrote and returns an
// error wrapping ErrLimit. It reads the
// decompressed stream to its end (so its integrity checks run) but may leave
// bytes of src unread. On error no temporary file is left.
func unpack(src *bufio.Reader, dir fileDir, pattern string, lim Limits) (u unpacked, err error) {
	head, _ := src.Peek(6)
	kind := detectCompression(head)
	in := &counter{r: src}
	var r io.Reader = in
	if kind != "" {
		d, err := openDecompressor(kind, in)
		if err != nil {
			return unpacked{}, &decompressError{kind, err}
		}
		defer d.Close()
		r = d
	}
	br := bufio.NewReaderSize(newLimiter(readTagger{r}, in, lim), streamBufSize)
	head, _ = br.Peek(512)
	u.compression = kind
	if isTar(head) {
		u.compression = strings.TrimPrefix(kind+"+"+compTar, "+")
		u.path, u.sum, u.member, err = extractTar(br, dir, pattern, lim.withDefaults().MaxSize)
	} else {
		u.path, u.sum, err = writeTemp(br, dir, pattern)
	}
	if err == nil {
		// Read what follows (tar padding, a last block) so that the
		// decompressor verifies its checksums.
		_, err = io.Copy(io.Discard, br)
		if err != nil && u.path != "" {
			_ = dir.Remove(u.path)
		}
	}
	if err != nil {
		return unpacked{}, classifyUnpackError(kind, err)
	}
	return u, nil
}

// readError marks an error that came from reading the (decompressed) data
// rather than from writing the temporary file.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// readTagger tags the errors of r as readErrors.
type readTagger struct{ r io.Reader }

func (t readTagger) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		err = &readError{err}
	}
	return n, err
}

// classifyUnpackError turns an error of unpack into a decompressError (the
// data is bad or its source failed), an ErrUnsupportedImage error, or an
// error writing the cache directory.
func classifyUnpackError(kind string, err error) error {
	var re *readError
	switch {
	case errors.Is(err, ErrUnsupportedImage), errors.Is(err, ErrLimit):
		return err
	case errors.As(err, &re):
		return &decompressError{kind, err}
	}
	return fmt.Errorf("writing image to the cache directory: %w", err)
}

// extractTar writes the disk image held by the tar archive read from r to a
// temporary file: the archive's only regular file or, when it has several,
// the only one whose name ends in a disk image extension. It stops at the
// second such file, before writing it: the disk image is ambiguous. Sparse
// members (whose holes would be written out, and uploaded, in full) and
// members declaring more than maxSize bytes are refused before a byte of
// them is written. It returns the file's path and SHA-256 (see writeTemp)
// and the member's name.
func extractTar(r io.Reader, dir fileDir, pattern string, maxSize int64) (path, sum, member string, err error) {
	type kept struct{ name, path, sum string }
	var (
		tr      = tar.NewReader(r)
		regular []string
		files   []kept
		disks   []kept
	)
	defer func() {
		for _, f := range files {
			if f.path != path || err != nil {
				_ = dir.Remove(f.path)
			}
		}
	}()
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", "", "", &readError{fmt.Errorf("reading tar archive: %w", err)}
		}
		if isSparse(hdr) {
			return "", "", "", unsupported("is a tar archive whose member %q is a sparse file; sparse members are "+
				"refused (their holes would be written and uploaded in full)", hdr.Name)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		if hdr.Size > maxSize {
			return "", "", "", fmt.Errorf("%w: tar member %q declares %s, more than %s",
				ErrLimit, hdr.Name, byteSize(hdr.Size), byteSize(maxSize))
		}
		regular = append(regular, hdr.Name)
		disk := hasDiskExtension(hdr.Name)
		if disk && len(disks) == 1 {
			return "", "", "", unsupported("is a tar archive of at least %d files of which at least 2 end in %s, "+
				"so the disk image is ambiguous; it holds %s", len(regular), strings.Join(diskExtensions, ", "),
				listNames(regular, 10))
		}
		// The first file may be the only one; later ones can only be
		// chosen by their extension. Others are skipped unread.
		if len(regular) == 1 || disk {
			p, h, err := writeTemp(readTagger{tr}, dir, pattern)
			if err != nil {
				return "", "", "", fmt.Errorf("extracting %q from tar archive: %w", hdr.Name, err)
			}
			files = append(files, kept{hdr.Name, p, h})
			if disk {
				disks = append(disks, kept{hdr.Name, p, h})
			}
		}
	}
	switch {
	case len(regular) == 0:
		return "", "", "", unsupported("is a tar archive holding no regular file")
	case len(regular) == 1:
		return files[0].path, files[0].sum, files[0].name, nil
	case len(disks) == 1:
		return disks[0].path, disks[0].sum, disks[0].name, nil
	}
	return "", "", "", unsupported("is a tar archive of %d files of which none end in %s, so the disk image is ambiguous; it holds %s",
		len(regular), strings.Join(diskExtensions, ", "), listNames(regular, 10))
}

// isSparse reports whether a tar member is a sparse file: GNU type 'S', or
// the PAX sparse formats (GNU.sparse.* records), which archive/tar expands.
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// hasDiskExtension reports whether name ends in a disk image extension.
func hasDiskExtension(name string) bool {
	low := strings.ToLower(name)
	for _, ext := range diskExtensions {
		if strings.HasSuffix(low, ext) {
			return true
		}
	}
	return false
}

// writeTemp copies r to a new temporary file in dir, leaving holes for
// blocks of zeros, and returns its name and the SHA-256 (hex) of what it
// wrote, holes included, computed on the way (the cache records it, and
// checks it when the file is read back for an upload). On error the file is
// removed. It does not sync the file: that waits until the transfer is over
// (syncing gigabytes may take longer than the stall timeout).
func writeTemp(r io.Reader, dir fileDir, pattern string) (path, sum string, err error) {
	f, err := dir.CreateTemp(pattern)
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = dir.Remove(f.Name())
		}
	}()
	w := newSparseWriter(f)
	h := sha256.New()
	// Hide io.WriterTo of r (tar.Reader has one) so the copy goes through
	// the sparse writer's buffer.
	if _, err = io.CopyBuffer(io.MultiWriter(h, w), struct{ io.Reader }{r}, make([]byte, 64<<10)); err != nil {
		return "", "", err
	}
	if err = w.Close(); err != nil {
		return "", "", err
	}
	if err = f.Close(); err != nil {
		return "", "", err
	}
	return f.Name(), hex.EncodeToString(h.Sum(nil)), nil
}

// sparseBlock is the granularity at which sparseWriter detects zeros; it
// matches the block size of common file systems.
const sparseBlock = 4096

// zeroBlock is a block of zeros to compare with.
var zeroBlock [sparseBlock]byte

// sparseWriter writes a file sequentially but skips blocks of zeros, leaving
// holes, so that raw images (mostly empty space) take little room on disk.
// Close sets the file's final length.
type sparseWriter struct {
	f   *os.File
	buf []byte
	off int64 // file offset of buf[0]
}

// newSparseWriter returns a sparseWriter writing f from offset 0.
func newSparseWriter(f *os.File) *sparseWriter {
	return &sparseWriter{f: f, buf: make([]byte, 0, 256*sparseBlock)}
}

// Write buffers p and writes out full buffers.
func (w *sparseWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		p = p[k:]
		n += k
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// flush writes the non-zero blocks of the buffer at their offsets.
func (w *sparseWriter) flush() error {
	b := w.buf
	for i := 0; i < len(b); {
		j := min(i+sparseBlock, len(b))
		if bytes.Equal(b[i:j], zeroBlock[:j-i]) {
			i = j
			continue
		}
		for j < len(b) {
			e := min(j+sparseBlock, len(b))
			if bytes.Equal(b[j:e], zeroBlock[:e-j]) {
				break
			}
			j = e
		}
		if _, err := w.f.WriteAt(b[i:j], w.off+int64(i)); err != nil {
			return err
		}
		i = j
	}
	w.off += int64(len(b))
	w.buf = w.buf[:0]
	return nil
}

// Close flushes the buffer and sets the file's length (a trailing hole is
// not otherwise recorded). It does not close the file.
func (w *sparseWriter) Close() error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.f.Truncate(w.off)
}
