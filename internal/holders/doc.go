// Package holders finds what holds a host's PCI functions before they are
// unbound from their driver: processes with the function's device files
// open (the NVIDIA driver's /dev/nvidiaN, the function's sysfs files) and
// nvidia-persistenced. It reads a /proc tree, or the output of a read-only
// script run on the host; it knows neither libvirt nor Terraform.
package holders
