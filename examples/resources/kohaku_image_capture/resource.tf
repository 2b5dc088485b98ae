# A VM set up once, captured as a golden image. The VM has the guest agent
# channel and qemu-guest-agent in the guest, so the capture seals it first
# (cloud-init clean; new machine-id and SSH host keys at the next boot),
# shuts it down cleanly, flattens its disk with the Debian image under it
# into a standalone qcow2, and starts it again.
resource "kohaku_seed" "builder" {
  name     = "builder-seed.iso"
  network  = [{ dhcp4 = true }]
  packages = ["qemu-guest-agent"]
}

resource "kohaku_vm" "builder" {
  name       = "builder"
  vcpu       = 4
  memory_mib = 8192
  disk = {
    base_pool   = "default"
    base_volume = "debian-12-genericcloud-amd64.qcow2"
  }
  seed_id           = kohaku_seed.builder.id
  guest_agent       = true
  network_interface = [{ type = "network", source = "default" }]
}

resource "kohaku_image_capture" "golden" {
  vm   = kohaku_vm.builder.id
  pool = "default"
  name = "debian-12-golden.qcow2"

  shutdown_timeout = "3m"
}

# Clones boot from the captured image as from a downloaded one: each gets
# its own overlay, and its own seed makes it a new instance.
resource "kohaku_seed" "worker" {
  count   = 2
  name    = "worker-${count.index}-seed.iso"
  network = [{ dhcp4 = true }]
}

resource "kohaku_vm" "worker" {
  count      = 2
  name       = "worker-${count.index}"
  vcpu       = 4
  memory_mib = 8192
  disk = {
    image = kohaku_image_capture.golden.id
  }
  seed_id           = kohaku_seed.worker[count.index].id
  network_interface = [{ type = "network", source = "default" }]
}
