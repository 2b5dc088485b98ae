package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// MaxXZDictionary bounds the LZMA2 dictionary an xz block may ask for. An
// LZMA2 decoder allocates its whole dictionary before it decodes a byte, so
// a few bytes of hostile header could otherwise claim 4 GiB of memory.
// xz -9 (the largest preset) uses 64 MiB.
const MaxXZDictionary = 256 << 20

// errXZStructure marks xz data that breaks the format.
var errXZStructure = errors.New("xz data is malformed")

// xzMalformed returns an error wrapping errXZStructure.
func xzMalformed(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errXZStructure}, a...)...)
}

// xzReader decodes an xz file: every stream, with stream padding, and
// nothing after the last one. It reads the container itself (stream
// headers, block headers, block padding and checks, index, footers) and
// hands each block's LZMA2 data to an lzma.Reader2 whose dictionary it
// sizes itself, so what a block header asks for is checked where the
// memory is allocated, and no byte the container hides can reach an
// allocation unchecked. (github.com/ulikunitz/xz's own reader allocates
// the larger of its configured and the declared dictionary, so it cannot
// be bounded from outside.)
//
// Under the LZMA2 decoder an lzma2Framer follows the chunks by their
// declared sizes; a block is refused unless the decoder and the framer
// agree on where every chunk and the block end, so a chunk whose packed
// bytes the decoder leaves unused is an error, not a new header.
type xzReader struct {
	r   io.Reader
	max int64
	err error

	streams  int        // streams begun
	inStream bool       // between a stream header and its footer
	flags    [2]byte    // stream flags of the current stream
	records  []xzRecord // blocks of the current stream
	blk      *xzBlock   // block being decoded, or nil
}

// xzRecord is a block as the index records it.
type xzRecord struct{ unpadded, uncompressed int64 }

// xzBlock is the state of one block being decoded.
type xzBlock struct {
	hdrLen     int64
	comp       int64 // declared compressed size, or -1
	uncomp     int64 // declared uncompressed size, or -1
	frame      *lzma2Framer
	dec        *lzma.Reader2
	check      hash.Hash // nil for no check
	checkSize  int
	n          int64 // bytes decoded
	dictionary int64
}

// newXZReader returns a reader of the data decoded from the xz file r,
// refusing blocks that ask for a dictionary over limit.
func newXZReader(r io.Reader, limit int64) *xzReader {
	return &xzReader{r: r, max: limit}
}

