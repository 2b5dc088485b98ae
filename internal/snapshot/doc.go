// Package snapshot keeps point-in-time copies of the disks a VM owns (its
// boot overlay and the data disks Kohaku made for it) as standalone qcow2
// volumes beside them, and returns a VM's disks to such a copy in an order
// that an interruption at any step cannot leave a VM able to start on a mix
// of old and reverted disks. It works behind the small Host interface; the
// Terraform layer turns its results into state and diagnostics.
package snapshot
