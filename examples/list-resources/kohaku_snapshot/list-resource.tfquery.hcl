# terraform query lists the snapshots of the VMs on the provider's own host
# (those of one VM with vm = "<name or UUID>"); terraform query
# -generate-config-out=adopt.tf writes a kohaku_snapshot block and an import
# block for each, which the next apply adopts without copying anything.
list "kohaku_snapshot" "all" {
  provider = kohaku
  config {}
}
