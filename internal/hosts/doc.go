// Package hosts connects the provider to its libvirt hosts: it turns the
// provider's connection settings into a fleet of lazily dialed hosts and
// hands each resource's lifecycle package the host it works on. It is the
// one door from the Terraform layer to internal/virt, so the provider's
// schemas and models never name a libvirt type.
package hosts
