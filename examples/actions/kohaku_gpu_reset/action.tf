# Reset the GPU at 0000:01:00.0 (and the rest of its IOMMU group), bound to
# vfio-pci, while no VM runs with it:
#   terraform apply -invoke=action.kohaku_gpu_reset.gpu0
action "kohaku_gpu_reset" "gpu0" {
  config {
    address = "0000:01:00.0"
  }
}
