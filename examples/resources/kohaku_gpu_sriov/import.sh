# A GPU's enabled virtual functions are imported by the GPU's PCI address, or
# as <host>/<address> for a host of the provider's hosts map.
terraform import kohaku_gpu_sriov.l40s gpu1/0000:3d:00.0
