# A NAT network with DHCP, and reservations that can change while guests
# run on it: they are added and removed without restarting the network.
resource "kohaku_network" "lab" {
  name         = "lab"
  ipv4_address = "192.168.131.1/24"
  dhcp_start   = "192.168.131.100"
  dhcp_end     = "192.168.131.199"
  ipv6_address = "fd00:131::1/64"

  dhcp_hosts = [
    { mac = "52:54:00:13:10:01", ip = "192.168.131.10", name = "db" },
    { mac = "52:54:00:13:10:02", ip = "192.168.131.11" },
  ]
}

# Guests that reach only each other and the host.
resource "kohaku_network" "backplane" {
  name         = "backplane"
  mode         = "isolated"
  bridge       = "kbp0"
  ipv4_address = "10.77.0.1/16"
  dhcp_start   = "10.77.1.1"
  dhcp_end     = "10.77.1.254"
}

# Guests on the LAN through a bridge the host already has; the LAN gives
# their addresses.
resource "kohaku_network" "lan" {
  name   = "lan"
  mode   = "bridge"
  bridge = "br0"
}
