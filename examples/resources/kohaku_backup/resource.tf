# A database VM's nightly snapshot, with its data disk backed up into a pool
# on another host of the fleet, and a VM there made from the backup.
provider "kohaku" {
  uri = "qemu:///system"
  hosts = {
    vault = { uri = "qemu+ssh://backup@vault.example.com/system" }
  }
}

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

resource "kohaku_snapshot" "nightly" {
  vm   = kohaku_vm.db.id
  name = "nightly"
}

resource "kohaku_pool" "backups" {
  host = "vault"
  name = "backups"
  path = "/srv/backups"
}

# The snapshot's copy of the pgdata disk, streamed to vault, verified by
# digest (sha256 equals the snapshot's for the disk), with its manifest
# db-pgdata.nightly.qcow2.kohaku-backup beside it.
resource "kohaku_backup" "pgdata" {
  snapshot = kohaku_snapshot.nightly.id
  disk     = "pgdata"
  host     = "vault"
  pool     = kohaku_pool.backups.name
  name     = "db-pgdata.nightly.qcow2"
}

# Restored on vault: the host copies the backup into a new volume of this
# VM's (db-restore-pgdata.qcow2 in default); destroying the VM deletes that
# copy, never the backup.
resource "kohaku_vm" "db_restore" {
  host       = "vault"
  name       = "db-restore"
  vcpu       = 2
  memory_mib = 4096
  running    = false
  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  data_disks        = [{ name = "pgdata", source = kohaku_backup.pgdata.id }]
  network_interface = [{ type = "network", source = "default" }]
}
