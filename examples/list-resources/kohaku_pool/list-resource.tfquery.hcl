# terraform query lists the directory pools of the host, libvirt's default
# pool and hand-made ones included; terraform query
# -generate-config-out=adopt.tf writes a kohaku_pool block and an import
# block for each, which the next apply adopts without changing the pool.
list "kohaku_pool" "all" {
  provider = kohaku
}
