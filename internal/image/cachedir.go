package image

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// fileDir is a directory that temporary files, locks and cache entries
// are made in, named relative to it or by the paths its files report.
type fileDir interface {
	CreateTemp(pattern string) (*os.File, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Stat(name string) (fs.FileInfo, error)
	Remove(name string) error
}

// pathDir is a directory used by its path (tests, scratch directories).
type pathDir string

func (d pathDir) name(n string) string {
	if filepath.IsAbs(n) {
		return n
	}
	return filepath.Join(string(d), n)
}

func (d pathDir) CreateTemp(pattern string) (*os.File, error) {
	return os.CreateTemp(string(d), pattern)
}
func (d pathDir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(d.name(name), flag, perm)
}
func (d pathDir) Stat(name string) (fs.FileInfo, error) { return os.Stat(d.name(name)) }
func (d pathDir) Remove(name string) error              { return os.Remove(d.name(name)) }

// cacheDir is the image cache directory, held open from the moment its
// owner and mode were checked on the handle: every later operation is
// relative to that handle (an os.Root), so whoever can write the
// directory's parent and swaps it for a symbolic link or a directory of
// their own after the check changes nothing Kohaku reads or writes. Its
// files are named by their base names (the paths they report are for
// messages).
type cacheDir struct {
	root *os.Root
	path string
}

// openCacheDir opens the cache directory at path, refusing a symbolic
// link, a directory replaced while it was opened, and one another user
// could write (checkPrivateInfo, on the open handle).
func openCacheDir(path string) (*cacheDir, error) {
	before, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("image cache directory: %w", err)
	}
	if !before.IsDir() {
		return nil, fmt.Errorf("image cache directory %s is not a directory (a symbolic link is not accepted)", path)
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("opening image cache directory: %w", err)
	}
	fi, err := root.Stat(".")
	switch {
	case err != nil:
		err = fmt.Errorf("image cache directory: %w", err)
	case !os.SameFile(before, fi):
		err = fmt.Errorf("image cache directory %s was replaced while it was opened (is another user renaming it? "+
			"its parent must be writable by you alone)", path)
	default:
		err = checkPrivateInfo(path, fi)
	}
	if err != nil {
		root.Close()
		return nil, err
	}
	return &cacheDir{root: root, path: path}, nil
}

// base is the name of a cache file relative to the directory.
func (d *cacheDir) base(name string) string { return filepath.Base(name) }

// file is the path of a cache file, for messages.
func (d *cacheDir) file(name string) string { return filepath.Join(d.path, d.base(name)) }

// Close closes the directory's handle.
func (d *cacheDir) Close() error { return d.root.Close() }

// CreateTemp creates a new file whose name is pattern with its last "*"
// replaced by a random string, like os.CreateTemp.
func (d *cacheDir) CreateTemp(pattern string) (*os.File, error) {
	prefix, suffix := pattern, ""
	if i := strings.LastIndex(pattern, "*"); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	for range 100 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		f, err := d.root.OpenFile(prefix+hex.EncodeToString(b[:])+suffix, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("creating a temporary file in %s: too many names taken", d.path)
}

func (d *cacheDir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return d.root.OpenFile(d.base(name), flag, perm)
}
func (d *cacheDir) Stat(name string) (fs.FileInfo, error)  { return d.root.Stat(d.base(name)) }
func (d *cacheDir) Lstat(name string) (fs.FileInfo, error) { return d.root.Lstat(d.base(name)) }
func (d *cacheDir) Remove(name string) error               { return d.root.Remove(d.base(name)) }
func (d *cacheDir) Rename(from, to string) error           { return d.root.Rename(d.base(from), d.base(to)) }
func (d *cacheDir) Chmod(name string, mode fs.FileMode) error {
	return d.root.Chmod(d.base(name), mode)
}

// readDir lists the directory.
func (d *cacheDir) readDir() ([]fs.DirEntry, error) {
	f, err := d.root.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// openNoFollow opens a cache file for reading, refusing one that is not a
// plain file (a symbolic link among them) or that was replaced while it
// was opened.
func (d *cacheDir) openNoFollow(name string) (*os.File, error) {
	fi, err := d.root.Lstat(d.base(name))
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a plain file (a symbolic link?); cache entries must be plain files", d.file(name))
	}
	f, err := d.root.Open(d.base(name))
	if err != nil {
		return nil, err
	}
	if got, err := f.Stat(); err != nil || !os.SameFile(fi, got) {
		f.Close()
		return nil, fmt.Errorf("%s was replaced while it was opened", d.file(name))
	}
	return f, nil
}
