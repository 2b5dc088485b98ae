data "kohaku_host" "this" {}

# Use software emulation where the host offers no KVM.
locals {
  domain_type = data.kohaku_host.this.kvm_available ? "kvm" : "qemu"
}

output "libvirt" {
  value = "${data.kohaku_host.this.hostname}: libvirt ${data.kohaku_host.this.libvirt_version}, ${data.kohaku_host.this.hypervisor_type} ${data.kohaku_host.this.hypervisor_version}, domain type ${local.domain_type}"
}

output "pools" {
  value = { for p in data.kohaku_host.this.pools : p.name => p.available_bytes }
}
