# terraform query lists the GPUs (and other PCI functions) already bound to
# vfio-pci on the host gpu2 of the provider's hosts map, one per IOMMU group;
# terraform query -generate-config-out=adopt.tf writes a kohaku_gpu_binding
# block and an import block for each, which the next apply adopts without
# unbinding anything.
list "kohaku_gpu_binding" "bound" {
  provider = kohaku
  config {
    host = "gpu2"
  }
}
