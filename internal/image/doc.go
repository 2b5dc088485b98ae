// Package image fetches a vendor's cloud disk image (from an http(s) URL, a
// file:// URL or a local path), verifies it against an expected digest,
// decompresses it (xz, gzip, zstd or bzip2, optionally wrapped in a tar
// archive) and checks that the result is a plain qcow2 or raw disk image that
// is safe to hand to libvirt: no backing file, no external data file, no
// encryption, and not some other container format.
//
// Everything is streamed: the digest is computed while the source bytes are
// read, the decompressed image is written straight to a temporary file in the
// cache directory, and memory use does not depend on the size of the image.
//
// Images are kept in a Cache directory, keyed by the expected digest when one
// is known (so two URLs serving the same image share one entry) or else by
// the source URL, in which case the entry is revalidated with a conditional
// GET on every Fetch. Concurrent Fetches of the same entry, from goroutines of
// one process or from several processes, result in one download; the others
// wait for it and share the entry. A Result holds a shared lock on its entry
// until it is released, and the cache is trimmed to its size bound by evicting
// the least recently used entries that nobody holds. An entry records the
// size and SHA-256 of its stored image, and Result.Open checks them as the
// image is read back, so an entry changed after it was stored fails the read
// (and is evicted) instead of being uploaded.
package image
