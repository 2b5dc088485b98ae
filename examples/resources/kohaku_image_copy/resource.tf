# An image captured on the default host, placed on two more hosts of the
# provider's hosts map: streamed from the capture's host through the machine
# running Terraform, and verified against the capture's digest on each.
resource "kohaku_image_capture" "golden" {
  vm   = "builder"
  pool = "default"
  name = "debian-12-golden.qcow2"
}

resource "kohaku_image_copy" "golden" {
  for_each = toset(["gpu-2", "gpu-3"])

  source        = kohaku_image_capture.golden.id
  source_digest = kohaku_image_capture.golden.digest
  host          = each.key
  pool          = "default"
  name          = "debian-12-golden.qcow2"
}

# VMs on those hosts boot it like any image of their own host.
resource "kohaku_vm" "worker" {
  for_each = kohaku_image_copy.golden

  host       = each.key
  name       = "worker-${each.key}"
  vcpu       = 8
  memory_mib = 16384
  disk = {
    image = each.value.id
  }
}
