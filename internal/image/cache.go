package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Cache is a directory of fetched, verified and decompressed disk images.
//
// An entry is named after its key: "sha256-<hex>" or "sha512-<hex>" when the
// expected digest of the source is known (so sources serving the same bytes
// share it), else "src-<hash of the source URL or path>". It consists of
// "<key>.img" (the image, read-only), "<key>.json" (a sidecar describing it)
// and "<key>.lock" (the lock file coordinating processes); temporary files
// are "<key>.<random>.part".
type Cache struct {
	// Dir is the cache directory; "" means DefaultCacheDir(). It is created
	// when needed.
	Dir string
	// MaxBytes bounds the total size (apparent file lengths) of the images
	// and sidecars in Dir; 0 means unbounded. After storing an entry, the
	// least recently used entries not held by a Result are evicted until
	// the total is within the bound; the new entry is never evicted, so a
	// single image larger than the bound is still kept.
	MaxBytes int64
	// Fresh is how long an entry of a URL whose server sent no validator
	// (no ETag, no Last-Modified), which cannot be revalidated, is used
	// without downloading it again: long enough that the creates of one
	// apply (an image for each host of a fleet, some starting after the
	// first download ended) share one download. 0 means DefaultFresh;
	// negative means never.
	Fresh time.Duration
}

// DefaultFresh is Cache.Fresh's default.
const DefaultFresh = 10 * time.Minute

// DefaultCacheDir returns the default cache directory: "kohaku/images" in
// the user's cache directory (os.UserCacheDir), or, for a user with none
// (no HOME, no XDG_CACHE_HOME), "kohaku-images-<uid>" in the temporary
// directory. Either way Fetch creates it private (0700) and refuses it when
// another user owns it or could write to it.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil && d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "kohaku", "images")
	}
	return filepath.Join(os.TempDir(), privateTempDir())
}

// metaVersion is the version of the sidecar format. Version 2 added
// StoredSHA256; an older sidecar is no entry, so its image is downloaded
// again rather than trusted unchecked.
const metaVersion = 2

// staleTempAge is how old a temporary file of an unlocked entry must be
// before it is taken for the leftover of a crashed process and removed.
const staleTempAge = time.Minute

// entryMeta is the JSON sidecar of a cache entry.
type entryMeta struct {
	Version     int    `json:"version"`
	Key         string `json:"key"`
	Source      string `json:"source"`
	Digest      string `json:"digest"`
	Format      string `json:"format"`
	VirtualSize uint64 `json:"virtual_size"`
	// Size and StoredSHA256 are the length and SHA-256 (hex) of the stored
	// image file, computed while it was written; Result.Open checks the
	// bytes it hands out against them.
	Size         int64  `json:"size"`
	StoredSHA256 string `json:"stored_sha256"`
	Compression  string `json:"compression,omitempty"`
	// ETag and LastModified are the validators the server sent with the
	// image, for the conditional GET that revalidates a "src-" entry.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// Stamp is the size and modification time of a local source.
	Stamp string `json:"local_stamp,omitempty"`
	// Stored is when the image was stored, Checked when it was last known
	// to match its source.
	Stored  time.Time `json:"stored"`
	Checked time.Time `json:"checked"`
}

// entryKey is the key of the cache entry for a source.
func entryKey(src source, expected *Digest) string {
	if expected != nil {
		return expected.key()
	}
	sum := sha256.Sum256([]byte(src.id()))
	return "src-" + hex.EncodeToString(sum[:16])
}

// isKey reports whether s has the form of an entry key.
func isKey(s string) bool {
	for _, p := range []string{"sha256-", "sha512-", "src-"} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return isLowerHex(rest)
		}
	}
	return false
}

// file returns the path of the entry file with the given suffix.
func (f *fetcher) file(key, suffix string) string { return filepath.Join(f.dir, key+suffix) }

// loadEntry returns the sidecar of a complete entry, or nil when there is
// none (or it is damaged).
func (f *fetcher) loadEntry(key string) *entryMeta {
	fh, err := f.cd.openNoFollow(key + ".json")
	if err != nil {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(fh, 1<<20))
	fh.Close()
	if err != nil {
		return nil
	}
	var m entryMeta
	if json.Unmarshal(data, &m) != nil || m.Version != metaVersion || m.Key != key {
		return nil
	}
	d, err := ParseDigest(m.Digest)
	if err != nil || !strings.HasPrefix(key, "src-") && d.key() != key {
		return nil
	}
	if m.Format != FormatQCOW2 && m.Format != FormatRaw || len(m.StoredSHA256) != 2*sha256.Size || !isLowerHex(m.StoredSHA256) {
		return nil
	}
	fi, err := f.cd.Lstat(key + ".img")
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != m.Size {
		return nil
	}
	return &m
}

