# Kohaku quick start: run `make quickstart` from the repository root. It brings
# a throwaway libvirt host up on this machine, builds the provider and applies
# this configuration against it.
terraform {
  required_providers {
    kohaku = {
      source = "kohaku/kohaku"
    }
  }
}

variable "uri" {
  description = "libvirt URI of the host to use."
  type        = string
  default     = "qemu:///system"
}

provider "kohaku" {
  uri = var.uri
}

data "kohaku_host" "this" {}

output "host" {
  value = {
    hostname      = data.kohaku_host.this.hostname
    libvirt       = data.kohaku_host.this.libvirt_version
    hypervisor    = "${data.kohaku_host.this.hypervisor_type} ${data.kohaku_host.this.hypervisor_version}"
    kvm_available = data.kohaku_host.this.kvm_available
    cpus          = data.kohaku_host.this.cpus
    memory_mib    = data.kohaku_host.this.memory_mib
    pools         = [for p in data.kohaku_host.this.pools : p.name]
  }
}
