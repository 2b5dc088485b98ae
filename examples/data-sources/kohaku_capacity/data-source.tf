# Every host the provider knows (the default connection and the hosts map),
# read fresh on every plan. A host that is down reads as up = false with
# the error; the others are reported all the same.
data "kohaku_capacity" "fleet" {}

output "free_gpus" {
  description = "Free GPUs per host and model, e.g. { gpu1 = { \"GH100 [H100 SXM5 80GB]\" = 3 } }."
  value = {
    for host, c in data.kohaku_capacity.fleet.capacity : host => {
      for m in c.gpu_models : m.model => m.free
    } if c.up
  }
}

output "gpu_holders" {
  description = "Who holds each GPU that is not free: a VM (claimed or in use) or a host process."
  value = {
    for host, c in data.kohaku_capacity.fleet.capacity : host => {
      for g in c.gpus : g.address => "${g.state}: ${g.holder}" if g.state != "free"
    } if c.up
  }
}

output "down" {
  value = { for host, c in data.kohaku_capacity.fleet.capacity : host => c.error if !c.up }
}

output "free_memory_by_node" {
  value = {
    for host, c in data.kohaku_capacity.fleet.capacity : host => {
      for n in c.numa_nodes : n.id => {
        free_memory_mib = n.free_memory_mib
        unpinned_cpus   = n.cpus - n.pinned_cpus
        free_1g_pages   = one([for p in n.free_hugepages : p.free if p.size_kib == 1048576])
      }
    } if c.up
  }
}
