# Three ways to wait for a guest: the report channel (the default), the QEMU
# guest agent for an image without python3 or systemd, and not at all.

resource "kohaku_seed" "strict" {
  name    = "strict-seed.iso"
  pool    = "default"
  network = [{ addresses = ["192.168.122.10/24"], gateway4 = "192.168.122.1", nameservers = ["192.168.122.1"] }]
}

# Waits over the VM's report channel (wait_for = "auto" picks it because the
# seed has the first-boot reporter), and fails the create when the guest does
# not have what the seed declared (here: the address, the default route and
# the name server), destroying what it made.
resource "kohaku_vm" "strict" {
  name       = "strict"
  memory_mib = 2048
  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  seed_id           = kohaku_seed.strict.id
  network_interface = [{ type = "network", source = "default" }]

  wait_for           = "auto"
  on_config_mismatch = "fail"
  on_ready_failure   = "destroy"

  timeouts {
    create = "10m"
  }
}

# An image without python3 or systemd: no first-boot reporter, so ask the
# QEMU guest agent whether cloud-init has finished.
resource "kohaku_seed" "minimal" {
  name           = "minimal-seed.iso"
  pool           = "default"
  report_channel = false
  guest_agent    = true
}

resource "kohaku_vm" "minimal" {
  name       = "minimal"
  memory_mib = 1024
  disk = {
    base_pool   = "default"
    base_volume = "minimal.qcow2"
  }
  seed_id     = kohaku_seed.minimal.id
  guest_agent = true
  wait_for    = "guest_agent"
}

output "strict_ready" {
  value = "${kohaku_vm.strict.guest.ready_via} after ${kohaku_vm.strict.guest.seconds_to_ready} s: ${kohaku_vm.strict.guest.cloud_init_status}"
}
