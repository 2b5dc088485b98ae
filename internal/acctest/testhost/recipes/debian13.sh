#!/usr/bin/env bash
# debian13.sh MIRROR WORK_DIR: the recipe of the Debian 13 guest image, the
# second guest generation: cloud-init 25.x renders network-config with netplan
# for systemd-networkd (systemd-resolved for DNS); no ifupdown, dhclient or
# net-tools. testhost.sh runs it in an empty work dir; its cache key hashes
# this file, debian.sh and the mirror.
set -euo pipefail

IMAGE_SUITE=trixie
IMAGE_VARIANT=minbase
IMAGE_SIZE=3G
IMAGE_INCLUDE=systemd-sysv,udev,cloud-init,iproute2,netplan.io,systemd-resolved,openssh-server,qemu-guest-agent,initramfs-tools,zstd,curl,ca-certificates,netbase,kmod,python3
IMAGE_KERNEL=linux-image-amd64

image_customize() { # $1 = unpacked root tree
	local t=$1
	guest_names "$t"
	# resolved's stub (not the build host's copy); networkd is disabled by default in Debian
	ln -sfn ../run/systemd/resolve/stub-resolv.conf "$t/etc/resolv.conf"
	chroot "$t" systemctl enable -q systemd-networkd.service systemd-resolved.service serial-getty@ttyS0.service
	# minbase trixie has no locales (locale-gen fails) and no resize2fs
	cat >"$t/etc/cloud/cloud.cfg.d/99-kohaku-testhost.cfg" <<'CFG'
datasource_list: [ NoCloud, ConfigDrive, None ]
locale: C.UTF-8
grub_dpkg:
  enabled: false
resize_rootfs: false
ssh_genkeytypes: [ ed25519, ecdsa ]
CFG
	: >"$t/etc/machine-id"
	rm -f "$t/var/lib/dbus/machine-id" "$t"/etc/ssh/ssh_host_*
	compgen -G "$t/usr/lib/modules/*/kernel/fs/9p/9p.ko*" >/dev/null || { echo "no 9p module in guest kernel" >&2; return 1; }
	compgen -G "$t/usr/lib/modules/*/kernel/net/9p/9pnet_virtio.ko*" >/dev/null || { echo "no 9pnet_virtio module in guest kernel" >&2; return 1; }
	compgen -G "$t/etc/systemd/system/*.wants/cloud-init*.service" >/dev/null || { echo "cloud-init units not enabled" >&2; return 1; }
	[[ -x $t/usr/sbin/netplan && -L $t/etc/systemd/system/multi-user.target.wants/systemd-networkd.service ]] || { echo "netplan or networkd missing" >&2; return 1; }
	[[ ! -e $t/usr/sbin/ifup && ! -e $t/usr/sbin/route && ! -e $t/sbin/ifup ]] || { echo "ifupdown or net-tools in the image" >&2; return 1; }
}

# shellcheck source=debian.sh
. "${BASH_SOURCE[0]%/*}/debian.sh"
debian_build_into "$@"
