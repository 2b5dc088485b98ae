// Package mdev creates, persists and removes mediated devices (vGPUs and
// other devices a parent driver splits into instances) through libvirt's
// node-device API, and reads what each parent offers. It knows nothing of
// Terraform nor of domains: it talks to the host through Host, a small
// interface defined here and satisfied by *virt.Client.
package mdev
