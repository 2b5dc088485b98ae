//go:build !unix && !windows

package image

import "os"

// tryLockFile always succeeds: this platform has no file locks, so only the
// in-process mutexes serialise Fetches.
func tryLockFile(f *os.File, exclusive bool) (bool, error) { return true, nil }

// unlockFile does nothing on this platform.
func unlockFile(f *os.File) error { return nil }
