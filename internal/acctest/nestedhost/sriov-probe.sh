#!/usr/bin/env bash
# sriov-probe.sh: the NVIDIA SR-IOV vGPU path, by hand, in the nested host,
# printed as a transcript with timings. The SR-IOV stand-in (QEMU's NVMe
# controller, KOHAKU_TEST_NESTED_SRIOV_PF, on L1's nvme driver) plays the GPU
# and the NVIDIA stand-in module gives its VFs NVIDIA's vGPU files
# (nvidia/creatable_vgpu_types, nvidia/current_vgpu_type; README.md,
# "SR-IOV vGPU"). Over L1's sshd it enables 2 VFs, lists the creatable
# types, sets a type on VF 0 and shows what VF 1 may still take; through L1's
# libvirt it starts a small L2 domain (type qemu, nothing to boot) with VF 0
# as a <hostdev managed='yes'>, which moves VF 0 to vfio-pci, and asks L2's
# QEMU for its PCI devices; then it destroys the domain, clears the type and
# disables the VFs again. A second L2 domain then takes VF 0 with
# managed='no' after nodedev-detach, as NVIDIA's guide gives a VF to a VM.
# Needs the nested host up and its settings:
# eval "$(bash internal/acctest/nestedhost/nestedhost.sh env)".
# Not part of make check; 1.5-2.5 minutes (each ssh round trip to L1 costs 1-3 s).
set -euo pipefail

uri=${KOHAKU_TEST_NESTED_URI:?load the nested host settings: eval "\$(bash internal/acctest/nestedhost/nestedhost.sh env)"}
ssh_uri=${KOHAKU_TEST_NESTED_SSH_URI:?}
pf=${KOHAKU_TEST_NESTED_SRIOV_PF:?the nested host has no SR-IOV stand-in: boot it with this nestedhost.sh}
re='^qemu\+ssh://root@127\.0\.0\.1:([0-9]+)/system\?keyfile=([^&]+)&known_hosts=([^&]+)$'
[[ $ssh_uri =~ $re ]] || { echo "unexpected KOHAKU_TEST_NESTED_SSH_URI: $ssh_uri" >&2; exit 1; }
port=${BASH_REMATCH[1]} key=${BASH_REMATCH[2]} known=${BASH_REMATCH[3]}
l1() { timeout 180 ssh -i "$key" -o UserKnownHostsFile="$known" -o BatchMode=yes -p "$port" root@127.0.0.1 "$@"; }
v() { timeout 180 virsh -q -c "$uri" "$@"; }
# step TITLE COMMAND...: print the title, run the command, print how long it took
t_all=$(date +%s%N)
step() {
	local title=$1 t0 rc=0
	shift
	echo "--- $title"
	t0=$(date +%s%N)
	"$@" || rc=$?
	printf '    (%d ms%s)\n' $((($(date +%s%N) - t0) / 1000000)) "$([[ $rc == 0 ]] || echo ", exit $rc")"
	return "$rc"
}