// writeMeta atomically replaces the sidecar of an entry.
func (f *fetcher) writeMeta(key string, m *entryMeta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	t, err := f.cd.CreateTemp(key + ".*.part")
	if err != nil {
		return err
	}
	_, err = t.Write(append(data, '\n'))
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.cd.Rename(t.Name(), key+".json")
	}
	if err != nil {
		_ = f.cd.Remove(t.Name())
	}
	return err
}

// fetchCached serves the image from its cache entry, downloading it first
// when the entry is missing or stale.
func (f *fetcher) fetchCached(ctx context.Context, expected *Digest) (*Result, error) {
	key := entryKey(f.src, expected)
	unlock, err := lockKey(ctx, filepath.Join(f.dir, key))
	if err != nil {
		return nil, err
	}
	defer unlock()
	for attempt := 0; ; attempt++ {
		r, retry, err := f.tryEntry(ctx, key, expected)
		if err != nil || !retry {
			return r, err
		}
		if attempt == 5 {
			return nil, fmt.Errorf("image cache entry %s keeps disappearing (is another process evicting it?)", f.file(key, ".img"))
		}
	}
}

// tryEntry takes a shared lock on the entry and uses it if it is there and
// current; otherwise it takes the lock exclusively, downloads the image and
// goes back to a shared lock. It reports retry when the lock file or entry
// vanished (another process evicted it) between these steps.
func (f *fetcher) tryEntry(ctx context.Context, key string, expected *Digest) (r *Result, retry bool, err error) {
	lk, err := acquireLock(ctx, f.cd, key+".lock", false)
	if err != nil {
		return nil, false, fmt.Errorf("locking image cache entry: %w", err)
	}
	defer func() {
		if r == nil {
			lk.release()
		}
	}()
	if m := f.loadEntry(key); m != nil {
		ok, err := f.reusable(ctx, key, m, expected)
		if err != nil {
			return nil, false, err
		}
		if ok {
			return f.result(key, m, expected, lk), false, nil
		}
	}

	if cur, err := lk.relock(ctx, true); err != nil || !cur {
		return nil, err == nil, err
	}
	m := f.loadEntry(key)
	if m == nil || !f.current(m, expected) {
		// The entry download writes is read again below, once the lock is
		// shared: it may be evicted while the lock changes hands.
		if _, err := f.download(ctx, key, m, expected); err != nil {
			if m == nil {
				lk.remove() // leave nothing behind
			}
			return nil, false, err
		}
	}
	if cur, err := lk.relock(ctx, false); err != nil || !cur {
		return nil, err == nil, err
	}
	if m = f.loadEntry(key); m == nil {
		return nil, true, nil // evicted while the lock changed hands
	}
	if f.downloaded {
		f.evict(key, 0)
	}
	return f.result(key, m, expected, lk), false, nil
}

// current reports whether an entry can be used without asking the source:
// it is keyed by the expected digest, was stored or revalidated since this
// Fetch began (by a Fetch it waited for), or is of an unchanged local file.
func (f *fetcher) current(m *entryMeta, expected *Digest) bool {
	if expected != nil || !m.Checked.Before(f.start) {
		return true
	}
	if !f.src.remote() {
		fi, err := os.Stat(f.src.path)
		return err == nil && localStamp(fi) == m.Stamp
	}
	if m.ETag == "" && m.LastModified == "" {
		fresh := f.cache.Fresh
		if fresh == 0 {
			fresh = DefaultFresh
		}
		return time.Since(m.Checked) < fresh
	}
	return false
}

// reusable reports whether an entry can be used, revalidating a remote
// source's entry with a conditional GET when it has validators.
func (f *fetcher) reusable(ctx context.Context, key string, m *entryMeta, expected *Digest) (bool, error) {
	if f.current(m, expected) {
		return true, nil
	}
	if !f.src.remote() || m.ETag == "" && m.LastModified == "" {
		return false, nil
	}
	o, err := f.open(ctx, m)
	if err != nil {
		return false, err
	}
	o.close()
	if !o.notModified {
		return false, nil // changed: download it under the exclusive lock
	}
	f.revalidated(key, m, o)
	return true, nil
}

// revalidated records a 304 answer in the entry's sidecar (best effort).
func (f *fetcher) revalidated(key string, m *entryMeta, o *opened) {
	if o.etag != "" {
		m.ETag = o.etag
	}
	if o.lastModified != "" {
		m.LastModified = o.lastModified
	}
	m.Checked = time.Now()
	_ = f.writeMeta(key, m) // unrecorded, the next use revalidates again
}

