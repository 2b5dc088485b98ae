# Return the VM db's disks to its snapshot before-upgrade (the ids of the
# kohaku_vm and kohaku_snapshot in the kohaku_snapshot example; in the same
# configuration, write kohaku_vm.db.id and kohaku_snapshot.before_upgrade.id).
# The VM is shut down cleanly, its disks are made again from the snapshot,
# and it is started again if it was running:
#   terraform apply -invoke=action.kohaku_vm_revert.before_upgrade
action "kohaku_vm_revert" "before_upgrade" {
  config {
    vm       = "5a1d9c4e-3f00-4b2a-9c1e-0d2f6b7a8e91"
    snapshot = "5a1d9c4e-3f00-4b2a-9c1e-0d2f6b7a8e91/before-upgrade"
    timeout  = "20m"
  }
}
