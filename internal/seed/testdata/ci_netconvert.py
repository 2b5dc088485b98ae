"""Runs cloud-init's own `devel net-convert` as it behaves in a guest whose
kernel named the NICs as given: cloud-init looks a netplan v2 ethernet's
interface up by MAC among the running system's interfaces (network_state
handle_ethernets), and net-convert's -m only feeds ConfigDrive. So the
lookup is answered from the -m pairs instead of from this machine's NICs.

usage: ci_netconvert.py <net-convert arguments, with -m name,mac pairs>
"""
import sys

from cloudinit import net
from cloudinit.cmd.devel import net_convert
from cloudinit.net import network_state

args = net_convert.get_parser().parse_args(sys.argv[1:])
macs = {}
for item in args.mac or []:
    name, mac = item.split(",", 1)
    macs[mac.lower()] = name


def by_mac(*_a, **_k):
    return {mac: name for mac, name in macs.items()}


def name_of(mac):
    return macs.get(mac.lower())


net.get_interfaces_by_mac = by_mac
network_state.get_interfaces_by_mac = by_mac
net.find_interface_name_from_mac = name_of
network_state.find_interface_name_from_mac = name_of
net_convert.handle_args("net-convert", args)
