// Package virt connects Kohaku to libvirt hosts: it parses libvirt URIs, dials
// every transport libvirt offers without external binaries, bounds each call with
// a deadline, reconnects after a lost connection, and reads what a host offers.
package virt
