# Return the VM's disks to the snapshot taken before the upgrade (see
# kohaku_snapshot): the VM is shut down cleanly, its disks are made again
# from the snapshot, and it is started again as it was running:
#   terraform apply -invoke=action.kohaku_vm_revert.before_upgrade
action "kohaku_vm_revert" "before_upgrade" {
  config {
    vm       = kohaku_vm.db.id
    snapshot = kohaku_snapshot.before_upgrade.id
    timeout  = "20m"
  }
}
