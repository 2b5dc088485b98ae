# terraform query lists the host's domains that Kohaku did not make;
# terraform query -generate-config-out=adopt.tf writes a kohaku_vm block and
# an import block for each, which the next apply adopts without replacing.
list "kohaku_vm" "hand_made" {
  provider = kohaku
  config {
    made_by_kohaku = false
  }
}
