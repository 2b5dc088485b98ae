// Package imagelife is a cloud image's life on a libvirt host: uploading
// what internal/image fetched and verified into a pool, reading its volume
// back, and deleting it only when no overlay is backed by it, behind the
// small Host interface. The Terraform layer turns its results into state
// and diagnostics.
package imagelife
