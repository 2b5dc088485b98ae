# The configuration that matches the hand-made domain in web-1.xml: its
# first plan is empty. What the configuration leaves unset (type, machine,
# firmware, cpu_mode, guest_agent, serial_log_path) keeps the domain's own
# value; what it sets must be what the domain has.
import {
  to = kohaku_vm.web
  id = "web-1"
}

resource "kohaku_vm" "web" {
  name       = "web-1"
  vcpu       = 2
  memory_mib = 2048

  # The file /var/lib/libvirt/images/web-1.qcow2 is a volume of the
  # "default" pool, whose directory holds it.
  disk = {
    pool   = "default"
    volume = "web-1.qcow2"
  }

  network_interface = [{
    type   = "network"
    source = "default"
    mac    = "52:54:00:12:34:56"
  }]

  # virsh define does not start the domain; true would start it.
  running = false
}
