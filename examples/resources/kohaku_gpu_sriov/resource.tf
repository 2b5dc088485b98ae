# Enable the SR-IOV virtual functions of an L40S on host gpu1 (reached over
# SSH: Kohaku writes the GPU's sriov_numvfs). NVIDIA's vGPU manager must be
# installed on the host; each VF can then be given a vGPU type.
resource "kohaku_gpu_sriov" "l40s" {
  host = "gpu1"
  gpu  = "0000:3d:00.0"
  # num_vfs defaults to all the GPU allows (sriov_totalvfs).
}

output "vfs" {
  value = kohaku_gpu_sriov.l40s.virtual_functions
}