func (x *xzReader) Read(p []byte) (int, error) {
	for x.err == nil {
		if x.blk == nil {
			if err := x.next(); err != nil {
				x.err = err
				break
			}
			continue
		}
		if len(p) == 0 {
			return 0, nil
		}
		b := x.blk
		n, err := b.dec.Read(p)
		b.n += int64(n)
		if b.check != nil {
			b.check.Write(p[:n])
		}
		if err == nil && b.frame.err != nil {
			err = b.frame.err
		}
		switch {
		case errors.Is(err, io.EOF):
			if err := x.endBlock(); err != nil {
				x.err = err
				return n, err
			}
			x.blk = nil
		case err != nil:
			if b.frame.err != nil {
				err = b.frame.err
			}
			x.err = err
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
	return 0, x.err
}

// readFull reads len(p) bytes; an end of file before them is
// io.ErrUnexpectedEOF.
func (x *xzReader) readFull(p []byte) error {
	_, err := io.ReadFull(x.r, p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// next reads up to the next block and opens it, or reads the end of the
// file (io.EOF).
func (x *xzReader) next() error {
	for {
		if !x.inStream {
			var b [12]byte
			n, err := io.ReadFull(x.r, b[:4])
			switch {
			case n == 0 && err == io.EOF && x.streams > 0:
				return io.EOF
			case err == io.ErrUnexpectedEOF && x.streams > 0:
				return xzMalformed("%d bytes after the last stream", n)
			case err != nil:
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			case x.streams > 0 && bytes.Equal(b[:4], []byte{0, 0, 0, 0}):
				continue // stream padding
			}
			if err := x.readFull(b[4:]); err != nil {
				return err
			}
			if err := x.streamHeader(b[:]); err != nil {
				return err
			}
			continue
		}
		var b [1]byte
		if err := x.readFull(b[:]); err != nil {
			return err
		}
		if b[0] == 0 {
			if err := x.indexAndFooter(); err != nil {
				return err
			}
			continue
		}
		return x.openBlock(b[0])
	}
}

var xzMagic = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}

// streamHeader checks a stream header.
func (x *xzReader) streamHeader(b []byte) error {
	if !bytes.Equal(b[:6], xzMagic) {
		if x.streams > 0 {
			return xzMalformed("data after the last stream")
		}
		return xzMalformed("no xz stream header")
	}
	if crc32.ChecksumIEEE(b[6:8]) != binary.LittleEndian.Uint32(b[8:12]) {
		return xzMalformed("stream header CRC32 mismatch")
	}
	if b[6] != 0 || b[7]&0xf0 != 0 {
		return xzMalformed("unknown stream flags %#x %#x", b[6], b[7])
	}
	if _, _, err := newXZCheck(b[7]); err != nil {
		return err
	}
	x.streams++
	x.inStream = true
	x.flags = [2]byte{b[6], b[7]}
	x.records = x.records[:0]
	return nil
}

// newXZCheck returns the hash of a check type and its size.
func newXZCheck(flags byte) (hash.Hash, int, error) {
	switch flags & 0x0f {
	case 0x00:
		return nil, 0, nil
	case 0x01:
		return crc32.NewIEEE(), 4, nil
	case 0x04:
		return crc64.New(crc64.MakeTable(crc64.ECMA)), 8, nil
	case 0x0a:
		return sha256.New(), 32, nil
	}
	return nil, 0, unsupported("is an xz file with check type %#x, which is not supported", flags&0x0f)
}

// openBlock reads the block header whose first byte is size and starts
// decoding the block.
func (x *xzReader) openBlock(size byte) error {
	h := make([]byte, (int(size)+1)*4)
	h[0] = size
	if err := x.readFull(h[1:]); err != nil {
		return err
	}
	body := h[:len(h)-4]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(h[len(h)-4:]) {
		return xzMalformed("block header CRC32 mismatch")
	}
	flags := body[1]
	if flags&0x3c != 0 {
		return xzMalformed("reserved block flags set (%#x)", flags)
	}
	pos := 2
	next := func() (int64, bool) {
		v, n := binary.Uvarint(body[pos:])
		if n <= 0 || n > 9 || v > 1<<63-1 {
			return 0, false
		}
		pos += n
		return int64(v), true
	}
	b := &xzBlock{hdrLen: int64(len(h)), comp: -1, uncomp: -1}
	if flags&0x40 != 0 {
		v, ok := next()
		if !ok || v == 0 {
			return xzMalformed("bad compressed size in block header")
		}
		b.comp = v
	}
	if flags&0x80 != 0 {
		v, ok := next()
		if !ok {
			return xzMalformed("bad uncompressed size in block header")
		}
		b.uncomp = v
	}
	if flags&3 != 0 {
		return unsupported("is an xz file with a filter chain of %d filters; only LZMA2 alone is supported", flags&3+1)
	}
	id, ok := next()
	if !ok {
		return xzMalformed("bad filter ID in block header")
	}
	psize, ok := next()
	if !ok || psize > int64(len(body)-pos) {
		return xzMalformed("bad filter properties size in block header")
	}
	props := body[pos : pos+int(psize)]
	pos += int(psize)
	if id != 0x21 {
		return unsupported("is an xz file with filter %#x; only LZMA2 is supported", id)
	}
	if len(props) != 1 {
		return xzMalformed("LZMA2 filter properties of %d bytes", len(props))
	}
	for _, c := range body[pos:] {
		if c != 0 {
			return xzMalformed("non-zero block header padding")
		}
	}
	dict, err := lzma2Dict(props[0])
	if err != nil {
		return err
	}
	if dict > x.max {
		return fmt.Errorf("xz block asks for a %s LZMA2 dictionary, more than the %s allowed "+
			"(xz -9 uses 64 MiB); refusing it before allocating it", byteSize(dict), byteSize(x.max))
	}
	b.dictionary = max(dict, lzma.MinDictCap)
	if b.check, b.checkSize, err = newXZCheck(x.flags[1]); err != nil {
		return err
	}
	b.frame = &lzma2Framer{r: x.r}
	// The dictionary is sized here, from the header just checked, and
	// nothing the data says can make the decoder allocate another.
	b.dec, err = lzma.Reader2Config{DictCap: int(b.dictionary)}.NewReader2(b.frame)
	if err != nil {
		return fmt.Errorf("starting LZMA2 decoder: %w", err)
	}
	x.blk = b
	return nil
}

// endBlock checks that the decoder and the framer agree on the block's
// end, then reads the block padding and check.
func (x *xzReader) endBlock() error {
	b := x.blk
	f := b.frame
	switch {
	case f.err != nil:
		return f.err
	case !b.dec.EOS() || !f.ended:
		return xzMalformed("the LZMA2 decoder ended its data %d bytes into the block, inside a chunk "+
			"(unused packed bytes)", f.pos)
	case f.unpacked != b.n:
		return xzMalformed("LZMA2 chunks declare %d bytes, the decoder gave %d", f.unpacked, b.n)
	case b.comp >= 0 && b.comp != f.pos:
		return xzMalformed("block header declares %d compressed bytes, the block has %d", b.comp, f.pos)
	case b.uncomp >= 0 && b.uncomp != b.n:
		return xzMalformed("block header declares %d uncompressed bytes, the block has %d", b.uncomp, b.n)
	}
	tail := make([]byte, (4-(b.hdrLen+f.pos)%4)%4+int64(b.checkSize))
	if err := x.readFull(tail); err != nil {
		return err
	}
	pad := len(tail) - b.checkSize
	for _, c := range tail[:pad] {
		if c != 0 {
			return xzMalformed("non-zero block padding")
		}
	}
	if b.check != nil {
		sum := b.check.Sum(nil)
		if b.checkSize == 4 || b.checkSize == 8 { // CRCs are stored little-endian
			for i, j := 0, len(sum)-1; i < j; i, j = i+1, j-1 {
				sum[i], sum[j] = sum[j], sum[i]
			}
		}
		if !bytes.Equal(sum, tail[pad:]) {
			return xzMalformed("block check mismatch")
		}
	}
	x.records = append(x.records, xzRecord{b.hdrLen + f.pos + int64(b.checkSize), b.n})
	return nil
}

// indexAndFooter reads the index (its indicator byte already read) and
// compares it with the blocks read, then the stream footer.
func (x *xzReader) indexAndFooter() error {
	crc := crc32.NewIEEE()
	crc.Write([]byte{0})
	size := int64(1)
	varint := func() (int64, error) {
		var v uint64
		for i := 0; ; i++ {
			var b [1]byte
			if err := x.readFull(b[:]); err != nil {
				return 0, err
			}
			crc.Write(b[:])
			size++
			if i == 9 || i > 0 && b[0] == 0 {
				return 0, xzMalformed("bad integer in index")
			}
			v |= uint64(b[0]&0x7f) << (7 * i)
			if b[0]&0x80 == 0 {
				if v > 1<<63-1 {
					return 0, xzMalformed("integer in index too large")
				}
				return int64(v), nil
			}
		}
	}
	n, err := varint()
	if err != nil {
		return err
	}
	if n != int64(len(x.records)) {
		return xzMalformed("index lists %d blocks, the stream has %d", n, len(x.records))
	}
	for _, rec := range x.records {
		u, err := varint()
		if err != nil {
			return err
		}
		c, err := varint()
		if err != nil {
			return err
		}
		if u != rec.unpadded || c != rec.uncompressed {
			return xzMalformed("index record (%d, %d) does not match its block (%d, %d)", u, c, rec.unpadded, rec.uncompressed)
		}
	}
	pad := make([]byte, (4-size%4)%4)
	if err := x.readFull(pad); err != nil {
		return err
	}
	for _, c := range pad {
		if c != 0 {
			return xzMalformed("non-zero index padding")
		}
	}
	crc.Write(pad)
	size += int64(len(pad))
	var tail [16]byte // index CRC32, then the footer
	if err := x.readFull(tail[:]); err != nil {
		return err
	}
	if crc.Sum32() != binary.LittleEndian.Uint32(tail[:4]) {
		return xzMalformed("index CRC32 mismatch")
	}
	size += 4
	f := tail[4:]
	switch {
	case crc32.ChecksumIEEE(f[4:10]) != binary.LittleEndian.Uint32(f[:4]):
		return xzMalformed("stream footer CRC32 mismatch")
	case (int64(binary.LittleEndian.Uint32(f[4:8]))+1)*4 != size:
		return xzMalformed("stream footer gives the wrong index size")
	case f[8] != x.flags[0] || f[9] != x.flags[1]:
		return xzMalformed("stream footer flags differ from the header's")
	case f[10] != 'Y' || f[11] != 'Z':
		return xzMalformed("no stream footer magic")
	}
	x.inStream = false
	return nil
}

// lzma2Framer reads the LZMA2 chunks of one block for the decoder,
// following them by their declared sizes: it counts the bytes the decoder
// takes (pos), adds up the declared unpacked sizes, and notes the end of
// the chunks. The decoder reads what it needs and no more, one byte at a
// time inside an LZMA chunk, so a longer read inside a chunk's packed
// data is the decoder reading a chunk header there: it left the chunk
// early, and the framer fails that read.
type lzma2Framer struct {
	r        io.Reader
	pos      int64
	unpacked int64
	ended    bool
	err      error

	hdr   []byte // chunk header being collected
	want  int    // its length, once known
	left  int64  // packed bytes left in the current chunk
	isLZM bool   // the current chunk is LZMA (not stored)
}

func (f *lzma2Framer) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.ended {
		f.err = xzMalformed("LZMA2 decoder read past the end of its chunks")
		return 0, f.err
	}
	if f.left > 0 {
		if f.isLZM && len(p) > 1 {
			f.err = xzMalformed("LZMA2 decoder left a chunk with %d packed bytes unused", f.left)
			return 0, f.err
		}
		n, err := f.r.Read(p[:min(int64(len(p)), f.left)])
		f.pos += int64(n)
		f.left -= int64(n)
		return n, err
	}
	// A chunk header: read no further than it.
	if f.want == 0 {
		p = p[:min(len(p), 1)]
	} else {
		p = p[:min(len(p), f.want-len(f.hdr))]
	}
	n, err := f.r.Read(p)
	f.pos += int64(n)
	for _, c := range p[:n] {
		if ferr := f.header(c); ferr != nil {
			f.err = ferr
			return n, ferr
		}
	}
	return n, err
}

// header takes the next byte of a chunk header.
func (f *lzma2Framer) header(c byte) error {
	f.hdr = append(f.hdr, c)
	if len(f.hdr) == 1 {
		switch {
		case c == 0:
			f.ended = true
			f.hdr = f.hdr[:0]
			return nil
		case c == 1 || c == 2:
			f.want, f.isLZM = 3, false
		case c < 0x80:
			return xzMalformed("invalid LZMA2 chunk control byte %#x", c)
		case c >= 0xc0:
			f.want, f.isLZM = 6, true
		default:
			f.want, f.isLZM = 5, true
		}
		return nil
	}
	if len(f.hdr) < f.want {
		return nil
	}
	h := f.hdr
	if f.isLZM {
		f.unpacked += (int64(h[0]&0x1f)<<16 | int64(binary.BigEndian.Uint16(h[1:3]))) + 1
		f.left = int64(binary.BigEndian.Uint16(h[3:5])) + 1
	} else {
		f.left = int64(binary.BigEndian.Uint16(h[1:3])) + 1
		f.unpacked += f.left
	}
	f.hdr, f.want = f.hdr[:0], 0
	return nil
}

// lzma2Dict decodes an LZMA2 dictionary size property.
func lzma2Dict(p byte) (int64, error) {
	switch {
	case p > 40:
		return 0, fmt.Errorf("xz block has an invalid LZMA2 dictionary size property %d", p)
	case p == 40:
		return 1<<32 - 1, nil
	}
	return int64(2|p&1) << (p/2 + 11), nil
}

// byteSize formats n bytes for messages.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0 || n >= 10<<30:
		return fmt.Sprintf("%d GiB", (n+1<<29)>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", (n+1<<19)>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
