// Package backup copies a snapshot's copy of one disk to another pool or
// host, where it outlives the VM, the snapshot and their host: streamed and
// verified by digest as an image copy is (imagelife.Copy), then committed
// by a small manifest volume beside it, written only once the copy read
// back as what was read from the snapshot. A volume without its manifest
// (a copy cut off before it was verified) is never taken for a backup.
// It works behind small host interfaces; the Terraform layer turns its
// results into state and diagnostics.
package backup
