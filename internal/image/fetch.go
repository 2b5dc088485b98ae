package image

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// MaxSumsSize bounds the size of a checksum file fetched from
// Request.ChecksumURL.
const MaxSumsSize = 1 << 20

// ErrChecksumMismatch is wrapped by the error Fetch returns when the source
// bytes do not have the expected digest.
var ErrChecksumMismatch = errors.New("checksum mismatch")

// Request describes one image to fetch.
type Request struct {
	// Source is an http:// or https:// URL, a file:// URL, or a local path
	// (absolute or relative to the working directory).
	Source string
	// Checksum is the expected digest of the source bytes as downloaded
	// (before decompression); optional.
	Checksum *Digest
	// ChecksumURL is the URL (or local path) of a SHA256SUMS/SHA512SUMS-style
	// file; its line for the base name of Source is the expected digest.
	// Optional; mutually exclusive with Checksum.
	ChecksumURL string
	// ChecksumSigningKeys are ASCII-armored OpenPGP public keys (see
	// ParseSigningKeys). When given, the checksum file must carry a valid
	// signature by one of them, detached at ChecksumSignatureURL or inline
	// (a clear-signed file, of which only the signed body is read); else
	// Fetch fails with an error wrapping ErrSignature before any image
	// byte is fetched. Optional; needs ChecksumURL.
	ChecksumSigningKeys string
	// ChecksumSignatureURL is the URL (or local path) of a detached
	// OpenPGP signature of the checksum file, armored or binary, such as
	// Debian's SHA512SUMS.sign or Ubuntu's SHA256SUMS.gpg. Optional; needs
	// ChecksumSigningKeys. Plain http is refused as for ChecksumURL.
	ChecksumSignatureURL string
	// AllowHTTPChecksumURL lets ChecksumURL (and ChecksumSignatureURL) be
	// a plain http URL. Anyone on the path can replace such a file (and
	// the image with it), so the Result of such a Fetch is not Verified
	// (see Result.ChecksumOverHTTP) unless a signature by one of
	// ChecksumSigningKeys vouches for the checksum file. A plain http URL on
	// the loopback (localhost, 127.0.0.0/8, ::1) needs no permission and
	// verifies: it never leaves the machine.
	AllowHTTPChecksumURL bool
	// Client makes the HTTP requests; nil means DefaultClient. A client
	// without CheckRedirect gets one that follows up to 10 redirects and
	// refuses loops.
	Client *http.Client
	// StallTimeout fails a transfer that delivers no bytes for this long
	// (response headers included); zero means DefaultStallTimeout.
	StallTimeout time.Duration
	// MinRate fails a download that delivers fewer than this many bytes
	// per second over a StallTimeout window; zero means DefaultMinRate,
	// negative means no minimum.
	MinRate int64
	// Limits bound the decompressed size and the compression ratio.
	Limits Limits
	// Progress, if not nil, is called about once a second while the source
	// is read (and once at its end), from the goroutine calling Fetch.
	Progress func(Progress)
}

// Progress reports how far reading a source has come.
type Progress struct {
	// Done is the number of source bytes read so far.
	Done int64
	// Total is the size of the source (Content-Length), or -1 if unknown.
	Total int64
	// Rate is the transfer rate in bytes per second since the previous
	// report (over the whole transfer for the final report).
	Rate float64
	// Elapsed is the time since the transfer started.
	Elapsed time.Duration
}

