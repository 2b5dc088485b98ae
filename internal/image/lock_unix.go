//go:build unix

package image

import (
	"os"

	"golang.org/x/sys/unix"
)

// tryLockFile takes a shared or exclusive flock on f without waiting and
// reports whether it got it. On a file already locked by f it converts the
// lock (and, failing that, holds none).
func tryLockFile(f *os.File, exclusive bool) (bool, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	return flock(f, how|unix.LOCK_NB)
}

// unlockFile drops the flock held on f.
func unlockFile(f *os.File) error {
	_, err := flock(f, unix.LOCK_UN)
	return err
}

func flock(f *os.File, how int) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Flock(int(fd), how)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if ferr == unix.EWOULDBLOCK {
		return false, nil
	}
	if ferr != nil {
		return false, &os.PathError{Op: "flock", Path: f.Name(), Err: ferr}
	}
	return true, nil
}
