#!/usr/bin/env bash
# bigbar-probe.sh: whether an L2 guest's firmware assigns the nested host's
# 256 GiB BAR (the ivshmem-plain stand-in, KOHAKU_TEST_NESTED_BIGBAR), under
# SeaBIOS and OVMF, with no 64-bit window set and with the window Kohaku
# would set for it (pcihole64, and OVMF's X-PciMmio64Mb on the QEMU command
# line). It binds the stand-in to vfio-pci, starts one small L2 domain per
# case with the stand-in as a hostdev and nothing to boot, waits until the
# firmware has enumerated the bus (the SATA controller's BAR 5 assigned),
# prints where the stand-in's BARs went (L2 QEMU's `info pci`, through L1's
# libvirt), and removes the domain; at the end it gives the stand-in back.
# Needs the nested host up and its settings:
# eval "$(bash internal/acctest/nestedhost/nestedhost.sh env)".
# By hand, about 6 minutes; TestAccVM_largeBARWindowAssigned asserts the
# cases that matter through Kohaku in make check.
# Usage: bigbar-probe.sh [FIRMWARE:WINDOW_GIB ...], e.g. uefi:0 uefi:512.
set -euo pipefail

uri=${KOHAKU_TEST_NESTED_URI:?load the nested host settings: eval "\$(bash internal/acctest/nestedhost/nestedhost.sh env)"}
addr=${KOHAKU_TEST_NESTED_BIGBAR:?the nested host has no large-BAR stand-in: boot it with this nestedhost.sh}
name=kohaku-bigbar-probe
node=pci_${addr//[:.]/_}
v() { timeout 120 virsh -q -c "$uri" "$@"; }
work=$(mktemp -d)
cleanup() {
	v destroy "$name" >/dev/null 2>&1 || true
	v undefine --nvram "$name" >/dev/null 2>&1 || true
	v nodedev-reattach "$node" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

domain_xml() { # $1 = bios|uefi, $2 = window in GiB (0: none)
	local os="<type arch='x86_64' machine='q35'>hvm</type>" hole="" cmd=""
	if [[ $1 == uefi ]]; then
		os+="<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>"
		os+="<nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/qemu/nvram/${name}_VARS.fd</nvram>"
	fi
	if (($2 > 0)); then
		hole="<pcihole64 unit='GiB'>$2</pcihole64>"
		[[ $1 == uefi ]] && cmd="<qemu:commandline><qemu:arg value='-fw_cfg'/><qemu:arg value='name=opt/ovmf/X-PciMmio64Mb,string=$(($2 * 1024))'/></qemu:commandline>"
	fi
	local d b s f
	IFS=':.' read -r d b s f <<<"$addr"
	cat <<EOF
<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>$name</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
  <os>$os</os><features><acpi/></features>
  <devices>
    <controller type='pci' model='pcie-root'>$hole</controller>
    <controller type='pci' model='pcie-root-port'/>
    <controller type='pci' model='pcie-root-port'/>
    <hostdev mode='subsystem' type='pci' managed='no'><driver name='vfio'/>
      <source><address domain='0x$d' bus='0x$b' slot='0x$s' function='0x$f'/></source>
    </hostdev>
    <memballoon model='none'/>
  </devices>$cmd
</domain>
EOF
}

probe() { # $1 = bios|uefi, $2 = window in GiB (0: none)
	local t0=$SECONDS out=""
	domain_xml "$1" "$2" >"$work/dom.xml"
	v define "$work/dom.xml" >/dev/null
	v start "$name" >/dev/null
	while ((SECONDS - t0 < 300)); do
		out=$(v qemu-monitor-command --hmp "$name" 'info pci' 2>&1) || true
		if grep -A6 '8086:2922' <<<"$out" | grep -Eq 'BAR5: 32 bit memory at 0x[0-9a-f]{1,7}[^f ]'; then
			break
		fi
		sleep 2
	done
	printf '%s, window %s: after %s s\n' "$1" "$([[ $2 == 0 ]] && echo none || echo "$2 GiB")" "$((SECONDS - t0))"
	grep -A4 '1af4:1110' <<<"$out" | grep 'BAR' | sed 's/^ */    /'
	v destroy "$name" >/dev/null
	v undefine --nvram "$name" >/dev/null
}

v nodedev-detach "$node" --driver vfio >/dev/null
# cases as FIRMWARE:WINDOW_GIB arguments; by default, each firmware with no
# window and with exactly the BAR's 256 GiB, and OVMF with the 512 GiB Kohaku
# sets for it (the span plus room, rounded up to a power of two)
for c in "${@:-bios:0 bios:256 uefi:0 uefi:256 uefi:512}"; do
	for one in $c; do probe "${one%%:*}" "${one##*:}"; done
done
