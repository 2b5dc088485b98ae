// Package hostapi is the language of host operations, without libvirt: the
// values a host's domains, volumes and devices are read and made as, and
// the errors a host operation can be matched against. The lifecycle
// packages' small host interfaces speak it; internal/virt implements them.
package hostapi
