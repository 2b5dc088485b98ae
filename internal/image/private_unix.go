//go:build unix

package image

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkPrivateInfo refuses a cache directory that another local user
// could fill: one owned by someone else, or writable by group or others.
// Entries there would be trusted (and uploaded as verified) on a later
// Fetch. fi is read through the directory's open handle (openCacheDir).
func checkPrivateInfo(dir string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Getuid(); int(st.Uid) != uid {
		return fmt.Errorf("image cache directory %s is owned by uid %d, not by this user (uid %d): another user "+
			"could plant images in it; use a directory of your own (provider image_cache_dir)", dir, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("image cache directory %s is writable by group or others (mode %#o): another user could "+
			"plant images in it; run chmod 700 %s or use another directory", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// openNoFollow opens a cache file for reading without following a
// symbolic link at its path.
func openNoFollow(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, fmt.Errorf("%s is a symbolic link; cache entries must be plain files", path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// privateTempDir is the fallback cache directory of a user with no cache
// directory of their own: one per user in the temporary directory, checked
// by checkPrivateInfo like any other.
func privateTempDir() string {
	return fmt.Sprintf("kohaku-images-%d", os.Getuid())
}
