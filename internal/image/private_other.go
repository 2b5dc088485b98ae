//go:build !unix

package image

import "os"

// checkPrivateInfo relies on the directory's ACLs where there are no Unix
// permissions.
func checkPrivateInfo(dir string, fi os.FileInfo) error { return nil }

// openNoFollow opens a cache file for reading.
func openNoFollow(path string) (*os.File, error) { return os.Open(path) }

// privateTempDir is the fallback cache directory of a user with no cache
// directory of their own.
func privateTempDir() string { return "kohaku-images-" + os.Getenv("USERNAME") }
