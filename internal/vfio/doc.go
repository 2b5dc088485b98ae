// Package vfio plans how a PCI device and the rest of its IOMMU group move from
// their host drivers to vfio-pci, from libvirt's node-device XML alone: which
// functions to bind, what they were bound to before, and why a group must not
// be bound (no IOMMU, a partial group, storage or network devices sharing it).
// It is pure: no libvirt connection, no sysfs.
package vfio
