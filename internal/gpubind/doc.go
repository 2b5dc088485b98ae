// Package gpubind applies a vfio binding plan on a host, knowing nothing of
// Terraform: it moves PCI functions to vfio-pci, gives back what it bound
// when a step fails, records each function's original driver, and gives
// functions back to the host. It talks to the host through Host, a small
// interface defined here and satisfied by *virt.Client.
package gpubind
