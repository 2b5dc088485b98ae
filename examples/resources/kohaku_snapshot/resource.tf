# A VM with a data disk, kept shut off while it is snapshotted: a snapshot
# copies every disk of a stopped VM (the boot overlay with its base image
# merged in, and the data disk) beside it, in the disks' own pool.
resource "kohaku_vm" "db" {
  name       = "db"
  vcpu       = 2
  memory_mib = 4096
  running    = false
  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  data_disks        = [{ name = "pgdata", size_gib = 20 }]
  network_interface = [{ type = "network", source = "default" }]
}

# Volumes db-root.qcow2.snap-before-upgrade and db-pgdata.qcow2.snap-before-upgrade.
# kohaku_vm_revert returns the VM's disks to it.
resource "kohaku_snapshot" "before_upgrade" {
  vm   = kohaku_vm.db.id
  name = "before-upgrade"
}
