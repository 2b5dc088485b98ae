# A VM booting a cloud image: its own 40 GiB qcow2 overlay on the shared base
# image, a cloud-init seed on a CD-ROM (the NIC takes the MAC the seed's
# network configuration matches), a NIC on a host bridge, a 9p shared folder
# and a GPU passed through with VFIO. Apply returns once cloud-init in the
# guest has finished: the seed's first-boot reporter writes its report to the
# VM's libvirt channel, which the provider reads over the libvirt connection
# (no network path from the guest to Terraform needed).

# The GPU and the rest of its IOMMU group (its HDMI audio) move to vfio-pci.
resource "kohaku_gpu_binding" "gpu" {
  address = "0000:01:00.0"
}

resource "kohaku_seed" "gpu" {
  name    = "gpu-worker-1-seed.iso"
  network = [{ dhcp4 = true }]
}

resource "kohaku_vm" "gpu" {
  name       = "gpu-worker-1"
  vcpu       = 8
  memory_mib = 32768

  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
    pool        = "default"
    size_gib    = 40
  }

  seed_id = kohaku_seed.gpu.id

  network_interface = [{ type = "bridge", source = "br0" }]

  shared_folder = [{
    source = "/srv/kohaku/shared"
    tag    = "kohaku_shared"
  }]

  # Each binding is passed through whole: the GPU and its HDMI audio become
  # two hostdevs. hostdevs takes further functions bound to vfio-pci by
  # something else, as PCI addresses.
  gpus = [kohaku_gpu_binding.gpu.id]

  # A data-centre GPU's 64-bit BARs (128 GiB + 32 MiB on an H100) do not
  # fit the 32 GiB window firmware opens by default. Left unset,
  # pci_mmio64_gib is sized from the BARs read on the host: 256 for one
  # such card, 512 for two. Set it only to go larger.
  firmware = "uefi"

  # numa_placement = "auto" (the default) binds the VM to the GPU's NUMA
  # node, read from the host: its vCPUs run on that node's CPUs and its
  # memory comes from that node, here as 2 MiB huge pages reserved there.
  # Create refuses, before making anything, what the node cannot give.
  hugepages    = {}
  cpu_topology = { sockets = 1, cores = 4, threads = 2 }

  autostart = true

  # The default: wait for the guest's report, over the channel when the seed
  # has the reporter (report_channel, the default), else over HTTP when it
  # phones home. A report of cloud-init errors fails the apply; the VM is
  # kept, tainted, for inspection.
  wait_for         = "auto"
  on_ready_failure = "keep"

  timeouts {
    create = "15m"
  }
}

output "gpu_worker_known_hosts" {
  value = [for k in values(kohaku_vm.gpu.guest.ssh_host_keys) : "gpu-worker-1 ${k}"]
}

# Direct kernel boot under software emulation (type "qemu") for a host
# without usable KVM, with user-mode networking and no disk of its own: an
# existing volume is used as it is and left in place on destroy.
resource "kohaku_vm" "tiny" {
  name       = "tiny-1"
  type       = "qemu"
  memory_mib = 512

  kernel  = "/var/lib/kohaku/boot/vmlinuz"
  initrd  = "/var/lib/kohaku/boot/initrd.img"
  cmdline = "root=/dev/vda rw console=ttyS0"

  disk = {
    pool   = "default"
    volume = "tiny-1.qcow2"
  }

  network_interface = [{ type = "user" }]

  # No seed here: ask the guest agent whether cloud-init finished.
  wait_for = "guest_agent"

  # tiny-1.qcow2 outlives the VM, so destroy (destroy_shutdown = "auto", the
  # default) asks the guest to power off cleanly first and forces it off
  # after shutdown_timeout. A VM whose every disk goes with it, and no
  # writable shared folder, is powered off at once. "graceful" always asks,
  # "force" never does.
  shutdown_timeout = "60s"
  destroy_shutdown = "auto"
}
