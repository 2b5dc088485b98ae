# Ask for GPUs instead of naming a host and a binding: create picks a host
# of the provider (the default connection and every key of its hosts map),
# claims two free H100s on one NUMA node there, binds them to vfio-pci and
# passes them through, with each vCPU pinned to its own CPU of that node.
# host, placed_gpus and pinned_cpus record the choice, which later plans keep.
resource "kohaku_vm" "train" {
  name       = "train-1"
  vcpu       = 16
  memory_mib = 65536
  # An overlay on a base volume that every candidate host has under the same
  # name (a kohaku_image would pin the VM to the image's host).
  disk = { base_volume = "debian-12.qcow2", base_pool = "images", size_gib = 200 }

  placement {
    gpu {
      count          = 2
      model          = "H100"
      min_memory_gib = 80
    }
    numa_local = true
    pin_cpus   = true             # needs numa_local
    hosts      = ["gpu1", "gpu2"] # default: every host of the provider
    policy     = "pack"           # or "spread"
  }
}

output "train_placed" {
  value = { host = kohaku_vm.train.host, gpus = kohaku_vm.train.placed_gpus, cpus = kohaku_vm.train.pinned_cpus }
}
