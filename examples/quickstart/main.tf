# Kohaku quick start: a vendor's cloud image, from its URL to a VM you can
# log in to, ready when apply returns.
#
# Run `make quickstart` from the repository root: it brings up a throwaway
# libvirt host on this machine (internal/acctest/testhost/testhost.sh
# quickstart) with the kohaku-quickstart network (192.168.123.0/24, DHCP,
# reachable from this machine), installs the provider (make install: into
# ~/.terraform.d/plugins, where terraform init finds it) and applies this
# configuration with the test host's vendor-style Debian 12 cloud image,
# served on loopback with its SHA256SUMS like a vendor's mirror. The image is
# verified, uploaded through libvirt and booted through UEFI by its own boot
# loader. Then it logs in once with the `ssh` output, checking the host keys
# the guest reported. Elsewhere the defaults take Debian's own image and
# libvirt's default network. `make quickstart-destroy` removes it again.
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

variable "image_url" {
  description = "URL of the cloud image (qcow2, raw, or compressed)."
  type        = string
  default     = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
}

variable "image_checksum_url" {
  description = "The vendor's checksum file for the image (SHA256SUMS or SHA512SUMS)."
  type        = string
  default     = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
}

variable "firmware" {
  description = "uefi (OVMF) or bios (SeaBIOS): the image boots through its own boot loader."
  type        = string
  default     = "uefi"
}

variable "domain_type" {
  description = "kvm where hardware virtualisation works, qemu (software emulation) elsewhere."
  type        = string
  default     = "qemu"
}

variable "network" {
  description = "libvirt network the VM joins, with DHCP; it must be reachable from where you run ssh."
  type        = string
  default     = "default"
}

variable "ssh_public_key_file" {
  description = "Your SSH public key; it may log in as the user kohaku. The private key is the same path without .pub."
  type        = string
  default     = "~/.ssh/id_ed25519.pub"
}

# No phone_home block: the guest reports ready over its libvirt channel
# (the seed's report_channel, on by default), so no network path from the
# guest to this machine is needed, over any libvirt transport.
provider "kohaku" {
  uri = var.uri
}

data "kohaku_host" "this" {}

resource "kohaku_image" "debian12" {
  name         = "quickstart-debian-12.qcow2"
  pool         = var.pool
  source       = var.image_url
  checksum_url = var.image_checksum_url
}

resource "kohaku_seed" "quickstart" {
  name     = "quickstart-seed.iso"
  pool     = var.pool
  hostname = "quickstart"

  user = {
    name                = "kohaku"
    ssh_authorized_keys = [trimspace(file(pathexpand(var.ssh_public_key_file)))]
  }

  # One NIC, configured by DHCP from the network below.
  network = [{ dhcp4 = true }]
}

locals {
  # The guest's IPv4 address on its NIC, as the guest itself reported it.
  address = one([
    for a in kohaku_vm.quickstart.guest.addresses : split("/", a.address)[0]
    if a.mac == kohaku_vm.quickstart.network_interface[0].mac && !strcontains(a.address, ":")
  ])
}

resource "kohaku_vm" "quickstart" {
  name       = "quickstart"
  type       = var.domain_type
  vcpu       = 2
  memory_mib = 1024

  firmware = var.firmware

  # The VM's own overlay on the image, booted through firmware by the
  # image's boot loader (no kernel given).
  disk = {
    image = kohaku_image.debian12.id
    pool  = var.pool
  }

  seed_id           = kohaku_seed.quickstart.id
  network_interface = [{ type = "network", source = var.network }]

  timeouts {
    create = "15m"
  }
}

output "host" {
  value = "${data.kohaku_host.this.hostname}: libvirt ${data.kohaku_host.this.libvirt_version}, ${data.kohaku_host.this.hypervisor_type} ${data.kohaku_host.this.hypervisor_version}"
}

output "image" {
  value = "${kohaku_image.debian12.id}: ${kohaku_image.debian12.format}, ${kohaku_image.debian12.virtual_size_bytes} bytes, verified ${kohaku_image.debian12.verified} (${kohaku_image.debian12.digest})"
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

output "ssh" {
  description = "Log in to the VM."
  value       = "ssh -i ${trimsuffix(pathexpand(var.ssh_public_key_file), ".pub")} kohaku@${local.address}"
}

output "known_hosts" {
  description = "A known_hosts file: the SSH host keys the guest reported, for its address."
  value       = join("", [for k in values(kohaku_vm.quickstart.guest.ssh_host_keys) : "${local.address} ${k}\n"])
}
