// Package seed renders cloud-init seed documents (NoCloud or ConfigDrive v2)
// from a plain Go Spec and builds a byte-for-byte reproducible ISO 9660 image
// holding them; it is pure (bytes in, bytes out) so the kohaku_seed resource
// can stay a thin layer over it.
//
// Render validates a Spec, renders meta-data, user-data, vendor-data and
// network configuration, and packs them with BuildISO. Everything it returns
// is a function of the Spec alone: no clock, no randomness, no host state.
package seed
