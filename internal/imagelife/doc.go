// Package imagelife is a cloud image's life on a libvirt host: uploading
// what internal/image fetched and verified into a pool, copying an image
// from one host's pool to another's (streamed through this process and
// verified by digest), reading its volume back, and deleting it only when
// no overlay is backed by it, behind small host interfaces. The Terraform
// layer turns its results into state and diagnostics.
package imagelife
