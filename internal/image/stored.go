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

// checkedReader reads an entry's image file and checks, as the bytes go
// by, that it is what was stored: no extra pass over the file, the hash
// runs on the bytes the caller asked for, on a goroutine of its own while
// the caller sends them on (an upload is not slowed by the hash where a
// CPU is free). The read that reaches the recorded size compares the
// digest and, on a mismatch, hands out nothing and fails instead; a file
// that ends early or goes on past the size fails too. The failure is
// sticky and evicts the entry.
type checkedReader struct {
	f      *os.File
	path   string
	size   int64
	stored *storedFile
	h      hash.Hash
	n      int64
	err    error

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

func newCheckedReader(f *os.File, path string, size int64, stored *storedFile) *checkedReader {
	return &checkedReader{f: f, path: path, size: size, stored: stored, h: sha256.New()}
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
	k, err := c.f.Read(p)
	if c.n+int64(k) > c.size {
		return 0, c.fail("is longer than the %d bytes recorded", c.size)
	}
	c.n += int64(k)
	final := c.n == c.size
	c.hash(p[:k], final)
	if final && k > 0 {
		if got := hex.EncodeToString(c.h.Sum(nil)); got != c.stored.sha256 {
			return 0, c.fail("has sha256 %s, not the %s recorded", got, c.stored.sha256)
		}
	}
	switch {
	case errors.Is(err, io.EOF) && c.n < c.size:
		return 0, c.fail("ends after %d of the %d bytes recorded", c.n, c.size)
	case err != nil && !errors.Is(err, io.EOF):
		c.err = fmt.Errorf("reading cached image %s: %w", c.path, err)
		return k, c.err
	}
	return k, err
}

// fail makes the reader fail from now on with ErrCacheEntryChanged, and
// evicts the entry so that the next Fetch downloads the image again.
func (c *checkedReader) fail(format string, args ...any) error {
	c.err = fmt.Errorf("%w: %s %s; the entry was evicted, so the image is downloaded again the next time",
		ErrCacheEntryChanged, c.path, fmt.Sprintf(format, args...))
	c.stored.evict()
	return c.err
}

// Close ends the hasher and closes the file.
func (c *checkedReader) Close() error {
	c.wait()
	if c.jobs != nil {
		close(c.jobs)
		c.jobs = nil
	}
	return c.f.Close()
}
