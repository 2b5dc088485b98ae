// Package capture makes a golden image from a VM's boot disk: the guest
// sealed through its guest agent so clones boot as new instances, shut down
// cleanly, its disk flattened with its base into a standalone qcow2 volume
// and the result's digest read back, with the VM started again when it was
// running. It works behind the small Host interface; the Terraform layer
// turns its results into state and diagnostics.
package capture
