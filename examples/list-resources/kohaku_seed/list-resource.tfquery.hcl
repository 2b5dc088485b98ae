# terraform query lists the cloud-init seeds (NoCloud or ConfigDrive ISOs)
# among the volumes of every pool whose names start with web-;
# terraform query -generate-config-out=adopt.tf writes a kohaku_seed block
# and an import block for each, which the next apply adopts as they are.
list "kohaku_seed" "web" {
  provider = kohaku
  config {
    name_prefix = "web-"
  }
}
