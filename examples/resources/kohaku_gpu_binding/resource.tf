# Find the host's NVIDIA display devices and bind the first one, with the
# rest of its IOMMU group (its HDMI audio function), to vfio-pci.
data "kohaku_pci_devices" "nvidia" {
  vendor_id    = "10de"
  class_prefix = "03"
}

resource "kohaku_gpu_binding" "gpu" {
  address = data.kohaku_pci_devices.nvidia.devices[0].address
}

# The guest installs the driver version the host runs (read before the unbind).
resource "kohaku_seed" "worker" {
  name = "gpu-worker-1-seed.iso"
  nvidia_driver = {
    version = kohaku_gpu_binding.gpu.nvidia_driver_version
  }
}

resource "kohaku_vm" "worker" {
  name       = "gpu-worker-1"
  vcpu       = 8
  memory_mib = 32768

  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  seed_id = kohaku_seed.worker.id

  # gpus takes the binding's id and passes every function it bound through
  # (the GPU and its HDMI audio).
  gpus = [kohaku_gpu_binding.gpu.id]
}

# An explicit list documents what moves; it must cover the whole IOMMU group.
# A host reached over tcp or tls cannot be asked for its NVIDIA version: give it.
resource "kohaku_gpu_binding" "second" {
  host                  = "gpu2"
  address               = "0000:41:00.0"
  functions             = ["0000:41:00.0", "0000:41:00.1"]
  nvidia_driver_version = "550.54.14"
}

output "bound" {
  value = { for f in kohaku_gpu_binding.gpu.function_details : f.address => "${f.class_name}: ${f.original_driver} -> ${f.current_driver}" }
}
