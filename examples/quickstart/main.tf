# Kohaku quick start: one VM that is ready when apply returns.
#
# Run `make quickstart` from the repository root: it brings a throwaway libvirt
# host up on this machine (internal/acctest/testhost/testhost.sh), builds the
# provider and applies this configuration with the test host's Debian 12
# cloud-init image. `make quickstart-destroy` removes it again.
terraform {
  required_version = ">= 1.11"
  required_providers {
    kohaku = {
      source = "kohaku/kohaku"
    }
  }
}

variable "uri" {
  description = "libvirt URI of the host."
  type        = string
  default     = "qemu:///system"
}

variable "pool" {
  description = "Storage pool for the seed and the VM's disk."
  type        = string
  default     = "default"
}

variable "image_pool" {
  description = "Pool holding the base image."
  type        = string
  default     = "kohaku-images"
}

variable "base_volume" {
  description = "Base image volume: a Debian 12 image with cloud-init."
  type        = string
  default     = "rootfs.qcow2"
}

variable "kernel" {
  description = "Kernel to boot the image with (direct kernel boot), on the host."
  type        = string
}

variable "initrd" {
  description = "Initrd that goes with the kernel, on the host."
  type        = string
}

variable "domain_type" {
  description = "kvm where hardware virtualisation works, qemu (software emulation) elsewhere."
  type        = string
  default     = "qemu"
}

variable "ssh_public_key" {
  description = "Key that may log in as kohaku."
  type        = string
  default     = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ you@laptop"
}

# No phone_home block: the guest reports ready over its libvirt channel
# (the seed's report_channel, on by default), so no network path from the
# guest to this machine is needed, over any libvirt transport.
provider "kohaku" {
  uri = var.uri
}

data "kohaku_host" "this" {}

resource "kohaku_seed" "quickstart" {
  name     = "quickstart-seed.iso"
  pool     = var.pool
  hostname = "quickstart"

  user = {
    name                = "kohaku"
    ssh_authorized_keys = [var.ssh_public_key]
  }

  network = [{
    addresses   = ["10.0.2.15/24"]
    gateway4    = "10.0.2.2"
    nameservers = ["10.0.2.3"]
  }]
}

resource "kohaku_vm" "quickstart" {
  name       = "quickstart"
  type       = var.domain_type
  vcpu       = 2
  memory_mib = 1024

  # panic=5: under software emulation an SMP guest kernel now and then
  # oopses while patching its own code; it reboots instead of hanging.
  kernel  = var.kernel
  initrd  = var.initrd
  cmdline = "root=/dev/vda rw console=ttyS0 panic=5"

  disk = {
    base_pool   = var.image_pool
    base_volume = var.base_volume
    pool        = var.pool
  }

  seed_id           = kohaku_seed.quickstart.id
  network_interface = [{ type = "user" }]

  timeouts {
    create = "15m"
  }
}

output "host" {
  value = "${data.kohaku_host.this.hostname}: libvirt ${data.kohaku_host.this.libvirt_version}, ${data.kohaku_host.this.hypervisor_type} ${data.kohaku_host.this.hypervisor_version}"
}

output "ready_via" {
  value = kohaku_vm.quickstart.guest.ready_via
}

output "seconds_to_ready" {
  value = kohaku_vm.quickstart.guest.seconds_to_ready
}

output "cloud_init" {
  value = kohaku_vm.quickstart.guest.cloud_init_status
}

output "addresses" {
  value = [for a in kohaku_vm.quickstart.guest.addresses : "${a.interface} ${a.address}"]
}

output "known_hosts" {
  description = "Lines for ~/.ssh/known_hosts (the guest is at 10.0.2.15 on its user-mode network)."
  value       = [for k in values(kohaku_vm.quickstart.guest.ssh_host_keys) : "10.0.2.15 ${k}"]
}
