package image

import (
	"errors"
	"fmt"
	"io"
)

// Defaults of Limits: a real cloud image comes nowhere near them.
const (
	// DefaultMaxSize bounds the decompressed image: 64 GiB.
	DefaultMaxSize = 64 << 30
	// DefaultMaxRatio bounds decompressed bytes per source byte.
	DefaultMaxRatio = 1000
	// RatioGrace is how many decompressed bytes may come out before the
	// ratio is checked, so that small, very compressible files pass.
	RatioGrace = 256 << 20
)

// ErrLimit is wrapped by the error Fetch returns when unpacking a source
// would exceed one of its Limits.
var ErrLimit = errors.New("image exceeds a limit")

// Limits bound what unpacking a source may cost, whatever the source says
// about itself: they are enforced on the bytes as they come out of the
// decompressor, before anything past them is written.
type Limits struct {
	// MaxSize bounds the decompressed data (the image, or the tar archive
	// holding it) in bytes; 0 means DefaultMaxSize.
	MaxSize int64
	// MaxRatio bounds decompressed bytes per source byte once RatioGrace
	// bytes came out; 0 means DefaultMaxRatio.
	MaxRatio int64

	// grace replaces RatioGrace in tests.
	grace int64
	// grow, if set, is called with the bytes decompressed so far every
	// growStep bytes, so the cache can make room while an entry is written.
	grow func(written int64)
}

// growStep is how often Limits.grow is called.
var growStep int64 = 256 << 20

func (l Limits) withDefaults() Limits {
	if l.MaxSize <= 0 {
		l.MaxSize = DefaultMaxSize
	}
	if l.MaxRatio <= 0 {
		l.MaxRatio = DefaultMaxRatio
	}
	if l.grace <= 0 {
		l.grace = RatioGrace
	}
	return l
}

// counter counts the bytes read through it.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// limiter reads decompressed data and fails once it exceeds its Limits;
// in counts the source bytes the decompressor consumed.
type limiter struct {
	r    io.Reader
	in   *counter
	lim  Limits
	out  int64
	next int64 // when to call grow
}

func newLimiter(r io.Reader, in *counter, lim Limits) *limiter {
	lim = lim.withDefaults()
	return &limiter{r: r, in: in, lim: lim, next: growStep}
}

func (l *limiter) Read(p []byte) (int, error) {
	// Never hand out more than the size bound allows.
	room := l.lim.MaxSize - l.out + 1
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	l.out += int64(n)
	switch {
	case l.out > l.lim.MaxSize:
		return 0, fmt.Errorf("%w: it decompresses to more than %s", ErrLimit, byteSize(l.lim.MaxSize))
	case l.out > l.lim.grace && l.out > l.in.n*l.lim.MaxRatio:
		return 0, fmt.Errorf("%w: %s of source decompressed to %s, more than %d times its size",
			ErrLimit, byteSize(l.in.n), byteSize(l.out), l.lim.MaxRatio)
	}
	if l.lim.grow != nil && l.out >= l.next {
		l.lim.grow(l.out)
		l.next = l.out + growStep
	}
	return n, err
}
