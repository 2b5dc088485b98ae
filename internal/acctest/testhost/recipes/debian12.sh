#!/usr/bin/env bash
# debian12.sh MIRROR WORK_DIR: the recipe of the Debian 12 guest image
# (cloud-init 22.4, ENI/ifupdown). testhost.sh runs it in an empty work dir;
# its cache key hashes this file, debian.sh and the mirror.
set -euo pipefail

IMAGE_SUITE=bookworm
IMAGE_VARIANT=minbase
IMAGE_SIZE=3G
# linux-image-amd64, NOT linux-image-cloud-amd64: the cloud flavour has no 9p.
# ifupdown + isc-dhcp-client: cloud-init 22.4 renders netplan v2 network-config to
# /etc/network/interfaces.d (ENI renderer) when ifupdown is present; no netplan.io.
# resolvconf: without it the ENI "dns-nameservers" lines of a static config do nothing.
# zstd: initramfs-tools falls back to gzip -9 without it (about 60 s more per initrd).
# dbus: systemd-logind (in systemd) starts only when dbus.service exists, and logind is
# what powers the guest off on the ACPI power button, as in Debian's cloud images.
# minbase has no dbus: without it every graceful shutdown waited its whole timeout.
# (Debian 13's recipe gets dbus through netplan.io and systemd-resolved.)
IMAGE_INCLUDE=systemd-sysv,udev,dbus,cloud-init,iproute2,ifupdown,isc-dhcp-client,resolvconf,openssh-server,qemu-guest-agent,initramfs-tools,zstd,curl,ca-certificates,netbase,kmod,python3
IMAGE_KERNEL=linux-image-amd64

image_customize() { # $1 = unpacked root tree
	local t=$1
	guest_names "$t"
	# mmdebstrap copied the build host's resolv.conf: drop it (resolvconf, fed by
	# dhclient or by ifupdown's dns-nameservers, writes the guest's own)
	rm -f "$t/etc/resolvconf/resolv.conf.d/original"
	if [[ ! -L $t/etc/resolv.conf ]]; then
		rm -f "$t/etc/resolv.conf"
		ln -s ../run/resolvconf/resolv.conf "$t/etc/resolv.conf"
	fi
	# serial console login on ttyS0
	mkdir -p "$t/etc/systemd/system/getty.target.wants"
	ln -sf /lib/systemd/system/serial-getty@.service \
		"$t/etc/systemd/system/getty.target.wants/serial-getty@ttyS0.service"
	# cloud-init: only the seeds kohaku makes (plus None so boot never stalls)
	# locale C.UTF-8 skips locale-gen and no RSA host key skips a 3072-bit keygen:
	# together 40-50 s of a first boot under TCG (user-data can still override both);
	# the image has no GRUB, so cloud-init's grub_dpkg (2.7 s of a boot) has nothing to do
	cat >"$t/etc/cloud/cloud.cfg.d/99-kohaku-testhost.cfg" <<'CFG'
datasource_list: [ NoCloud, ConfigDrive, None ]
locale: C.UTF-8
grub_dpkg:
  enabled: false
ssh_genkeytypes: [ ed25519, ecdsa ]
CFG
	# every VM gets its own machine-id and SSH host keys
	: >"$t/etc/machine-id"
	rm -f "$t/var/lib/dbus/machine-id" "$t"/etc/ssh/ssh_host_*
	# sanity checks on the tree
	compgen -G "$t/lib/modules/*/kernel/fs/9p/9p.ko*" >/dev/null || { echo "no 9p module in guest kernel" >&2; return 1; }
	compgen -G "$t/lib/modules/*/kernel/net/9p/9pnet_virtio.ko*" >/dev/null || { echo "no 9pnet_virtio module in guest kernel" >&2; return 1; }
	compgen -G "$t/etc/systemd/system/*.wants/cloud-init*.service" >/dev/null || { echo "cloud-init units not enabled" >&2; return 1; }
	[[ -x $t/sbin/ifup && -x $t/sbin/dhclient ]] || { echo "ifupdown/dhclient missing" >&2; return 1; }
}

# shellcheck source=debian.sh
. "${BASH_SOURCE[0]%/*}/debian.sh"
debian_build_into "$@"