dom=kohaku-sriov-probe
sys=/sys/bus/pci/devices/$pf
work=$(mktemp -d)
cleanup() {
	v destroy "$dom" >/dev/null 2>&1 || true
	v undefine "$dom" >/dev/null 2>&1 || true
	l1 "for f in $sys/virtfn*/nvidia/current_vgpu_type; do [ -e \"\$f\" ] && echo 0 >\"\$f\"; done; echo 0 >$sys/sriov_numvfs" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# vf_list: one line per VF of the PF: address, IOMMU group, driver
vf_list() {
	l1 "for l in $sys/virtfn*; do d=\$(readlink -f \$l); g=\$(readlink \$d/iommu_group); dr=\$(readlink \$d/driver); echo \"    \${l##*/} \${d##*/}: IOMMU group \${g##*/}, driver \${dr##*/}\"; done"
}
show() { # $1 = VF address, $2 = file in its nvidia/ directory
	l1 "echo \"    \$ cat $1/nvidia/$2\"; sed 's/^/    /' /sys/bus/pci/devices/$1/nvidia/$2"
}
# in_l1 COMMAND: run a shell command in L1 and say how long it took there
# (each ssh round trip to L1 under TCG costs 1-3 s of the step's time)
in_l1() {
	l1 "t0=\$(date +%s%N); $1; rc=\$?; echo \"    (in L1: \$(((\$(date +%s%N) - t0) / 1000000)) ms)\"; exit \$rc"
}
set_type() { # $1 = VF address, $2 = type id; prints the kernel's answer
	l1 "if err=\$({ echo $2 >/sys/bus/pci/devices/$1/nvidia/current_vgpu_type; } 2>&1); then echo \"    $2: accepted\"; dmesg | grep nvidia-standin | tail -n1 | sed 's/^/    dmesg: /'; else echo \"    $2: refused: \${err##*: }\"; fi"
}

echo "L1: $(l1 'uname -r'); NVIDIA stand-in $(l1 'cat /sys/module/nvidia/version'); PF $pf ($(l1 "lspci -nns $pf | cut -d' ' -f2-"))"
step "the PF: driver, SR-IOV" l1 "echo \"    driver \$(basename \$(readlink $sys/driver)), sriov_totalvfs \$(cat $sys/sriov_totalvfs), sriov_numvfs \$(cat $sys/sriov_numvfs)\""
[[ $(l1 "cat $sys/sriov_numvfs") == 0 ]] || { echo "the PF has VFs already: another probe or test is using it" >&2; exit 1; }
step "enable 2 VFs, unbound (sriov_drivers_autoprobe=0)" in_l1 "echo 0 >$sys/sriov_drivers_autoprobe && echo 2 >$sys/sriov_numvfs"
step "the VFs" vf_list
mapfile -t vfs < <(l1 "for l in $sys/virtfn0 $sys/virtfn1; do d=\$(readlink -f \$l); echo \${d##*/}; done")
vf0=${vfs[0]} vf1=${vfs[1]}
step "VF 0's vGPU files" l1 "ls -l /sys/bus/pci/devices/$vf0/nvidia/ | tail -n +2 | sed 's/^/    /'"
step "creatable on VF 0 (no type set anywhere)" show "$vf0" creatable_vgpu_types
step "VF 0 current type" show "$vf0" current_vgpu_type
step "set VF 0 to 1156 (L40S-24Q)" set_type "$vf0" 1156
step "VF 0 current type" show "$vf0" current_vgpu_type
step "creatable on VF 0 (it has a type)" show "$vf0" creatable_vgpu_types
step "creatable on VF 1 (only VF 0's type, one more 24Q fits)" show "$vf1" creatable_vgpu_types
step "set VF 1 to 1155 (another type: not creatable)" set_type "$vf1" 1155
step "set VF 0 to 1157 (VF 0 has a type)" set_type "$vf0" 1157

d=${vf0%%:*} rest=${vf0#*:}
b=${rest%%:*} rest=${rest#*:}
s=${rest%%.*} f=${rest#*.}
node=pci_${vf0//[:.]/_}
# info_pci_hostdev: the block of L2 QEMU's `info pci` that is hostdev0
info_pci_hostdev() {
	local out
	out=$(v qemu-monitor-command --hmp "$dom" 'info pci')
	awk '/^ *Bus /{ if (b ~ /hostdev0/) print b; b = $0; next } { b = b "\n" $0 } END { if (b ~ /hostdev0/) print b }' <<<"$out" | sed 's/^/    /'
	grep -q hostdev0 <<<"$out"
}
# l2 yes|no: an L2 domain with VF 0 as a hostdev, managed or not
l2() {
	cat >"$work/dom.xml" <<EOF
<domain type='qemu'>
  <name>$dom</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='$1'><driver name='vfio'/>
      <source><address domain='0x$d' bus='0x$b' slot='0x$s' function='0x$f'/></source>
    </hostdev>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
	echo "=== L2 domain, VF 0 as a hostdev with managed='$1':"
	sed 's/^/    /' "$work/dom.xml"
	step "define" v define "$work/dom.xml"
	if [[ $1 == yes ]]; then
		step "start (libvirt moves VF 0 to vfio-pci itself)" v start "$dom"
	else
		step "virsh nodedev-detach $node --driver vfio (VF 0 to vfio-pci)" v nodedev-detach "$node" --driver vfio
		step "start (libvirt leaves VF 0's driver alone)" v start "$dom"
	fi
	step "the VFs while L2 runs" vf_list
	step "L2 QEMU's info pci: the VF, id hostdev0" info_pci_hostdev
	step "VF 0 keeps its type while assigned" show "$vf0" current_vgpu_type
	if [[ $1 == yes ]]; then
		step "destroy (libvirt gives VF 0 back)" v destroy "$dom"
	else
		step "destroy" v destroy "$dom"
		step "the VFs after destroy (VF 0 still on vfio-pci)" vf_list
		step "virsh nodedev-reattach $node" v nodedev-reattach "$node"
	fi
	step "undefine" v undefine "$dom"
	step "the VFs after" vf_list
}
l2 yes
# how NVIDIA's guide gives a VF to a VM (README.md): the VF stays on the
# driver that holds it (there nvidia's VFIO variant driver; here vfio-pci)
l2 no
step "clear VF 0's type" set_type "$vf0" 0
step "creatable on VF 1 (all types again)" show "$vf1" creatable_vgpu_types
step "disable the VFs" in_l1 "echo 0 >$sys/sriov_numvfs; ls -d $sys/virtfn* 2>/dev/null | wc -l | sed 's/^/    VFs left: /'"
echo "total $((($(date +%s%N) - t_all) / 1000000)) ms"
