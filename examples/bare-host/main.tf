# A bare host to a VM you can SSH into, in one apply: the host has libvirt
# and nothing else (no storage pool, no network; libvirt's defaults may be
# there or not, they are not used). This configuration makes the storage
# pool, a NAT network with a DHCP reservation for the VM, Debian's cloud
# image in the pool, the VM's cloud-init seed and the VM, ready when apply
# returns; the output is the ssh command. `terraform destroy` removes all of
# it again, the pool last, once it is empty.
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

variable "pool_path" {
  description = "Directory on the host for the pool's volumes; made when missing."
  type        = string
  default     = "/var/lib/libvirt/images/kohaku"
}

variable "subnet" {
  description = "IPv4 subnet of the network this configuration makes: the host is its first address, the VM its tenth."
  type        = string
  default     = "192.168.150.0/24"
}

variable "domain_type" {
  description = "kvm where hardware virtualisation works, qemu (software emulation, minutes to boot) elsewhere."
  type        = string
  default     = "kvm"
}

variable "ssh_public_key_file" {
  description = "Your SSH public key; it may log in as the user debian."
  type        = string
  default     = "~/.ssh/id_ed25519.pub"
}

provider "kohaku" {
  uri = var.uri
}

locals {
  prefix  = split("/", var.subnet)[1]
  address = cidrhost(var.subnet, 10)
  # The VM's MAC: the seed configures the NIC that has it, the VM's NIC
  # takes it from the seed, and the network's DHCP gives it local.address.
  mac = "52:54:00:6b:68:0a"
}

# The pool every volume below goes into: defined, its directory made,
# started and marked to start with the host.
resource "kohaku_pool" "vms" {
  name = "kohaku"
  path = var.pool_path
}

# A NAT network with DHCP, and the VM's address reserved by its MAC, so the
# ssh command is known before the guest boots.
resource "kohaku_network" "vms" {
  name         = "kohaku"
  mode         = "nat"
  ipv4_address = "${cidrhost(var.subnet, 1)}/${local.prefix}"
  dhcp_start   = cidrhost(var.subnet, 100)
  dhcp_end     = cidrhost(var.subnet, 199)

  dhcp_hosts = [
    { mac = local.mac, ip = local.address, name = "web" },
  ]
}

resource "kohaku_image" "debian12" {
  name         = "debian-12-genericcloud-amd64.qcow2"
  pool         = kohaku_pool.vms.name
  source       = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
}

resource "kohaku_seed" "web" {
  name     = "web-seed.iso"
  pool     = kohaku_pool.vms.name
  hostname = "web"

  user = {
    name                = "debian"
    ssh_authorized_keys = [trimspace(file(pathexpand(var.ssh_public_key_file)))]
  }

  # One NIC, the one with the reserved MAC, configured by DHCP.
  network = [{ mac = local.mac, dhcp4 = true }]
}

resource "kohaku_vm" "web" {
  name       = "web"
  type       = var.domain_type
  vcpu       = 2
  memory_mib = 2048
  firmware   = "uefi"

  disk = {
    image    = kohaku_image.debian12.id
    pool     = kohaku_pool.vms.name
    size_gib = 20
  }

  seed_id           = kohaku_seed.web.id
  network_interface = [{ type = "network", source = kohaku_network.vms.name }]

  timeouts {
    create = "15m"
  }
}

output "ssh" {
  description = "Log in to the VM (from the host, or from anywhere that routes to the network)."
  value       = "ssh debian@${local.address}"
}

output "known_hosts" {
  description = "A known_hosts file: the SSH host keys the guest reported, for its address."
  value       = join("", [for k in values(kohaku_vm.web.guest.ssh_host_keys) : "${local.address} ${k}\n"])
}
