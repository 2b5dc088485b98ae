# The seed matches its network config to a NIC by MAC. The MAC is known at
# plan time from the seed's name alone, so it can also go into a DHCP
# reservation or a firewall rule elsewhere in the configuration.
resource "kohaku_seed" "web" {
  name     = "web-seed.iso"
  pool     = "default"
  hostname = "web"
  network  = [{ dhcp4 = true }]
}

resource "kohaku_vm" "web" {
  name       = "web"
  memory_mib = 1024
  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  seed_id = kohaku_seed.web.id
  network_interface = [{
    type   = "network"
    source = "default"
    mac    = provider::kohaku::seed_mac(kohaku_seed.web.name, 0)
  }]
}

output "web_mac" {
  value = provider::kohaku::seed_mac("web-seed.iso", 0)
}
