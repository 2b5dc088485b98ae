// Package volkind tells what a storage volume holds from the first bytes of
// its content: a disk image a kohaku_image could hold (a self-contained
// qcow2, or a raw disk with a partition table), a cloud-init seed (an ISO
// 9660 image labelled cidata or config-2), or something else. It reads
// bytes only: it knows neither libvirt nor Terraform, and never a volume's
// name.
package volkind
