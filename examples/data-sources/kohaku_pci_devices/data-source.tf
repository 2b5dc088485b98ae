# Every display controller of the host (class 03xx), with its IOMMU group.
data "kohaku_pci_devices" "gpus" {
  class_prefix = "03"
}

output "gpus" {
  value = {
    for d in data.kohaku_pci_devices.gpus.devices :
    d.address => "${d.vendor_name} ${d.product_name} (${d.driver}), IOMMU group ${coalesce(d.iommu_group, -1)}: ${join(", ", d.iommu_group_members)}"
  }
}

# NVIDIA 3D controllers (compute cards such as the A100 report class 0302).
data "kohaku_pci_devices" "nvidia_compute" {
  vendor_id    = "10de"
  class_prefix = "0302"
}

output "iommu" {
  value = data.kohaku_pci_devices.gpus.iommu_enabled ? "IOMMU groups present" : "no usable IOMMU: enable VT-d/AMD-Vi and intel_iommu=on or amd_iommu=on"
}