// Result is a verified, decompressed disk image on local disk.
type Result struct {
	// Path is the local file holding the decompressed disk image. It must
	// be treated as read-only, and used only until Release.
	Path string
	// Format is FormatQCOW2 ("qcow2") or FormatRaw ("raw").
	Format string
	// VirtualSize is the size of the disk in bytes: the qcow2 header's size,
	// or the raw file's length.
	VirtualSize uint64
	// Size is the length in bytes of the file at Path.
	Size int64
	// Digest is the digest of the source bytes as downloaded (before
	// decompression): sha512 when the expected digest is sha512, else sha256.
	// For a local image used in place it is set once a reader from Open has
	// read the whole image (see Open), and is zero until then.
	Digest Digest
	// Verified is true when an expected digest (Checksum or ChecksumURL)
	// was given and matched, and did not itself come over plain http
	// unless signed. For a local image used in place the match is checked
	// as Open's reader reads it, which fails when it does not match.
	Verified bool
	// ChecksumOverHTTP is true when the expected digest came from a plain
	// http ChecksumURL (AllowHTTPChecksumURL) with no signature checked:
	// it matched, which catches corruption, but proves nothing against
	// someone on the path.
	ChecksumOverHTTP bool
	// SignedBy is the fingerprint (upper-case hex) of the primary key of
	// the ChecksumSigningKeys entry whose signature on the checksum file
	// was verified, or "" when no signature was checked.
	SignedBy string
	// Compression is "", "xz", "gzip", "zstd" or "bzip2", with "+tar"
	// appended when a tar archive held the image ("xz+tar"), or "tar" for
	// an uncompressed tar archive.
	Compression string
	// Downloaded is false when the image was served from the cache or a
	// local uncompressed file was used in place.
	Downloaded bool

	release func() // idempotent
	// file is the handle a local image used in place was inspected
	// through; Open reads the image through it, and computes its digest
	// (checked against expected, when there is one) as it goes.
	file     *os.File
	expected *Digest
	src      source
	// headSum is the SHA-256 of the first headLen bytes of file, read
	// before it was inspected; Open fails an upload whose first bytes
	// differ (the file was rewritten in place between the check and the
	// upload), with or without an expected digest.
	headSum []byte
	headLen int64
	// stored is what the cache recorded of an entry's image, which Open
	// checks the bytes it reads against.
	stored *storedFile
	// dir is the cache directory the entry is read through.
	dir *cacheDir
}

// Open returns a reader of the image, to be closed by the caller before
// Release. A local image used in place is read through the very handle it
// was inspected through (not reopened by path), and its digest is computed
// as the reader reads it, in the same pass (not in one of its own before
// the upload): the read that completes the image sets Digest or, when the
// digest is not the one expected, hands out nothing and fails with an
// error wrapping ErrChecksumMismatch, so an upload fed by it fails. A cache entry is opened
// without following a symbolic link, and read through a check of the size
// and SHA-256 recorded when it was stored: when the bytes read differ, the
// read that would complete the image fails with an error wrapping
// ErrCacheEntryChanged instead (so an upload fed by it fails), and the
// entry is evicted.
func (r *Result) Open() (io.ReadCloser, error) {
	if r.file != nil {
		return newVerifyingReader(r), nil
	}
	open := openNoFollow
	if r.dir != nil {
		open = r.dir.openNoFollow
	}
	fh, err := open(r.Path)
	if err != nil {
		return nil, err
	}
	if r.stored == nil {
		return fh, nil
	}
	return newCheckedReader(fh, r.Path, r.Size, r.stored), nil
}

// Release releases the Result's shared hold on its cache entry, after which
// the entry may be evicted or replaced. It is idempotent (also across copies
// of the Result) and safe on nil.
func (r *Result) Release() {
	if r != nil && r.release != nil {
		r.release()
	}
}

// source is where an image (or checksum file) comes from.
type source struct {
	raw  string // as given
	url  string // for http and https
	path string // for local files: absolute path
	name string // base name looked up in checksum files
}

func (s source) remote() bool { return s.url != "" }

// String names the source in messages (without a password).
func (s source) String() string {
	if s.remote() {
		return redact(s.url)
	}
	return s.path
}

// id identifies the source in cache keys.
func (s source) id() string {
	if s.remote() {
		return s.url
	}
	return "file://" + filepath.ToSlash(s.path)
}

// parseSource classifies an image or checksum file location.
func parseSource(s string) (source, error) {
	if strings.TrimSpace(s) == "" {
		return source{}, errors.New("no source given")
	}
	u, err := url.Parse(s)
	scheme := ""
	if err == nil {
		scheme = strings.ToLower(u.Scheme)
	} else if looksLikeURL(s) {
		// Not a local path: a URL that does not parse is an error, never a
		// file name. The parser's message quotes parts of the URL (the
		// "port" of "user:pass/word@host" is the password), so it is left
		// out.
		return source{}, fmt.Errorf("URL %s does not parse; percent-encode '/', '#', '?' and '@' in a user name "+
			"or password", redact(s))
	}
	// A one-letter scheme is a Windows drive letter ("C:\image.qcow2").
	if len(scheme) == 1 {
		scheme = ""
	}
	switch scheme {
	case "http", "https":
		if u.Host == "" {
			return source{}, fmt.Errorf("URL %s has no host", redact(s))
		}
		return source{raw: s, url: u.String(), name: path.Base(u.Path)}, nil
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return source{}, fmt.Errorf("file URL %s names host %q; only local files are supported", redact(s), u.Host)
		}
		p := u.Path
		if runtime.GOOS == "windows" && len(p) >= 3 && p[0] == '/' && p[2] == ':' {
			p = p[1:]
		}
		return localSource(s, filepath.FromSlash(p))
	case "":
		return localSource(s, s)
	}
	return source{}, fmt.Errorf("unsupported source %s: use an http, https or file URL, or a local path", redact(s))
}

