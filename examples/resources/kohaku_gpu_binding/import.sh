# A GPU binding is imported by the PCI address of the GPU (any function of its
# IOMMU group), or as <host>/<address> for a host of the provider's hosts map.
# Functions found on vfio-pci are recorded as they are; their original driver
# is unknown after an import. Functions still on a host driver show as a
# change in the next plan, and apply binds them.
terraform import kohaku_gpu_binding.gpu 0000:01:00.0
terraform import kohaku_gpu_binding.second gpu2/0000:41:00.0
