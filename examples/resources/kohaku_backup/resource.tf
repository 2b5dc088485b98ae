# The data disk of a nightly snapshot of a database VM (here given by its
# UUID) backed up into a pool on another host of the fleet, and a VM there
# made from the backup.
provider "kohaku" {
  uri = "qemu:///system"
  hosts = {
    vault = { uri = "qemu+ssh://backup@vault.example.com/system" }
  }
}

variable "db_vm_id" {
  type        = string
  description = "The database VM's UUID (a kohaku_vm's id); its data disk is pgdata."
}

resource "kohaku_snapshot" "nightly" {
  vm   = var.db_vm_id
  name = "nightly"
}

resource "kohaku_pool" "backups" {
  host = "vault"
  name = "backups"
  path = "/srv/backups"
}

# The snapshot's copy of the pgdata disk, streamed to vault and verified by
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
# VM's own (db-restore-pgdata.qcow2 in the default pool); destroying the VM
# deletes that copy, never the backup.
resource "kohaku_vm" "db_restore" {
  host       = "vault"
  name       = "db-restore"
  vcpu       = 2
  memory_mib = 4096
  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  data_disks        = [{ name = "pgdata", source = kohaku_backup.pgdata.id }]
  network_interface = [{ type = "network", source = "default" }]
}