// looksLikeURL reports whether s starts with a scheme of two letters or
// more and "://" (a Windows drive letter has one).
func looksLikeURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || len(scheme) < 2 {
		return false
	}
	for i, c := range scheme {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

func localSource(raw, p string) (source, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return source{}, fmt.Errorf("source %q: %w", raw, err)
	}
	return source{raw: raw, path: abs, name: filepath.Base(abs)}, nil
}

// fetcher carries one Fetch.
type fetcher struct {
	cache  *Cache
	dir    string
	cd     *cacheDir // dir, held open
	req    Request
	src    source
	client *http.Client
	stall  time.Duration
	start  time.Time
	// downloaded is set once this Fetch stored a new image.
	downloaded bool
	// sumsOverHTTP is set when the expected digest came over plain http,
	// with no signature checked.
	sumsOverHTTP bool
	// signedBy is the fingerprint of the key whose signature on the
	// checksum file was verified.
	signedBy string
}

// minRate is the download's minimum rate in bytes per second (0: none).
func (f *fetcher) minRate() int64 {
	switch {
	case f.req.MinRate == 0:
		return DefaultMinRate
	case f.req.MinRate < 0:
		return 0
	}
	return f.req.MinRate
}

// verified reports whether a Result with this expected digest is Verified.
func (f *fetcher) verified(expected *Digest) bool { return expected != nil && !f.sumsOverHTTP }

