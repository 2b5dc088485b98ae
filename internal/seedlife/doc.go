// Package seedlife is a cloud-init seed's life on a libvirt host: storing
// the ISO that internal/seed renders as a volume, reading it back (its
// digest, and what an imported one holds), replacing its content and
// deleting it, behind the small Host interface. The Terraform layer turns
// its results into state and diagnostics.
package seedlife
