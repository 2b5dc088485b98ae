# The GPUs' VFs, enabled first (see kohaku_gpu_sriov).
resource "kohaku_gpu_sriov" "l40s" {
  host = "gpu1"
  gpu  = "0000:3d:00.0"
}

# Ask for one vGPU of a type anywhere in the fleet: Kohaku finds a GPU that
# offers it (packing: a GPU already running the type first), sets the type
# on a free virtual function and readies it for passthrough. The choice is
# kept: later plans never move it.
resource "kohaku_vgpu" "inference" {
  type  = "NVIDIA L40S-12Q" # or "L40S-12Q", or the type's id on the host
  hosts = ["gpu1", "gpu2"]

  depends_on = [kohaku_gpu_sriov.l40s]
}

resource "kohaku_vm" "inference" {
  name       = "inference-1"
  host       = kohaku_vgpu.inference.host
  vcpu       = 8
  memory_mib = 32768

  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }

  hostdevs = [kohaku_vgpu.inference.address]
}

# Or name the GPU: a VF of that GPU, on that host.
resource "kohaku_vgpu" "pinned" {
  host = "gpu1"
  gpu  = kohaku_gpu_sriov.l40s.gpu
  type = "L40S-12Q"
}