// Fetch returns the disk image described by req as a local file, fetching,
// verifying and decompressing it into the cache unless a usable entry is
// there already, or using a local uncompressed image in place.
//
// Before it returns, the image's format is checked: only qcow2 (without
// backing file, external data file or encryption) and raw disk images (with
// an MBR or GPT partition table) are accepted; other images give errors
// wrapping ErrUnsupportedImage. A digest mismatch gives an error wrapping
// ErrChecksumMismatch: from Fetch for an image that is downloaded or
// decompressed, and from the last read of Open's reader for a local
// uncompressed image used in place, whose digest is computed in the same
// pass that uploads it. On any error, nothing new is left in the cache.
//
// Concurrent Fetches of the same entry, in this process or others sharing
// the cache directory, download it once; the others wait and share it.
// The Result holds a shared lock on its cache entry until Release; a Fetch
// that must replace an entry (its URL now serves something else) waits for
// those holders. Cancelling ctx stops a transfer at once.
func (c *Cache) Fetch(ctx context.Context, req Request) (*Result, error) {
	f := &fetcher{cache: c, req: req, client: requestClient(req.Client), stall: req.StallTimeout, start: time.Now()}
	if f.stall <= 0 {
		f.stall = DefaultStallTimeout
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	src, err := parseSource(req.Source)
	if err != nil {
		return nil, err
	}
	f.src = src
	var expected *Digest
	switch {
	case req.Checksum != nil && req.ChecksumURL != "":
		return nil, errors.New("checksum and checksum URL are mutually exclusive; give one of them")
	case req.ChecksumURL == "" && (req.ChecksumSigningKeys != "" || req.ChecksumSignatureURL != ""):
		return nil, errors.New("checksum signing keys and a checksum signature URL need a checksum URL: they check the checksum file")
	case req.Checksum != nil:
		d := *req.Checksum
		d.Algorithm, d.Hex = strings.ToLower(d.Algorithm), strings.ToLower(d.Hex)
		if err := d.validate(); err != nil {
			return nil, err
		}
		expected = &d
	case req.ChecksumURL != "":
		d, err := f.fetchSums(ctx, req.ChecksumURL)
		if err != nil {
			return nil, err
		}
		expected = &d
	}

	if !src.remote() {
		if r, ok, err := f.inPlace(expected); ok || err != nil {
			return r, err
		}
	}
	f.dir = c.Dir
	if f.dir == "" {
		f.dir = DefaultCacheDir()
	}
	if f.dir, err = filepath.Abs(f.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating image cache directory: %w", err)
	}
	if f.cd, err = openCacheDir(f.dir); err != nil {
		return nil, err
	}
	if testHookCacheDirOpened != nil {
		testHookCacheDirOpened(f.dir)
	}
	r, err := f.fetchCached(ctx, expected)
	if r == nil {
		f.cd.Close()
		return r, err
	}
	// The Result reads its entry through the directory's handle until it
	// is released.
	var once sync.Once
	release, cd := r.release, f.cd
	r.release = func() { once.Do(func() { release(); cd.Close() }) }
	return r, err
}

// testHookCacheDirOpened, when set by a test, runs once the cache
// directory was checked and opened, before it is used.
var testHookCacheDirOpened func(dir string)

// fetchSums fetches the checksum file at loc and returns its digest for the
// source's base name. With signing keys, the file's signature is checked
// first (detached from ChecksumSignatureURL, or inline when the file is
// clear-signed, and then only the signed body is read).
func (f *fetcher) fetchSums(ctx context.Context, loc string) (Digest, error) {
	s, err := parseSource(loc)
	if err != nil {
		return Digest{}, fmt.Errorf("checksum URL: %w", err)
	}
	var keys *SigningKeys
	if f.req.ChecksumSigningKeys != "" {
		if keys, err = ParseSigningKeys(f.req.ChecksumSigningKeys); err != nil {
			return Digest{}, err
		}
	} else if f.req.ChecksumSignatureURL != "" {
		return Digest{}, errors.New("a checksum signature URL needs the signing keys to check it against")
	}
	overHTTP, err := f.plainHTTP(s, "checksum URL")
	if err != nil {
		return Digest{}, err
	}
	data, err := f.readSmall(ctx, s, MaxSumsSize, "checksum file")
	if err != nil {
		return Digest{}, err
	}
	if len(data) > MaxSumsSize {
		return Digest{}, fmt.Errorf("checksum file %s is larger than %d bytes; is it a checksum file?", s, MaxSumsSize)
	}
	if keys != nil {
		if data, err = f.verifySums(ctx, s, data, keys); err != nil {
			return Digest{}, err
		}
	}
	// A verified signature vouches for the file whatever carried it.
	f.sumsOverHTTP = overHTTP && f.signedBy == ""
	d, err := ParseSums(bytes.NewReader(data), f.src.name)
	if err != nil {
		return Digest{}, fmt.Errorf("%s: %w", s, err)
	}
	return d, nil
}

// verifySums checks the signature of the checksum file s (data) and returns
// the part of data that is signed.
func (f *fetcher) verifySums(ctx context.Context, s source, data []byte, keys *SigningKeys) ([]byte, error) {
	now := time.Now()
	if f.req.ChecksumSignatureURL == "" {
		if !isClearsigned(data) {
			return nil, fmt.Errorf("%w: checksum file %s is not clear-signed, and no signature URL was given "+
				"(vendors publish the signature beside the file, e.g. SHA512SUMS.sign or SHA256SUMS.gpg)", ErrSignature, s)
		}
		body, fp, err := keys.verifyClearsigned(data, now)
		if err != nil {
			return nil, fmt.Errorf("checksum file %s: %w", s, err)
		}
		f.signedBy = fp
		return body, nil
	}
	ss, err := parseSource(f.req.ChecksumSignatureURL)
	if err != nil {
		return nil, fmt.Errorf("checksum signature URL: %w", err)
	}
	if _, err := f.plainHTTP(ss, "checksum signature URL"); err != nil {
		return nil, err
	}
	sig, err := f.readSmall(ctx, ss, MaxSignatureSize, "checksum signature")
	if err != nil {
		return nil, err
	}
	if len(sig) > MaxSignatureSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes; is it a signature?", ErrSignature, ss, MaxSignatureSize)
	}
	fp, err := keys.verifyDetached(data, sig, now)
	if err != nil {
		return nil, fmt.Errorf("checksum file %s with signature %s: %w", s, ss, err)
	}
	f.signedBy = fp
	return data, nil
}