// download fetches the source into the entry, replacing prev (if any). A
// conditional GET answered 304 keeps prev.
func (f *fetcher) download(ctx context.Context, key string, prev *entryMeta, expected *Digest) (*entryMeta, error) {
	o, err := f.open(ctx, prev)
	if err != nil {
		return nil, err
	}
	defer o.close()
	if o.notModified {
		f.revalidated(key, prev, o)
		return prev, nil
	}
	fe, err := f.pipeline(ctx, o, key, expected)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	m := &entryMeta{
		Version:      metaVersion,
		Key:          key,
		Source:       f.src.String(),
		Digest:       fe.digest.String(),
		Format:       fe.info.Format,
		VirtualSize:  fe.info.VirtualSize,
		Size:         fe.info.Size,
		StoredSHA256: fe.sum,
		Compression:  fe.compression,
		ETag:         o.etag,
		LastModified: o.lastModified,
		Stamp:        o.stamp,
		Stored:       now,
		Checked:      now,
	}
	img := f.file(key, ".img")
	err = f.store(key, fe.tmp, img, m)
	if err != nil {
		_ = f.cd.Remove(fe.tmp)
		return nil, fmt.Errorf("storing image in the cache: %w", err)
	}
	f.downloaded = true
	return m, nil
}

// store moves a complete, verified image into place and writes its sidecar.
func (f *fetcher) store(key, tmp, img string, m *entryMeta) error {
	if runtime.GOOS != "windows" {
		if err := f.cd.Chmod(tmp, 0o444); err != nil {
			return err
		}
	}
	// Invalidate the previous entry first: an image without a sidecar is
	// no entry.
	if err := f.cd.Remove(key + ".json"); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := f.cd.Rename(tmp, img); err != nil {
		return err
	}
	if err := f.writeMeta(key, m); err != nil {
		_ = f.cd.Remove(img)
		return err
	}
	return nil
}

// result returns the Result for an entry held with lock lk, marking the
// entry as used now.
func (f *fetcher) result(key string, m *entryMeta, expected *Digest, lk *fileLock) *Result {
	img := f.file(key, ".img")
	now := time.Now()
	_ = f.cd.root.Chtimes(key+".img", now, now) // best effort: a stale time only makes the entry evicted sooner
	d, _ := ParseDigest(m.Digest)
	return &Result{
		Path:             img,
		Format:           m.Format,
		VirtualSize:      m.VirtualSize,
		Size:             m.Size,
		Digest:           d,
		Verified:         f.verified(expected),
		ChecksumOverHTTP: f.sumsOverHTTP,
		SignedBy:         f.signedBy,
		Compression:      m.Compression,
		Downloaded:       f.downloaded,
		release:          lk.release,
		stored:           &storedFile{sha256: m.StoredSHA256, evict: func() { f.evictChanged(key) }},
		dir:              f.cd,
	}
}

// evictChanged removes an entry whose image no longer matches its sidecar
// (see checkedReader), so that the next Fetch downloads it again. It runs
// under a shared lock: holders that opened the image already read through
// their own handles, which check what they read.
func (f *fetcher) evictChanged(key string) {
	_ = f.cd.Remove(key + ".json")
	_ = f.cd.Remove(key + ".img")
}

// evict removes leftovers of crashed Fetches and, when the cache has a size
// bound, the least recently used entries nobody holds until the total size is
// within it, counting writing bytes of keep's image being written (so that
// the bound holds while an entry is written, too). The entry keep is never
// evicted.
func (f *fetcher) evict(keep string, writing int64) {
	des, err := f.cd.readDir()
	if err != nil {
		return
	}
	type entry struct {
		key   string
		size  int64
		mtime time.Time
	}
	byKey := map[string]*entry{}
	var temps []os.DirEntry
	for _, de := range des {
		key, suffix, ok := strings.Cut(de.Name(), ".")
		if !ok || !isKey(key) || !de.Type().IsRegular() {
			continue
		}
		switch {
		case suffix == "img" || suffix == "json":
			fi, err := de.Info()
			if err != nil {
				continue
			}
			e := byKey[key]
			if e == nil {
				e = &entry{key: key}
				byKey[key] = e
			}
			e.size += fi.Size()
			if suffix == "img" {
				e.mtime = fi.ModTime()
			}
		case strings.HasSuffix(suffix, ".part"):
			temps = append(temps, de)
		}
	}

	for _, de := range temps {
		key, _, _ := strings.Cut(de.Name(), ".")
		fi, err := de.Info()
		if key == keep || err != nil || time.Since(fi.ModTime()) < staleTempAge {
			continue
		}
		if lk, _ := tryAcquireLock(f.cd, key+".lock"); lk != nil {
			_ = f.cd.Remove(de.Name())
			if byKey[key] == nil {
				lk.remove()
			}
			lk.release()
		}
	}

	if f.cache.MaxBytes <= 0 {
		return
	}
	total := writing
	list := make([]*entry, 0, len(byKey))
	for _, e := range byKey {
		total += e.size
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].mtime.Before(list[j].mtime) })
	for _, e := range list {
		if total <= f.cache.MaxBytes {
			return
		}
		if e.key == keep {
			continue
		}
		lk, _ := tryAcquireLock(f.cd, e.key+".lock")
		if lk == nil {
			continue // held by a Result or being downloaded
		}
		_ = f.cd.Remove(e.key + ".json")
		_ = f.cd.Remove(e.key + ".img")
		lk.remove()
		lk.release()
		total -= e.size
	}
}
