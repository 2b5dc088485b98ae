// Package domain turns a kohaku VM description (Spec) into libvirt domain XML and
// parses the XML libvirt returns back into the same description (Observed), so the
// kohaku_vm resource can create domains and notice changes made behind its back.
//
// It is pure: no libvirt connection and no Terraform. All XML goes through
// libvirt.org/go/libvirtxml.
package domain
