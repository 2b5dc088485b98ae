// Package vfio plans how a PCI device and the rest of its IOMMU group move from
// their host drivers to vfio-pci, from libvirt's node-device XML alone: which
// functions to bind, what they were bound to before, and why a group must not
// be bound (no IOMMU, a partial group, storage or network devices sharing it).
// It also reads what libvirt does not report, each function's BARs and reset
// methods, from the host's sysfs files, and sizes the 64-bit PCI window a
// guest needs for those BARs. It opens no connection and no file itself: the
// host's files come through the HostFiles interface.
package vfio
