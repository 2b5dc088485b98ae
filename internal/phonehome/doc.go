// Package phonehome is how a guest tells the provider it is ready: an HTTP
// listener that accepts cloud-init's phone_home POST (or a JSON report from an
// in-guest reporter) at a per-seed secret URL and wakes the kohaku_vm Create
// that is waiting for that token.
//
// It is pure Go: no libvirt and no Terraform. ParseReport is exported so that
// other transports (a virtio-serial channel carrying one JSON line) share the
// same parser, and Server.Deliver lets them wake the same waiter.
package phonehome
