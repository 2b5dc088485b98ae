# A network is imported by its name, or as <host>/<name> for a host of the
# provider's hosts map. Its mode, addresses and reservations are read from
# the host.
terraform import kohaku_network.lab lab
terraform import kohaku_network.lan gpu2/lan
