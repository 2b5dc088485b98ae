// Package hosts connects the provider to its libvirt hosts: it turns the
// provider's connection settings into a fleet of lazily dialed hosts and
// hands each resource's lifecycle package the host it works on. It is the
// Terraform layer's one door to its hosts, so the provider's schemas and
// models never name a libvirt type; the connections themselves are made by
// the Connect the provider is given (internal/virt's, which main wires in
// through internal/hosts/libvirthost).
package hosts
