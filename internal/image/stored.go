package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
)

// ErrCacheEntryChanged is wrapped by the error a cache entry's reader (see
// Result.Open) returns when the image file no longer has the size and
// SHA-256 recorded when it was stored: someone changed it, or the disk
// did.
var ErrCacheEntryChanged = errors.New("cached image changed since it was stored")

// storedFile is what the cache recorded of an entry's image file.
type storedFile struct {
	sha256 string // hex
	// evict removes the entry; called once when a check fails.
	evict func()
}

// changed evicts the entry and returns the error a reader of its image
// fails with from then on.
func (s *storedFile) changed(path, format string, args ...any) error {
	s.evict()
	return fmt.Errorf("%w: %s %s; the entry was evicted, so the image is downloaded again the next time",
		ErrCacheEntryChanged, path, fmt.Sprintf(format, args...))
}

// checkedReader reads an image file and checks, as the bytes go by, that
// it is what it should be: no extra pass over the file, the hash runs on
// the bytes the caller asked for, on a goroutine of its own while the
// caller sends them on (an upload is not slowed by the hash where a CPU is
// free). The read that reaches the expected size hands the digest to
// verdict and, when verdict refuses it, hands out nothing and fails
// instead; a file that ends early or goes on past the size fails too (with
// the error bad returns). Failures are sticky.
//
// A cache entry is checked against the SHA-256 recorded when it was stored
// (newCheckedReader); a local image used in place against the digest the
// user expects, computed here for the first time (newVerifyingReader).
type checkedReader struct {
	r       io.Reader
	closer  func() error
	path    string
	size    int64
	h       hash.Hash
	verdict func(sum []byte) error
	bad     func(format string, args ...any) error
	n       int64
	err     error

	// The hasher goroutine takes a copy of a chunk in buf from jobs and
	// answers on done; pending is set while it works on one.
	buf     []byte
	jobs    chan []byte
	done    chan struct{}
	pending bool
}

// maxHashChunk bounds the copy handed to the hasher (go-libvirt reads 4 MiB
// at a time); larger reads are hashed where they are.
const maxHashChunk = 4 << 20

// newCheckedReader reads a cache entry's image through f and checks it
// against the size and SHA-256 stored recorded; a mismatch evicts the
// entry and fails with ErrCacheEntryChanged.
func newCheckedReader(f *os.File, path string, size int64, stored *storedFile) *checkedReader {
	return &checkedReader{
		r: f, closer: f.Close, path: path, size: size, h: sha256.New(),
		verdict: func(sum []byte) error {
			if got := hex.EncodeToString(sum); got != stored.sha256 {
				return stored.changed(path, "has sha256 %s, not the %s recorded", got, stored.sha256)
			}
			return nil
		},
		bad: func(format string, args ...any) error { return stored.changed(path, format, args...) },
	}
}

// wait waits for the hasher to finish the chunk it has.
func (c *checkedReader) wait() {
	if c.pending {
		<-c.done
		c.pending = false
	}
}

// hash hashes b: on the hasher goroutine (from a copy, since b belongs to
// the caller once Read returns) unless final or too large.
func (c *checkedReader) hash(b []byte, final bool) {
	c.wait()
	if final || len(b) > maxHashChunk || len(b) == 0 {
		c.h.Write(b)
		return
	}
	if c.jobs == nil {
		c.buf = make([]byte, maxHashChunk)
		c.jobs, c.done = make(chan []byte), make(chan struct{})
		go func() {
			for b := range c.jobs {
				c.h.Write(b)
				c.done <- struct{}{}
			}
		}()
	}
	n := copy(c.buf, b)
	c.pending = true
	c.jobs <- c.buf[:n]
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	// Ask for at most one byte past the recorded end: enough to see that
	// the file goes on.
	if rest := c.size + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	k, err := c.r.Read(p)
	if c.n+int64(k) > c.size {
		c.err = c.bad("is longer than the %d bytes recorded", c.size)
		return 0, c.err
	}
	c.n += int64(k)
	final := c.n == c.size
	c.hash(p[:k], final)
	if final && k > 0 {
		if c.err = c.verdict(c.h.Sum(nil)); c.err != nil {
			return 0, c.err
		}
	}
	switch {
	case errors.Is(err, io.EOF) && c.n < c.size:
		c.err = c.bad("ends after %d of the %d bytes recorded", c.n, c.size)
		return 0, c.err
	case err != nil && !errors.Is(err, io.EOF):
		c.err = fmt.Errorf("reading image %s: %w", c.path, err)
		return k, c.err
	}
	return k, err
}

// Close ends the hasher and closes the file.
func (c *checkedReader) Close() error {
	c.wait()
	if c.jobs != nil {
		close(c.jobs)
		c.jobs = nil
	}
	if c.closer == nil {
		return nil
	}
	return c.closer()
}