// plainHTTP reports whether s is a plain http URL off the loopback, and
// refuses one unless plain http was allowed: anyone on the path could
// replace what it serves.
func (f *fetcher) plainHTTP(s source, what string) (bool, error) {
	if !s.remote() || !strings.HasPrefix(strings.ToLower(s.url), "http:") || loopbackURL(s.url) {
		return false, nil
	}
	if !f.req.AllowHTTPChecksumURL {
		return false, fmt.Errorf("%s %s is plain http: anyone on the path could replace it and "+
			"the image with it, so it verifies nothing; use an https URL or the checksum itself, or allow "+
			"plain http explicitly (then the image is not reported as verified unless a signature is checked)", what, s)
	}
	return true, nil
}

// readSmall reads at most limit+1 bytes of a small remote or local file
// (a checksum file, a signature): more than limit is for the caller to
// refuse.
func (f *fetcher) readSmall(ctx context.Context, s source, limit int64, what string) ([]byte, error) {
	if !s.remote() {
		fh, err := os.Open(s.path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		defer fh.Close()
		data, err := io.ReadAll(io.LimitReader(fh, limit+1))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		return data, nil
	}
	t, err := startGET(ctx, f.client, s.url, nil, f.stall, f.minRate())
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", what, err)
	}
	defer t.close()
	if t.resp.StatusCode == http.StatusNotModified {
		return nil, fmt.Errorf("fetching %s: GET %s: unexpected %s", what, s, t.resp.Status)
	}
	m := newMeter(ctx, t.resp.Body, t.resp.ContentLength, nil, t.touch)
	data, err := io.ReadAll(io.LimitReader(m, limit+1))
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", what, t.describe(err, m.n, t.resp.ContentLength))
	}
	return data, nil
}

// inPlace uses a local uncompressed image where it is. It reports false
// (and no error) when the file is compressed or a tar archive and must be
// unpacked into the cache.
func (f *fetcher) inPlace(expected *Digest) (*Result, bool, error) {
	fh, err := os.Open(f.src.path)
	if err != nil {
		return nil, false, fmt.Errorf("source: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			fh.Close()
		}
	}()
	fi, err := fh.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("source: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("source %s is not a regular file", f.src.path)
	}
	head := make([]byte, 512)
	n, err := fh.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("source: %w", err)
	}
	head = head[:n]
	if detectCompression(head) != "" || isTar(head) {
		return nil, false, nil
	}
	// Hash the region the format check reads before the check: the upload
	// is compared with it, so a file rewritten in place after the check
	// (a backing file added) is not uploaded as checked.
	headLen := min(fi.Size(), inPlaceHead)
	hh := sha256.New()
	if _, err := io.Copy(hh, io.NewSectionReader(fh, 0, headLen)); err != nil {
		return nil, false, fmt.Errorf("source: %w", err)
	}
	info, err := inspectImage(fh, fi.Size())
	if err != nil {
		return nil, false, fmt.Errorf("image %s %w", f.src.path, err)
	}
	keep = true
	var once sync.Once
	return &Result{
		file:             fh,
		headSum:          hh.Sum(nil),
		headLen:          headLen,
		expected:         expected,
		src:              f.src,
		release:          func() { once.Do(func() { fh.Close() }) },
		Path:             f.src.path,
		Format:           info.Format,
		VirtualSize:      info.VirtualSize,
		Size:             info.Size,
		Verified:         f.verified(expected),
		ChecksumOverHTTP: f.sumsOverHTTP,
		SignedBy:         f.signedBy,
	}, true, nil
}

// inPlaceHead is how much of a local image used in place is compared
// between its check and its upload: every header, table and extension the
// format check reads lies within it.
const inPlaceHead = 1 << 20

// headTee hashes the first left bytes read through it.
type headTee struct {
	r    io.Reader
	h    hash.Hash
	left int64
}

func (t *headTee) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if k := min(int64(n), t.left); k > 0 {
		t.h.Write(p[:k])
		t.left -= k
	}
	return n, err
}

// newVerifyingReader reads a local image used in place and computes its
// digest as it goes (see Result.Open).
func newVerifyingReader(r *Result) *checkedReader {
	alg := SHA256
	if r.expected != nil {
		alg = r.expected.Algorithm
	}
	head := &headTee{r: io.NewSectionReader(r.file, 0, r.Size), h: sha256.New(), left: r.headLen}
	return &checkedReader{
		r: head, path: r.Path, size: r.Size, h: Digest{Algorithm: alg}.newHash(),
		verdict: func(sum []byte) error {
			if r.headSum != nil && !bytes.Equal(head.h.Sum(nil), r.headSum) {
				return fmt.Errorf("image %s changed between its check and its upload: its first %s differ from "+
					"those checked; nothing was uploaded as checked", r.Path, byteSize(r.headLen))
			}
			d := Digest{Algorithm: alg, Hex: hex.EncodeToString(sum)}
			if r.expected != nil && d != *r.expected {
				return mismatch(r.src, *r.expected, d)
			}
			r.Digest = d
			return nil
		},
		bad: func(format string, args ...any) error {
			return fmt.Errorf("image %s changed while it was read: it %s", r.Path, fmt.Sprintf(format, args...))
		},
	}
}

