// Package netpool creates, reads, updates and removes a host's libvirt
// storage pools and networks: what kohaku_pool and kohaku_network do on the
// host, sequenced here behind small host interfaces so it can be tested
// with a fake, and the pool and network XML that goes with it.
package netpool
