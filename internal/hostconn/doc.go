// Package hostconn is what a connection to a libvirt host is made of,
// without libvirt itself: the connection settings, the parsed libvirt URI,
// the checks of SSH keys and TLS material given as text, and the errors of
// a host that cannot be reached. The provider checks its configuration with
// it, the lifecycle packages match its errors, and internal/virt dials with
// it.
package hostconn
