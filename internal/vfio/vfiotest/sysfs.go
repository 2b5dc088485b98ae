// Package vfiotest gives unit tests a host's sysfs, read the way the
// provider reads a host's files (vfio.HostFiles): the files that exist,
// the rest left out.
package vfiotest

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing/fstest"
)

// Sysfs is a host's files as a file system rooted at "/", keyed by path
// without the leading slash.
type Sysfs fstest.MapFS

// ReadHostFiles reads paths, at most limit bytes of each; a path that does
// not exist is left out.
func (t Sysfs) ReadHostFiles(_ context.Context, paths []string, limit int64) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := fs.ReadFile(fstest.MapFS(t), strings.TrimPrefix(p, "/"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[p] = b[:min(int64(len(b)), limit)]
	}
	return out, nil
}

// Put writes a file at an absolute path.
func (t Sysfs) Put(path, content string) {
	t[strings.TrimPrefix(path, "/")] = &fstest.MapFile{Data: []byte(content)}
}