// mismatch returns the error for a digest mismatch.
func mismatch(src source, expected, got Digest) error {
	return fmt.Errorf("%w for %s: expected %s, computed %s", ErrChecksumMismatch, src, expected, got)
}

// opened is a source opened for reading.
type opened struct {
	body  io.ReadCloser
	total int64 // -1: unknown
	// validators of a remote source, and the size and time stamp of a
	// local one, to revalidate the cache entry with.
	etag, lastModified, stamp string
	notModified               bool
	t                         *transfer // for remote sources
}

// open starts reading the source; for a remote one with a cache entry
// (prev), the GET is conditional.
func (f *fetcher) open(ctx context.Context, prev *entryMeta) (*opened, error) {
	if !f.src.remote() {
		fh, err := os.Open(f.src.path)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		fi, err := fh.Stat()
		if err != nil {
			fh.Close()
			return nil, fmt.Errorf("source: %w", err)
		}
		return &opened{body: fh, total: fi.Size(), stamp: localStamp(fi)}, nil
	}
	hdr := http.Header{}
	if prev != nil {
		if prev.ETag != "" {
			hdr.Set("If-None-Match", prev.ETag)
		}
		if prev.LastModified != "" {
			hdr.Set("If-Modified-Since", prev.LastModified)
		}
	}
	t, err := startGET(ctx, f.client, f.src.url, hdr, f.stall, f.minRate())
	if err != nil {
		return nil, err
	}
	o := &opened{
		body:         t.resp.Body,
		total:        t.resp.ContentLength,
		etag:         t.resp.Header.Get("ETag"),
		lastModified: t.resp.Header.Get("Last-Modified"),
		notModified:  t.resp.StatusCode == http.StatusNotModified,
		t:            t,
	}
	if o.notModified && len(hdr) == 0 {
		t.close()
		return nil, fmt.Errorf("GET %s: unexpected %s to an unconditional request", f.src, t.resp.Status)
	}
	return o, nil
}

func (o *opened) close() {
	if o.t != nil {
		o.t.close()
	} else {
		o.body.Close()
	}
}

// localStamp identifies the version of a local file by size and mtime.
func localStamp(fi os.FileInfo) string {
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
}

// fetched is a verified and inspected image in a temporary file.
type fetched struct {
	tmp         string
	info        imageInfo
	digest      Digest
	compression string
	sum         string // SHA-256 of the file at tmp
}

// readFail describes a failure to read the source.
func (f *fetcher) readFail(o *opened, err error, n int64) error {
	if o.t != nil {
		return o.t.describe(err, n, o.total)
	}
	return fmt.Errorf("reading %s: %w", f.src.path, err)
}

// pipeline streams the opened source through the digest, the decompressor
// and the tar extraction into a temporary file in the cache directory, and
// verifies and inspects the result. With an expected digest (which covers
// the published file, compressed as it is) the source is first stored as
// it came and compared, and only a verified copy is decompressed: an
// unverified source costs at most its own size on disk, never evicts a
// cached image and never reaches a decompressor. On error no temporary
// file is left.
func (f *fetcher) pipeline(ctx context.Context, o *opened, key string, expected *Digest) (*fetched, error) {
	alg := SHA256
	if expected != nil {
		alg = expected.Algorithm
	}
	h := Digest{Algorithm: alg}.newHash()
	var onData func(int)
	if o.t != nil {
		onData = o.t.touch
	}
	m := newMeter(ctx, o.body, o.total, f.req.Progress, onData)
	src := bufio.NewReaderSize(io.TeeReader(m, h), streamBufSize)
	lim := f.req.Limits
	lim.grow = func(written int64) { f.evict(key, written) }
	if expected != nil {
		return f.verifyFirst(o, m, src, h, key, *expected, lim)
	}

	u, err := unpack(src, f.cd, key+".*.part", lim)
	if err == nil {
		// Hash what the decompressor left unread.
		if _, derr := io.Copy(io.Discard, src); derr != nil {
			err = derr
		}
	}
	fail := func(e error) (*fetched, error) {
		if u.path != "" {
			_ = f.cd.Remove(u.path)
		}
		return nil, e
	}
	if m.err != nil {
		return fail(f.readFail(o, m.err, m.n))
	}
	if o.total >= 0 && m.n != o.total {
		return fail(f.readFail(o, io.ErrUnexpectedEOF, m.n))
	}
	if err != nil {
		return fail(f.unpackFail(err))
	}
	m.finish()
	if o.t != nil {
		o.t.stopWatchdog() // all read: what follows may take its time
	}
	return f.inspect(u, digestOf(alg, h))
}

