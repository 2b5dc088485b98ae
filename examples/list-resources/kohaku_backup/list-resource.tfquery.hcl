# terraform query lists the backups kept in the backups pool of the host
# vault; terraform query -generate-config-out=adopt.tf writes a
# kohaku_backup block and an import block for each, which the next apply
# adopts without copying anything.
list "kohaku_backup" "vault" {
  provider = kohaku
  config {
    host = "vault"
    pool = "backups"
  }
}
