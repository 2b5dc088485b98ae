# A VM with two data disks: a new 200 GiB scratch volume that goes with the
# VM, and a dataset volume that outlives it. The seed formats the scratch
# disk on first boot and mounts both by their stable by-id paths, which
# follow each disk's serial, not the order the disks were attached in.

resource "kohaku_seed" "trainer" {
  name    = "trainer-1-seed.iso"
  network = [{ dhcp4 = true }]

  user_data = <<-EOT
    #cloud-config
    disk_setup:
      /dev/disk/by-id/virtio-scratch:
        table_type: gpt
        layout: true
        overwrite: false
    fs_setup:
      - device: /dev/disk/by-id/virtio-scratch
        partition: auto
        filesystem: ext4
        label: scratch
        overwrite: false
    mounts:
      - [/dev/disk/by-id/virtio-scratch-part1, /scratch, ext4, "defaults,nofail,x-systemd.device-timeout=10s", "0", "2"]
      - [/dev/disk/by-id/virtio-datasets, /datasets, ext4, "defaults,nofail,ro,x-systemd.device-timeout=10s", "0", "2"]
  EOT
}

resource "kohaku_vm" "trainer" {
  name       = "trainer-1"
  vcpu       = 8
  memory_mib = 16384

  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
    size_gib    = 40
  }

  seed_id = kohaku_seed.trainer.id

  data_disks = [
    # A new, empty volume trainer-1-scratch.qcow2 in the default pool,
    # deleted with the VM (set keep = true to keep it).
    { name = "scratch", size_gib = 200 },
    # An existing volume, formatted elsewhere: attached as it is and never
    # deleted by Kohaku.
    { name = "datasets", pool = "data", volume = "imagenet.qcow2" },
  ]

  network_interface = [{ type = "network", source = "default" }]
}
