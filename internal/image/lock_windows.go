//go:build windows

package image

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// tryLockFile takes a shared or exclusive lock on the first byte of f
// without waiting and reports whether it got it. A lock already held through
// f is dropped first (Windows does not convert locks).
func tryLockFile(f *os.File, exclusive bool) (bool, error) {
	unlockFile(f)
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	ol := new(windows.Overlapped)
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "LockFileEx", Path: f.Name(), Err: err}
	}
	return true, nil
}

// unlockFile drops the lock held on f.
func unlockFile(f *os.File) error {
	ol := new(windows.Overlapped)
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, ol)
}
