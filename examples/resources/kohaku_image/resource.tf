# Debian 12's generic cloud image, verified against the SHA512SUMS Debian
# publishes next to it, on the default host and on a second host of the
# provider's hosts map: downloaded once (cached on the machine running
# Terraform), uploaded to each host over its libvirt connection.
resource "kohaku_image" "debian12" {
  for_each = toset(["", "gpu-2"])

  host         = each.key == "" ? null : each.key
  pool         = "default"
  name         = "debian-12-genericcloud-amd64.qcow2"
  source       = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"

  timeouts {
    create = "30m"
  }
}

# Debian also ships raw disks in a tar.xz; compression and the tar are
# recognised by content, and the disk.raw inside is what is uploaded.
resource "kohaku_image" "debian12_raw" {
  pool         = "default"
  name         = "debian-12-genericcloud-amd64.raw"
  source       = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.tar.xz"
  checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
}

# The checksum file's signature checked too: SHA512SUMS must be signed by
# the key given (its fingerprint checked against the one Debian publishes
# when you first take it), or the create fails before the image is
# downloaded. checksum_signed_by records the key that signed.
variable "debian_signing_key" {
  type        = string
  description = "ASCII-armored OpenPGP public key that Debian signs its cloud images' SHA512SUMS with."
}

resource "kohaku_image" "debian12_signed" {
  pool                   = "default"
  name                   = "debian-12-genericcloud-amd64-signed.qcow2"
  source                 = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  checksum_url           = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
  checksum_signature_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS.sign"
  checksum_signing_keys  = var.debian_signing_key
}

# A VM boots the image through its own boot loader: firmware, no kernel.
# disk.image takes the image's id, which names its host: one VM per host,
# each on the copy of its own host (a VM given another host's image is
# refused at plan time).
resource "kohaku_vm" "web" {
  for_each = kohaku_image.debian12

  host       = each.value.host
  name       = "web-${each.key == "" ? "default" : each.key}"
  memory_mib = 2048
  vcpu       = 2
  firmware   = "uefi"

  disk = {
    image    = each.value.id
    pool     = "default"
    size_gib = 20
  }
}
