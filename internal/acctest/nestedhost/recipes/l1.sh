#!/usr/bin/env bash
# l1.sh MIRROR WORK_DIR: the recipe of the nested host's L1 image (Debian 12
# with libvirtd, QEMU, vfio and the NVIDIA stand-in), run by nestedhost.sh in
# an empty work dir; leaves rootfs.raw, vmlinuz, initrd.img, kernel-version,
# nvidia-version, packages.txt, ssh_key and ssh_host_key.pub there. Its cache
# key hashes this file, ../nvidia-standin/nvidia.c and the mirror.
# l1.sh hook-small-initramfs|hook-kernel-modules ROOT_TREE: its mmdebstrap hooks.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
NVIDIA_SRC=${SELF%/*}/../nvidia-standin/nvidia.c
IMAGE_SUITE=bookworm
IMAGE_SIZE=3G
# qemu-utils: libvirt makes qcow2 volumes with qemu-img ("creation of
# non-raw file images is not supported without qemu-img"), as a cross-host
# backup's target needs.
# mdevctl: libvirt 9.0 creates, defines and autostarts mediated devices
# through it ("Cannot find 'mdevctl' in path" without it).
# libvirt-daemon-system brings the config, the systemd units (socket activation)
# and the libvirt-qemu user; seabios + ipxe-qemu are the firmware L2 domains
# need, ovmf the UEFI firmware (the large-BAR test boots L2 under both).
# No recommends: no dnsmasq, apparmor, GUI libraries.
IMAGE_INCLUDE=systemd-sysv,udev,dbus,kmod,iproute2,procps,pciutils,libvirt-daemon-system,libvirt-daemon-driver-qemu,libvirt-clients,qemu-system-x86,seabios,ovmf,ipxe-qemu,initramfs-tools,zstd,openssh-server,mdevctl,qemu-utils
# The NVIDIA driver version the stand-in module declares (../nvidia-standin/nvidia.c,
# part of this recipe's key): what /sys/module/nvidia/version says in L1. The
# image records it in nvidia-version, for nestedhost.sh env.
NVIDIA_STANDIN_VERSION=550.54.15
# The kernel goes in with a second apt run (the initrd is then generated once).
# linux-image-amd64: vfio-pci, intel-iommu, bochs-drm and snd-hda-intel are all there.
IMAGE_KERNEL=linux-image-amd64
# Where mtty's source comes from (the kernel's samples/vfio-mdev/mtty.c).
MTTY_SOURCE_PACKAGE=linux-source-6.1

# hook_kernel_modules builds the out-of-tree modules L1 needs for its
# kernel and installs them, then removes the compiler and headers again. An
# mmdebstrap customize hook (l1.sh hook-kernel-modules ROOT_TREE):
#  - the NVIDIA stand-in (declares NVIDIA_STANDIN_VERSION);
#  - mtty, the kernel's sample mediated-device parent (samples/vfio-mdev),
#    which Debian builds into no package (CONFIG_SAMPLES is off): its source
#    comes from the mirror's linux-source package, read without installing it.
hook_kernel_modules() { # $1 = root tree with its kernel
	local kver src=$1/usr/src/kohaku-modules
	kver=$(find "$1/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n1)
	mkdir -p "$src/nvidia" "$src/mtty"
	cp "$NVIDIA_SRC" "$src/nvidia/nvidia.c"
	printf 'obj-m := nvidia.o\nccflags-y := -DNV_VERSION=\\"%s\\"\n' "$NVIDIA_STANDIN_VERSION" >"$src/nvidia/Kbuild"
	chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends make gcc "linux-headers-$kver"
	chroot "$1" sh -c "cd /usr/src/kohaku-modules && apt-get download -q -o APT::Sandbox::User=root $MTTY_SOURCE_PACKAGE"
	dpkg-deb --fsys-tarfile "$src/$MTTY_SOURCE_PACKAGE"_*.deb | tar -xO "./usr/src/$MTTY_SOURCE_PACKAGE.tar.xz" |
		tar -xJO "$MTTY_SOURCE_PACKAGE/samples/vfio-mdev/mtty.c" >"$src/mtty/mtty.c"
	printf 'obj-m := mtty.o\n' >"$src/mtty/Kbuild"
	local m
	for m in nvidia mtty; do
		chroot "$1" make -C "/lib/modules/$kver/build" M="/usr/src/kohaku-modules/$m" modules
		install -D -m 644 "$src/$m/$m.ko" "$1/lib/modules/$kver/updates/$m.ko"
	done
	chroot "$1" depmod "$kver"
	chroot "$1" modinfo -F version -k "$kver" nvidia | grep -qx "$NVIDIA_STANDIN_VERSION"
	chroot "$1" modinfo -F parm -k "$kver" nvidia | grep -q '^sriov_standin_pf:'
	chroot "$1" modinfo -F depends -k "$kver" mtty | grep -q mdev
	chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --autoremove make gcc "linux-headers-$kver"
	rm -rf "$src"
}

image_customize() { # $1 = unpacked root tree
	local t=$1
	printf '/dev/vda / ext4 defaults 0 1\n' >"$t/etc/fstab"
	printf 'kohaku-nested\n' >"$t/etc/hostname" # the kernel cmdline sets the instance's name
	printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$t/etc/hosts"
	: >"$t/etc/machine-id"
	# root login on the serial console without a password (debugging only)
	mkdir -p "$t/etc/systemd/system/serial-getty@ttyS0.service.d"
	# shellcheck disable=SC2016 # $TERM is for systemd to expand
	printf '[Service]\nExecStart=\nExecStart=-/sbin/agetty --autologin root --noclear --keep-baud 115200,38400,9600 %%I $TERM\n' \
		>"$t/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf"
	# user-mode NIC: a static address, no DHCP wait (QEMU's hostfwd targets
	# 10.0.2.15). Matched by its MAC alone: the e1000e pass-through stand-in is
	# a NIC too; given the same address (as `en*` did), its routes could come
	# first and take the replies to the forwarded port away from this NIC.
	cat >"$t/etc/systemd/network/10-slirp.network" <<'NET'
[Match]
MACAddress=52:54:00:6b:6f:01
[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
DNS=10.0.2.3
LinkLocalAddressing=no
IPv6AcceptRA=no
NET
	# only software emulation: L1's libvirt must offer type='qemu' and nothing else
	cat >"$t/etc/modprobe.d/kohaku-no-kvm.conf" <<'MOD'
blacklist kvm
blacklist kvm_intel
blacklist kvm_amd
install kvm /bin/false
install kvm_intel /bin/false
install kvm_amd /bin/false
MOD
	printf 'vfio\nvfio_iommu_type1\nvfio_pci\n' >"$t/etc/modules-load.d/kohaku-vfio.conf"
	# the GPU stand-in belongs to the NVIDIA stand-in, as a card to nvidia on
	# a GPU host: bochs, which would take QEMU's VGA, is kept out
	printf 'nvidia\n' >"$t/etc/modules-load.d/kohaku-nvidia.conf"
	printf 'blacklist bochs\ninstall bochs /bin/false\n' >"$t/etc/modprobe.d/kohaku-nvidia-standin.conf"
	# mtty registers the mediated-device parent mtty (node device mtty_mtty)
	printf 'mtty\n' >"$t/etc/modules-load.d/kohaku-mtty.conf"
	# sshd, key login for root only: kohaku_gpu_binding reads host files
	# (the NVIDIA version) over qemu+ssh
	printf 'PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\n' \
		>"$t/etc/ssh/sshd_config.d/kohaku.conf"
	# libvirtd over TCP without auth, socket-activated, no idle exit
	sed -i -E '/^[ \t]*(listen_tls|listen_tcp|auth_tcp)[ \t]*=/d' "$t/etc/libvirt/libvirtd.conf"
	printf 'listen_tls = 0\nlisten_tcp = 1\nauth_tcp = "none"\n' >>"$t/etc/libvirt/libvirtd.conf"
	printf 'LIBVIRTD_ARGS=""\n' >"$t/etc/default/libvirtd"
	sed -i -E '/^[ \t]*(user|group|security_driver)[ \t]*=/d' "$t/etc/libvirt/qemu.conf"
	printf 'user = "root"\ngroup = "root"\nsecurity_driver = "none"\n' >>"$t/etc/libvirt/qemu.conf"
	# the default NAT network needs dnsmasq, which is not installed
	rm -f "$t/etc/libvirt/qemu/networks/autostart/default.xml"
	chroot "$t" systemctl enable systemd-networkd.service libvirtd-tcp.socket ssh.service >/dev/null 2>&1
	# nothing to wait for at boot: no logins but root's on the serial console
	# (logind took half a minute under TCG), no guests to resume, no timers
	chroot "$t" systemctl mask systemd-networkd-wait-online.service systemd-logind.service getty@tty1.service \
		libvirt-guests.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
		fstrim.timer >/dev/null 2>&1 || true
	# libvirtd probes every QEMU binary it finds when it starts: one is enough
	rm -f "$t/usr/bin/qemu-system-i386"
	# sanity checks on the tree
	[[ -L $t/etc/systemd/system/sockets.target.wants/libvirtd-tcp.socket ]] || { echo "libvirtd-tcp.socket not enabled" >&2; return 1; }
	[[ -L $t/etc/systemd/system/multi-user.target.wants/systemd-networkd.service ]] || { echo "systemd-networkd not enabled" >&2; return 1; }
	[[ -L $t/etc/systemd/system/multi-user.target.wants/ssh.service && -s $t/etc/ssh/ssh_host_ed25519_key.pub ]] || { echo "sshd not enabled or without a host key" >&2; return 1; }
	compgen -G "$t/lib/modules/*/updates/nvidia.ko" >/dev/null || { echo "no NVIDIA stand-in module in L1's tree" >&2; return 1; }
	compgen -G "$t/lib/modules/*/updates/mtty.ko" >/dev/null || { echo "no mtty module in L1's tree" >&2; return 1; }
	[[ -x $t/usr/bin/mdevctl ]] || { echo "mdevctl missing" >&2; return 1; }
	[[ -x $t/usr/bin/qemu-img ]] || { echo "qemu-img missing" >&2; return 1; }
	compgen -G "$t/lib/modules/*/kernel/drivers/vfio/pci/vfio-pci.ko*" >/dev/null || { echo "no vfio-pci module in L1 kernel" >&2; return 1; }
	[[ -x $t/usr/bin/qemu-system-x86_64 && -x $t/usr/sbin/libvirtd && -f $t/usr/share/seabios/bios.bin && -f $t/usr/share/OVMF/OVMF_CODE_4M.fd ]] || { echo "qemu, libvirtd, seabios or ovmf missing" >&2; return 1; }
	grep -q '^libvirt-qemu:' "$t/etc/passwd" || { echo "user libvirt-qemu missing" >&2; return 1; }
}

