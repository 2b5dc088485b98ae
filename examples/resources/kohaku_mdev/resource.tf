# Find the host's devices that offer mediated devices (vGPU profiles), then
# make one instance of a profile and pass it to a VM.
data "kohaku_pci_devices" "host" {}

locals {
  # The first parent that still has an instance of the profile to give.
  parent = one([
    for p in data.kohaku_pci_devices.host.mdev_parents : p.node_device
    if anytrue([for t in p.mdev_types : t.id == "nvidia-35" && t.available_instances > 0])
  ])
}

resource "kohaku_mdev" "vgpu" {
  parent = local.parent # or a PCI address, e.g. "0000:41:00.0"
  type   = "nvidia-35"
}

resource "kohaku_vm" "worker" {
  name       = "vgpu-worker-1"
  vcpu       = 4
  memory_mib = 8192

  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }

  mdevs = [kohaku_mdev.vgpu.uuid]
}

# A fixed UUID names the device the same way on every apply, e.g. in a
# guest's configuration.
resource "kohaku_mdev" "second" {
  host   = "gpu2"
  parent = "0000:41:00.0"
  type   = "nvidia-35"
  uuid   = "6b6f6861-6b75-4d64-8000-000000000001"
}
