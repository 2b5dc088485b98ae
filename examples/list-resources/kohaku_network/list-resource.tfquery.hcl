# terraform query lists the networks of a host of the provider's hosts map,
# libvirt's default network and hand-made ones included; terraform query
# -generate-config-out=adopt.tf writes a kohaku_network block and an import
# block for each, which the next apply adopts without changing the network.
list "kohaku_network" "gpu2" {
  provider = kohaku
  config {
    host = "gpu2"
  }
}