# A small initrd: only what mounting /dev/vda needs. Builds in seconds instead
# of half a minute, and L1 unpacks and runs it faster under TCG. An mmdebstrap
# customize hook (l1.sh hook-small-initramfs ROOT_TREE), before the kernel.
hook_small_initramfs() { # $1 = root tree
	mkdir -p "$1/etc/initramfs-tools/conf.d"
	printf 'MODULES=list\n' >"$1/etc/initramfs-tools/conf.d/kohaku.conf"
	printf 'virtio_pci\nvirtio_blk\next4\n' >>"$1/etc/initramfs-tools/modules"
}

build_into() { # $1 = mirror, $2 = empty work dir; leaves rootfs.raw vmlinuz initrd.img there
	local mirror=$1 w=$2 t=$2/tree k i self
	self=$(printf '%q' "$SELF")
	# The hooks run this file again (under sh -c, where $1 is mmdebstrap's tree).
	# The kernel goes in with a second apt run (the initrd is then generated once).
	# shellcheck disable=SC2016 # the hooks' $1 is mmdebstrap's
	mmdebstrap --mode=root --variant=minbase --components=main \
		--aptopt='Acquire::Languages "none"' \
		--dpkgopt=force-unsafe-io \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--include="$IMAGE_INCLUDE" \
		--customize-hook="bash $self hook-small-initramfs \"\$1\"" \
		--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $IMAGE_KERNEL" \
		--customize-hook="bash $self hook-kernel-modules \"\$1\"" \
		--customize-hook='chroot "$1" apt-get clean' \
		"$IMAGE_SUITE" "$t" "$mirror"
	sed -i '/^force-unsafe-io$/d' "$t/etc/dpkg/dpkg.cfg.d/99mmdebstrap"
	echo "step: mmdebstrap done at ${SECONDS}s"
	image_customize "$t"
	# the key tests log in to L1's sshd with; L1's host key for known_hosts
	install -d -m 700 "$t/root/.ssh"
	chroot "$t" ssh-keygen -q -t ed25519 -N '' -C kohaku-nested-test -f /root/.ssh/kohaku-test-key
	mv "$t/root/.ssh/kohaku-test-key" "$w/ssh_key"
	mv "$t/root/.ssh/kohaku-test-key.pub" "$t/root/.ssh/authorized_keys"
	cp "$t/etc/ssh/ssh_host_ed25519_key.pub" "$w/ssh_host_key.pub"
	k=$(find "$t/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
	i=$t/boot/initrd.img-${k##*/vmlinuz-}
	[[ -f $k && -f $i ]] || { echo "kernel or initrd missing in tree" >&2; return 1; }
	cp "$k" "$w/vmlinuz"
	cp "$i" "$w/initrd.img"
	printf '%s\n' "${k##*/vmlinuz-}" >"$w/kernel-version"
	printf '%s\n' "$NVIDIA_STANDIN_VERSION" >"$w/nvidia-version"
	# shellcheck disable=SC2016 # dpkg-query's format, not shell
	chroot "$t" dpkg-query -W -f='${Package} ${Version}\n' >"$w/packages.txt"
	# raw and sparse: QEMU's -snapshot puts every write in a throwaway overlay
	truncate -s "$IMAGE_SIZE" "$w/rootfs.raw"
	mkfs.ext4 -q -F -L kohaku-l1 -d "$t" "$w/rootfs.raw"
	echo "step: mkfs.ext4 done at ${SECONDS}s"
	rm -rf --one-file-system "$t"
}

case ${1:-} in
hook-small-initramfs) hook_small_initramfs "$2" ;;
hook-kernel-modules) hook_kernel_modules "$2" ;;
*) build_into "$@" ;;
esac
