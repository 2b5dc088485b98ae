//go:build unix

package image

import (
	"os"
	"syscall"
)

// allocated returns the bytes allocated to the file at p.
func allocated(p string) (int64, bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Blocks * 512, true
}
