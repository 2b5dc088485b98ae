// Package vmlife runs a VM's life on a libvirt host, knowing nothing of
// Terraform: it resolves a domain spec against the host (seed MACs, shared
// folders, GPU groups, disk format), creates the VM with a rollback of every
// step, updates it by redefining and restarting, reads it into a plain view,
// deletes it with a graceful shutdown, and moves it cold to another host.
//
// It talks to the host through Host, a small interface defined here and
// satisfied by *virt.Client, so every step and its failure can be tested
// with a fake host.
package vmlife
