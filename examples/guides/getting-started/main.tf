# Getting started: Debian's cloud image, booted with your SSH key on libvirt's
# default NAT network, ready when apply returns; the output is the ssh command.
terraform {
  required_version = ">= 1.11"
  required_providers {
    kohaku = {
      source = "kohaku/kohaku"
    }
  }
}

variable "uri" {
  description = "libvirt URI of the host, e.g. qemu+ssh://root@gpu1.example.com/system."
  type        = string
  default     = "qemu:///system"
}

variable "ssh_public_key_file" {
  description = "Your SSH public key; it may log in as the user debian."
  type        = string
  default     = "~/.ssh/id_ed25519.pub"
}

provider "kohaku" {
  uri = var.uri
}

resource "kohaku_image" "debian12" {
  name         = "debian-12-genericcloud-amd64.qcow2"
  pool         = "default"
  source       = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
}

resource "kohaku_seed" "web" {
  name     = "web-seed.iso"
  pool     = "default"
  hostname = "web"

  user = {
    name                = "debian"
    ssh_authorized_keys = [trimspace(file(pathexpand(var.ssh_public_key_file)))]
  }

  # One NIC, configured by DHCP from libvirt's default network.
  network = [{ dhcp4 = true }]
}

resource "kohaku_vm" "web" {
  name       = "web"
  vcpu       = 2
  memory_mib = 2048
  firmware   = "uefi"

  disk = {
    image    = kohaku_image.debian12.id
    pool     = "default"
    size_gib = 20
  }

  seed_id           = kohaku_seed.web.id
  network_interface = [{ type = "network", source = "default" }]
}

locals {
  # The guest's IPv4 address on the NIC above, as the guest itself reported it.
  address = one([
    for a in kohaku_vm.web.guest.addresses : split("/", a.address)[0]
    if a.mac == kohaku_vm.web.network_interface[0].mac && !strcontains(a.address, ":")
  ])
}

output "ssh" {
  description = "Log in to the VM."
  value       = "ssh debian@${local.address}"
}

output "known_hosts" {
  description = "A known_hosts file: the SSH host keys the guest reported, for its address."
  value       = join("", [for k in values(kohaku_vm.web.guest.ssh_host_keys) : "${local.address} ${k}\n"])
}