// verifyFirst stores the source as it comes (within the size limit, with
// no eviction: nothing is known of it yet), compares its digest, and
// unpacks the verified copy.
func (f *fetcher) verifyFirst(o *opened, m *meter, src io.Reader, h hash.Hash, key string, expected Digest, lim Limits) (*fetched, error) {
	maxSize := lim.withDefaults().MaxSize
	lr := &io.LimitedReader{R: src, N: maxSize + 1}
	dl, _, err := writeTemp(lr, f.cd, key+".*.part")
	if err != nil && m.err == nil {
		return nil, fmt.Errorf("writing the download to the cache directory: %w", err)
	}
	defer func() {
		if dl != "" {
			_ = f.cd.Remove(dl)
		}
	}()
	if m.err != nil {
		return nil, f.readFail(o, m.err, m.n)
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("%s: %w: the download is larger than %s; refusing it (raise the limit if the image is genuine)",
			f.src, ErrLimit, byteSize(maxSize))
	}
	if o.total >= 0 && m.n != o.total {
		return nil, f.readFail(o, io.ErrUnexpectedEOF, m.n)
	}
	d := digestOf(expected.Algorithm, h)
	if d != expected {
		return nil, mismatch(f.src, expected, d)
	}
	m.finish()
	if o.t != nil {
		o.t.stopWatchdog() // all read: what follows may take its time
	}
	fh, err := f.cd.OpenFile(dl, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the verified download: %w", err)
	}
	defer fh.Close()
	u, err := unpack(bufio.NewReaderSize(fh, streamBufSize), f.cd, key+".*.part", lim)
	if err != nil {
		return nil, f.unpackFail(err)
	}
	return f.inspect(u, d)
}

// unpackFail describes an error of unpack.
func (f *fetcher) unpackFail(err error) error {
	switch {
	case errors.Is(err, ErrUnsupportedImage):
		return fmt.Errorf("image %s %w", f.src, err)
	case errors.Is(err, ErrLimit):
		return fmt.Errorf("%s: %w; refusing it (raise the limit if the image is genuine)", f.src, err)
	}
	return fmt.Errorf("%s: %w", f.src, err)
}

// inspect syncs the unpacked image and checks its format; on error it
// removes the file.
func (f *fetcher) inspect(u unpacked, d Digest) (*fetched, error) {
	fail := func(e error) (*fetched, error) {
		_ = f.cd.Remove(u.path)
		return nil, e
	}
	fh, err := f.cd.OpenFile(u.path, os.O_RDWR, 0)
	if err != nil {
		return fail(err)
	}
	defer fh.Close()
	if err := fh.Sync(); err != nil {
		return fail(fmt.Errorf("writing image to the cache directory: %w", err))
	}
	fi, err := fh.Stat()
	if err != nil {
		return fail(err)
	}
	info, err := inspectImage(fh, fi.Size())
	if err != nil {
		what := f.src.String()
		if u.member != "" {
			what = fmt.Sprintf("%s (member %q)", what, u.member)
		}
		return fail(fmt.Errorf("image %s %w", what, err))
	}
	return &fetched{tmp: u.path, info: info, digest: d, compression: u.compression, sum: u.sum}, nil
}

// loopbackURL reports whether u names this machine's loopback (localhost,
// 127.0.0.0/8, ::1): plain http there never crosses a network, so nobody on
// a path can change what it says (browsers treat such origins as
// potentially trustworthy for the same reason). Redirects are not
// exempted: a server elsewhere that sends Kohaku to its loopback is refused
// like any other downgrade.
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	h := p.Hostname()
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
