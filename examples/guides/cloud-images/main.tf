# Cloud images from Debian and Ubuntu, each verified against the checksum
# file its vendor publishes next to it, and a seed that sets up the guest.

# Debian 12 (bookworm): the genericcloud variant, a qcow2, listed in
# SHA512SUMS. Debian 13 (trixie) has the same names under trixie/ and
# debian-13-*.
resource "kohaku_image" "debian12" {
  pool         = "default"
  name         = "debian-12-genericcloud-amd64.qcow2"
  source       = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
}

# Ubuntu 24.04 (noble): the server cloud image is a qcow2 despite its .img
# name (the content decides, not the name), listed in SHA256SUMS.
resource "kohaku_image" "ubuntu2404" {
  pool         = "default"
  name         = "noble-server-cloudimg-amd64.qcow2"
  source       = "https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img"
  checksum_url = "https://cloud-images.ubuntu.com/noble/current/SHA256SUMS"
}

# A digest you already know can be given instead of the checksum file.
resource "kohaku_image" "pinned" {
  pool     = "default"
  name     = "pinned.qcow2"
  source   = "/var/lib/images/pinned.qcow2"
  checksum = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
}

variable "ssh_public_key" {
  type    = string
  default = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ you@laptop"
}

# The seed: the login user and key, packages, a file, and the network per NIC.
resource "kohaku_seed" "app" {
  name     = "app-seed.iso"
  pool     = "default"
  hostname = "app"

  user = {
    name                = "ubuntu"
    ssh_authorized_keys = [var.ssh_public_key]
  }

  timezone = "Europe/Berlin"
  packages = ["htop"]

  write_files = [{
    path    = "/etc/motd"
    content = "Provisioned by Kohaku\n"
  }]

  network = [{ dhcp4 = true }]
}

resource "kohaku_vm" "app" {
  name       = "app"
  vcpu       = 2
  memory_mib = 2048
  firmware   = "uefi"

  disk = {
    image    = kohaku_image.ubuntu2404.id
    pool     = "default"
    size_gib = 20
  }

  seed_id           = kohaku_seed.app.id
  network_interface = [{ type = "network", source = "default" }]

  # The seed's content reaches the guest on a new instance only: replace the
  # VM when the seed changes (or power-cycle it to keep its disk; see the
  # seed page's Updates).
  lifecycle {
    replace_triggered_by = [kohaku_seed.app]
  }
}
