// Package guestaddr turns what a guest's QEMU agent says of its network
// interfaces into the addresses Kohaku reports (every address of every
// interface but loopback, as `address/prefix`), and bounds the asking so a
// guest whose agent does not answer never slows a refresh. It knows nothing
// of libvirt's wire types or of Terraform: the caller asks the agent.
package guestaddr
