# A GPU VM: the GPU's IOMMU group on vfio-pci, the host's NVIDIA driver
# version installed in the guest, a 64-bit PCI window sized from the GPU's
# BARs, and vCPUs and memory (as huge pages) on the GPU's NUMA node.

data "kohaku_pci_devices" "nvidia" {
  vendor_id    = "10de"
  class_prefix = "03"
}

resource "kohaku_gpu_binding" "gpu" {
  address = data.kohaku_pci_devices.nvidia.devices[0].address
}

resource "kohaku_seed" "trainer" {
  name    = "trainer-seed.iso"
  pool    = "default"
  network = [{ dhcp4 = true }]

  nvidia_driver = {
    version = kohaku_gpu_binding.gpu.nvidia_driver_version
  }
}

resource "kohaku_vm" "trainer" {
  name       = "trainer"
  vcpu       = 16
  memory_mib = 65536
  firmware   = "uefi"

  disk = {
    base_pool   = "default"
    base_volume = "debian-12-generic-amd64.qcow2"
    pool        = "default"
    size_gib    = 200
  }

  seed_id           = kohaku_seed.trainer.id
  network_interface = [{ type = "network", source = "default" }]

  gpus = [kohaku_gpu_binding.gpu.id]

  # pci_mmio64_gib is left unset: Kohaku reads the GPU's BARs on the host
  # and sizes the window (256 GiB for an H100 80GB's 128 GiB + 32 MiB). Set
  # it only to go larger; a value that cannot hold the BARs is refused.

  # numa_placement = "auto" (the default) binds the VM to the GPU's node;
  # hugepages = {} backs its memory with 2 MiB pages reserved on that node.
  hugepages    = {}
  cpu_topology = { sockets = 1, cores = 8, threads = 2 }

  on_config_mismatch = "fail" # fail the create if nvidia-smi does not report the driver

  timeouts {
    create = "30m"
  }
}

output "guest_gpus" {
  value = [for g in kohaku_vm.trainer.guest.gpus : "${g.name} (driver ${g.driver_version}, ${g.memory_mib} MiB)"]
}

output "numa_nodes" {
  value = kohaku_vm.trainer.numa_nodes
}
