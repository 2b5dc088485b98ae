package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxXZDictionary bounds the LZMA2 dictionary an xz block may ask for. The
// xz decoder allocates the dictionary a block header names before it
// decodes a byte, so a few bytes of hostile header could otherwise claim
// 4 GiB of memory. xz -9 (the largest preset) uses 64 MiB.
const MaxXZDictionary = 256 << 20

// xzGuard passes an xz file through unchanged while following its
// structure (stream headers, block headers, LZMA2 chunk headers, index,
// footer and stream padding) so that it sees every block header in full
// before the decoder reads it, and fails the read that carries a header
// asking for a dictionary larger than max. The decoder reads no further
// than it needs, so the check always runs first.
//
// The guard only frames the data; the decoder still checks everything
// (magic, CRCs, index). A structure the guard does not follow is an error
// the decoder would also report.
type xzGuard struct {
	r   io.Reader
	max int64
	err error

	skip  int64                // bytes to pass before collecting
	want  int                  // bytes to collect before calling step
	buf   []byte               // collected bytes
	step  func(b []byte) error // what the collected bytes are
	check int64                // size of the check of each block of this stream
	block int64                // bytes of the current block so far
	index int64                // bytes of the current index so far
	left  uint64               // varints left in the index
	vint  uint64               // varint being read
	vsh   uint                 // its shift
	vthen func(v uint64) error // what to do with it
}

// newXZGuard returns a guard reading r and refusing dictionaries over limit.
func newXZGuard(r io.Reader, limit int64) *xzGuard {
	g := &xzGuard{r: r, max: limit, buf: make([]byte, 0, 1024)}
	g.collect(4, g.streamStart)
	return g
}

func (g *xzGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if ferr := g.feed(p[:n]); ferr != nil {
		g.err = ferr
		return 0, ferr
	}
	return n, err
}

// collect asks for n bytes, given to step.
func (g *xzGuard) collect(n int, step func([]byte) error) {
	g.want, g.step = n, step
}

// feed follows the structure through p.
func (g *xzGuard) feed(p []byte) error {
	for len(p) > 0 {
		if g.skip > 0 {
			k := int(min(int64(len(p)), g.skip))
			p, g.skip = p[k:], g.skip-int64(k)
			continue
		}
		k := min(len(p), g.want-len(g.buf))
		g.buf = append(g.buf, p[:k]...)
		p = p[k:]
		if len(g.buf) == g.want {
			b := g.buf
			g.buf = g.buf[:0]
			if err := g.step(b); err != nil {
				return err
			}
		}
	}
	return nil
}

var errXZStructure = errors.New("xz data is malformed")

// streamStart reads 4 bytes: stream padding, or the start of a stream
// header.
func (g *xzGuard) streamStart(b []byte) error {
	if binary.LittleEndian.Uint32(b) == 0 {
		g.collect(4, g.streamStart)
		return nil
	}
	g.collect(8, g.streamHeader)
	return nil
}

// streamHeader reads the rest of a stream header: its flags name the check.
func (g *xzGuard) streamHeader(b []byte) error {
	if t := b[3] & 0x0f; t == 0 {
		g.check = 0
	} else {
		g.check = 4 << ((t - 1) / 3)
	}
	g.collect(1, g.blockOrIndex)
	return nil
}

// blockOrIndex reads the first byte of a block header, or the index
// indicator.
func (g *xzGuard) blockOrIndex(b []byte) error {
	if b[0] == 0 {
		g.index = 1
		g.varint(func(n uint64) error {
			g.left = 2 * n
			return g.records()
		})
		return nil
	}
	size := (int(b[0]) + 1) * 4
	g.block = int64(size)
	g.collect(size-1, g.blockHeader)
	return nil
}

// blockHeader checks a block header's filters.
func (g *xzGuard) blockHeader(b []byte) error {
	if len(b) < 5 {
		return errXZStructure
	}
	h := b[:len(b)-4] // without the CRC32
	flags := h[0]
	pos := 1
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(h[pos:])
		if n <= 0 {
			return 0, false
		}
		pos += n
		return v, true
	}
	for _, bit := range []byte{0x40, 0x80} { // compressed, uncompressed size
		if flags&bit != 0 {
			if _, ok := next(); !ok {
				return errXZStructure
			}
		}
	}
	for range int(flags&3) + 1 {
		id, ok := next()
		if !ok {
			return errXZStructure
		}
		psize, ok := next()
		if !ok || psize > uint64(len(h)-pos) {
			return errXZStructure
		}
		props := h[pos : pos+int(psize)]
		pos += int(psize)
		if id == 0x21 { // LZMA2
			if len(props) != 1 {
				return errXZStructure
			}
			dict, err := lzma2Dict(props[0])
			if err != nil {
				return err
			}
			if dict > g.max {
				return fmt.Errorf("xz block asks for a %s LZMA2 dictionary, more than the %s allowed "+
					"(xz -9 uses 64 MiB); refusing it before allocating it", byteSize(dict), byteSize(g.max))
			}
		}
	}
	g.collect(1, g.chunk)
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

// chunk reads an LZMA2 chunk's control byte.
func (g *xzGuard) chunk(b []byte) error {
	g.block++
	switch c := b[0]; {
	case c == 0: // end of the block's data: padding, check
		g.skip = (4-g.block%4)%4 + g.check
		g.collect(1, g.blockOrIndex)
	case c == 1 || c == 2: // uncompressed chunk
		g.collect(2, func(h []byte) error {
			n := int64(binary.BigEndian.Uint16(h)) + 1
			g.block += 2 + n
			g.skip = n
			g.collect(1, g.chunk)
			return nil
		})
	case c < 0x80:
		return fmt.Errorf("%w: invalid LZMA2 chunk control byte %#x", errXZStructure, c)
	default: // LZMA chunk: unpacked size, packed size, maybe properties
		n := 4
		if c >= 0xc0 {
			n = 5
		}
		g.collect(n, func(h []byte) error {
			packed := int64(binary.BigEndian.Uint16(h[2:4])) + 1
			g.block += int64(len(h)) + packed
			g.skip = packed
			g.collect(1, g.chunk)
			return nil
		})
	}
	return nil
}

// varint reads a multibyte integer of the index, then calls then.
func (g *xzGuard) varint(then func(uint64) error) {
	g.vint, g.vsh, g.vthen = 0, 0, then
	g.collect(1, g.varintByte)
}

func (g *xzGuard) varintByte(b []byte) error {
	g.index++
	if g.vsh > 56 {
		return errXZStructure
	}
	g.vint |= uint64(b[0]&0x7f) << g.vsh
	g.vsh += 7
	if b[0]&0x80 != 0 {
		g.collect(1, g.varintByte)
		return nil
	}
	return g.vthen(g.vint)
}

// records reads the index records, then skips the index padding and CRC32
// and the stream footer.
func (g *xzGuard) records() error {
	if g.left > 0 {
		g.left--
		g.varint(func(uint64) error { return g.records() })
		return nil
	}
	g.skip = (4-g.index%4)%4 + 4 + 12
	g.collect(4, g.streamStart)
	return nil
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
