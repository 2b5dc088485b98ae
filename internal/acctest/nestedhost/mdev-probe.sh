#!/usr/bin/env bash
# mdev-probe.sh: what the nested host's libvirt 9.0 does with mediated devices,
# printed as a transcript. L1's kernel (Debian's) ships the mdev core but none
# of the kernel's sample mdev drivers, so this builds mtty (samples/vfio-mdev)
# for L1's kernel here, from Debian's linux-source and L1's kernel headers
# (apt-get download and dpkg -x into a scratch directory: nothing is
# installed on this machine), loads it into L1, and asks libvirt to list,
# define, autostart and start an mdev, first without mdevctl and then with it,
# and to pass the mdev to a paused domain, whose QEMU is asked what PCI
# devices it has. Everything it adds to L1 is removed again at the end (the
# module's taint stays until L1 reboots). Needs the nested host up and its
# settings: eval "$(bash internal/acctest/nestedhost/nestedhost.sh env)".
# Not part of make check; about 2 minutes.
set -euo pipefail

uri=${KOHAKU_TEST_NESTED_URI:?load the nested host settings: eval "\$(bash internal/acctest/nestedhost/nestedhost.sh env)"}
ssh_uri=${KOHAKU_TEST_NESTED_SSH_URI:?}
re='^qemu\+ssh://root@127\.0\.0\.1:([0-9]+)/system\?keyfile=([^&]+)&known_hosts=([^&]+)$'
[[ $ssh_uri =~ $re ]] || { echo "unexpected KOHAKU_TEST_NESTED_SSH_URI: $ssh_uri" >&2; exit 1; }
port=${BASH_REMATCH[1]} key=${BASH_REMATCH[2]} known=${BASH_REMATCH[3]}
l1() { timeout 180 ssh -i "$key" -o UserKnownHostsFile="$known" -o BatchMode=yes -p "$port" root@127.0.0.1 "$@"; }
v() { echo "\$ virsh $*"; timeout 120 virsh -c "$uri" "$@" 2>&1 || true; }

# L1's image now has mtty and mdevctl (recipes/l1.sh): the probe, which
# removes both at its end, is for an L1 without them
if l1 'test -d /sys/module/mtty || command -v mdevctl' >/dev/null 2>&1; then
	echo "L1 already has mtty or mdevctl (its image ships them): nothing to probe" >&2
	exit 0
fi

uuid=6b6f6861-6b75-4d64-8000-000000000001
name=mdev_${uuid//-/_}_mtty
dom=kohaku-mdev-probe
work=$(mktemp -d)
chmod 755 "$work" # apt-get download runs as _apt
cleanup() {
	timeout 60 virsh -c "$uri" destroy "$dom" >/dev/null 2>&1 || true
	timeout 60 virsh -c "$uri" undefine "$dom" >/dev/null 2>&1 || true
	timeout 60 virsh -c "$uri" nodedev-destroy "$name" >/dev/null 2>&1 || true
	timeout 60 virsh -c "$uri" nodedev-undefine "$name" >/dev/null 2>&1 || true
	l1 'rmmod mtty; rmmod mdev; dpkg -r mdevctl; rm -rf /tmp/kohaku-mdev' >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

kver=$(l1 uname -r)
echo "L1 kernel $kver; sample mdev drivers shipped: $(l1 "find /lib/modules/$kver -name 'mtty*' -o -name 'mdpy*' -o -name 'mbochs*' | wc -l")"
cd "$work"
apt-get download -q linux-source-6.1 "linux-headers-$kver" "linux-headers-${kver%-amd64}-common" linux-kbuild-6.1 mdevctl >/dev/null
for d in linux-*.deb; do dpkg -x "$d" root; done
tar -xJf root/usr/src/linux-source-6.1.tar.xz linux-source-6.1/samples/vfio-mdev/mtty.c
mkdir build && cp linux-source-6.1/samples/vfio-mdev/mtty.c build/ && echo 'obj-m := mtty.o' >build/Kbuild
sed -i "s|/usr/src/|$work/root/usr/src/|g" "root/usr/src/linux-headers-$kver/Makefile"
make -s -C "root/usr/src/linux-headers-$kver" M="$work/build" modules >/dev/null 2>&1
tar -cf - -C build mtty.ko -C .. "$(ls mdevctl_*.deb)" | l1 'mkdir -p /tmp/kohaku-mdev && tar -C /tmp/kohaku-mdev -xf - && modprobe mdev && modprobe vfio && insmod /tmp/kohaku-mdev/mtty.ko'
echo "mtty loaded in L1: parents $(l1 'ls /sys/class/mdev_bus')"

printf '<device>\n  <parent>mtty_mtty</parent>\n  <capability type="mdev">\n    <type id="mtty-2"/>\n    <uuid>%s</uuid>\n  </capability>\n</device>\n' "$uuid" >mdev.xml
v nodedev-list --cap mdev_types
v nodedev-dumpxml mtty_mtty
echo "--- without mdevctl"
v nodedev-create mdev.xml
v nodedev-define mdev.xml
echo "--- with mdevctl (Debian's, installed in L1 for the probe)"
l1 'dpkg -i /tmp/kohaku-mdev/mdevctl_*.deb >/dev/null'
v nodedev-define mdev.xml
v nodedev-autostart "$name"
v nodedev-start "$name"
sleep 2
v nodedev-info "$name"
v nodedev-dumpxml "$name"
printf "<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os><devices><hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='%s'/></source></hostdev><memballoon model='none'/></devices></domain>\n" "$dom" "$uuid" >dom.xml
v define dom.xml
v start --paused "$dom"
echo "\$ virsh qemu-monitor-command --hmp $dom 'info pci' (the mdev as QEMU sees it)"
timeout 60 virsh -c "$uri" qemu-monitor-command --hmp "$dom" 'info pci' | grep -B1 -A2 'hostdev0\|4348:3253' || true
