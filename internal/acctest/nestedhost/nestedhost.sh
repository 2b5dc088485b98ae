#!/usr/bin/env bash
# nestedhost.sh - boot a throwaway nested libvirt host (an "L1" VM with an
# emulated IOMMU) for kohaku_gpu_binding acceptance tests. See README.md beside
# this file.
#
# The machine this runs on has no IOMMU and its own disk and network are PCI
# devices: VFIO binding is only ever tested INSIDE the L1 this script boots.
# L1 runs under plain qemu-system-x86_64 (TCG), started and stopped by PID,
# never through this machine's libvirtd. Its libvirtd listens on a loopback-
# forwarded port with auth_tcp="none": throwaway test machines only.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: nestedhost.sh COMMAND [--virtio-iommu]

  up      build (or reuse) the cached L1 image and boot L1 with qemu-system-x86_64:
          TCG, q35, intel-iommu, and the pass-through stand-ins (an e1000e NIC,
          QEMU's edu device, and a VGA + ich9-intel-hda pair in one slot, like a
          GPU and its HDMI audio, behind a PCIe expander bridge on the second of
          two NUMA nodes); wait until its libvirtd answers over TCP.
          Idempotent: a running, answering L1 is left alone.
  status  report what is up; exit 0 when L1 answers, else 1
  env     print `export` lines for the tests: eval "$(nestedhost.sh env)"
          (the L1 URI, its hostname and UUID, and the stand-ins' PCI addresses
          as L1 sees them; with the virtio-iommu instance up, its URI too)
  image   build (or find) the cached L1 image only
  down    stop L1 by its PID (the image cache stays)
  diag    ask root's shell on L1's serial console what L1 sees of its network
          and libvirtd (up does this by itself when libvirtd does not answer)

  --virtio-iommu  act on a second instance that boots the same image with
                  virtio-iommu instead of intel-iommu. Debian 12's kernel has no
                  CONFIG_VIRTIO_IOMMU, so this L1 has no usable IOMMU: the negative
                  test. `up --both` boots both instances at once (`down --both`).

Environment (all optional):
  KOHAKU_NESTED_MIRROR     Debian mirror for the image (default: KOHAKU_TESTHOST_MIRROR,
                           then http://deb.debian.org/debian)
  KOHAKU_NESTED_CACHE      image cache root (default /var/cache/kohaku/nested)
  KOHAKU_NESTED_PORT       loopback port forwarded to L1's libvirtd (default 16609;
                           the virtio-iommu instance uses this + 1)
  KOHAKU_NESTED_TIMEOUT    seconds `up` waits for L1's libvirtd (default 600)
EOF
}

# ---------------------------------------------------------------- constants
readonly CACHE_ROOT=${KOHAKU_NESTED_CACHE:-/var/cache/kohaku/nested}
readonly MIRROR=${KOHAKU_NESTED_MIRROR:-${KOHAKU_TESTHOST_MIRROR:-http://deb.debian.org/debian}}
readonly BASE_PORT=${KOHAKU_NESTED_PORT:-16609}
# 600: under TCG, L1's libvirtd probes QEMU (TCG inside TCG) before it answers;
# with the host loaded (OpenTofu compiling in the background on a fresh
# machine) one of two L1s took over 240 s to answer in a dry run, the other 50 s.
readonly BOOT_TIMEOUT=${KOHAKU_NESTED_TIMEOUT:-600}
# seconds after L1's login prompt before a silent libvirtd is diagnosed and L1
# booted again (libvirtd is socket-activated and answers within seconds)
readonly ANSWER_GRACE=${KOHAKU_NESTED_ANSWER_GRACE:-240}
readonly STATE_ROOT=/run/kohaku-nested
readonly LOG_DIR=/var/log/kohaku-nested
readonly HOST_PACKAGES=(qemu-system-x86 qemu-utils libvirt-clients mmdebstrap e2fsprogs)
SELF=$(readlink -f "${BASH_SOURCE[0]}")
readonly SELF

# Instance parameters, set by select_instance.
INSTANCE="" PORT="" CONSOLE_PORT="" SSH_PORT="" STATE="" L1_HOSTNAME="" L1_UUID="" IOMMU=""
select_instance() { # $1 = intel | virtio
	INSTANCE=$1
	STATE=$STATE_ROOT/$INSTANCE
	L1_HOSTNAME=kohaku-nested-$INSTANCE
	case $INSTANCE in
	intel) PORT=$BASE_PORT; IOMMU=intel; L1_UUID=6b6f6861-6b75-4e65-8000-000000000001 ;;
	virtio) PORT=$((BASE_PORT + 1)); IOMMU=virtio; L1_UUID=6b6f6861-6b75-4e65-8000-000000000002 ;;
	*) die "unknown instance $INSTANCE" ;;
	esac
	# L1's serial console (root's autologin shell) on a loopback socket, so a
	# boot whose libvirtd does not answer can be asked what it sees
	CONSOLE_PORT=$((PORT + 50))
	# L1's sshd (key login as root), for transports that read host files
	SSH_PORT=$((PORT + 100))
}
uri() { printf 'qemu+tcp://127.0.0.1:%s/system' "$PORT"; }

# ---------------------------------------------------------------- logging
log_tag() { printf 'nestedhost%s' "${INSTANCE:+[$INSTANCE]}"; }
# shellcheck source=../hostlib.sh
. "${SELF%/*}/../hostlib.sh"

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (mmdebstrap --mode=root, QEMU)"; }

# ---------------------------------------------------------------- L1 image recipe
# Everything between the BEGIN/END markers is the image recipe: its sha256 (first 16
# hex digits) names the cache directory, so any edit here builds a new image.
# --- BEGIN IMAGE RECIPE ---
readonly IMAGE_SUITE=bookworm
readonly IMAGE_SIZE=3G
# libvirt-daemon-system brings the config, the systemd units (socket activation)
# and the libvirt-qemu user; seabios + ipxe-qemu are the firmware L2 domains need.
# No recommends: no dnsmasq, apparmor, ovmf, GUI libraries.
readonly IMAGE_INCLUDE=systemd-sysv,udev,dbus,kmod,iproute2,procps,pciutils,libvirt-daemon-system,libvirt-daemon-driver-qemu,libvirt-clients,qemu-system-x86,seabios,ipxe-qemu,initramfs-tools,zstd,openssh-server
# The NVIDIA driver version the stand-in module declares (nvidia-standin/nvidia.c,
# whose text is part of this recipe's key): what /sys/module/nvidia/version says in L1.
readonly NVIDIA_STANDIN_VERSION=550.54.15
# The kernel goes in with a second apt run (the initrd is then generated once).
# linux-image-amd64: vfio-pci, intel-iommu, bochs-drm and snd-hda-intel are all there.
readonly IMAGE_KERNEL=linux-image-amd64

# nvidia_standin_build builds the NVIDIA stand-in module (copied to
# /usr/src/kohaku-nvidia) for the tree's kernel and installs it, then removes
# the compiler and headers again. It runs as an mmdebstrap hook, under sh.
nvidia_standin_build() { # $1 = root tree with its kernel; $2 = version to declare
	set -e # (sh -c: without it only the last command's status counts)
	kver=$(ls -1 "$1/lib/modules" | sort -V | tail -n1)
	printf 'obj-m := nvidia.o\nccflags-y := -DNV_VERSION=\\"%s\\"\n' "$2" >"$1/usr/src/kohaku-nvidia/Kbuild"
	chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends make gcc "linux-headers-$kver"
	chroot "$1" make -C "/lib/modules/$kver/build" M=/usr/src/kohaku-nvidia modules
	install -D -m 644 "$1/usr/src/kohaku-nvidia/nvidia.ko" "$1/lib/modules/$kver/updates/nvidia.ko"
	chroot "$1" depmod "$kver"
	chroot "$1" modinfo -F version -k "$kver" nvidia | grep -qx "$2"
	chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --autoremove make gcc "linux-headers-$kver"
	rm -rf "$1/usr/src/kohaku-nvidia"
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
	compgen -G "$t/lib/modules/*/kernel/drivers/vfio/pci/vfio-pci.ko*" >/dev/null || { echo "no vfio-pci module in L1 kernel" >&2; return 1; }
	[[ -x $t/usr/bin/qemu-system-x86_64 && -x $t/usr/sbin/libvirtd && -f $t/usr/share/seabios/bios.bin ]] || { echo "qemu, libvirtd or seabios missing" >&2; return 1; }
	grep -q '^libvirt-qemu:' "$t/etc/passwd" || { echo "user libvirt-qemu missing" >&2; return 1; }
}

# A small initrd: only what mounting /dev/vda needs. Builds in seconds instead
# of half a minute, and L1 unpacks and runs it faster under TCG.
initramfs_small() { # $1 = root tree, before the kernel is installed
	mkdir -p "$1/etc/initramfs-tools/conf.d"
	printf 'MODULES=list\n' >"$1/etc/initramfs-tools/conf.d/kohaku.conf"
	printf 'virtio_pci\nvirtio_blk\next4\n' >>"$1/etc/initramfs-tools/modules"
}

image_build_into() { # $1 = empty work dir; leaves rootfs.raw vmlinuz initrd.img there
	local w=$1 t=$1/tree k i
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
		--customize-hook="$(declare -f initramfs_small); initramfs_small \"\$1\"" \
		--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $IMAGE_KERNEL" \
		--customize-hook="mkdir -p \"\$1/usr/src/kohaku-nvidia\" && cp '$NVIDIA_SRC' \"\$1/usr/src/kohaku-nvidia/nvidia.c\"" \
		--customize-hook="$(declare -f nvidia_standin_build); nvidia_standin_build \"\$1\" $NVIDIA_STANDIN_VERSION" \
		--customize-hook='chroot "$1" apt-get clean' \
		"$IMAGE_SUITE" "$t" "$MIRROR"
	sed -i '/^force-unsafe-io$/d' "$t/etc/dpkg/dpkg.cfg.d/99mmdebstrap"
	echo "nestedhost-step: mmdebstrap done at ${SECONDS}s"
	image_customize "$t"
	# the key tests log in to L1's sshd with; L1's host key for known_hosts
	mkdir -p -m 700 "$t/root/.ssh"
	chroot "$t" ssh-keygen -q -t ed25519 -N '' -C kohaku-nested-test -f /root/.ssh/kohaku-test-key
	mv "$t/root/.ssh/kohaku-test-key" "$w/ssh_key"
	mv "$t/root/.ssh/kohaku-test-key.pub" "$t/root/.ssh/authorized_keys"
	cp "$t/etc/ssh/ssh_host_ed25519_key.pub" "$w/ssh_host_key.pub"
	# shellcheck disable=SC2012 # kernel file names are plain
	k=$(ls -1 "$t"/boot/vmlinuz-* | sort -V | tail -n1)
	i=$t/boot/initrd.img-${k##*/vmlinuz-}
	[[ -f $k && -f $i ]] || { echo "kernel or initrd missing in tree" >&2; return 1; }
	cp "$k" "$w/vmlinuz"
	cp "$i" "$w/initrd.img"
	printf '%s\n' "${k##*/vmlinuz-}" >"$w/kernel-version"
	# shellcheck disable=SC2016 # dpkg-query's format, not shell
	chroot "$t" dpkg-query -W -f='${Package} ${Version}\n' >"$w/packages.txt"
	# raw and sparse: QEMU's -snapshot puts every write in a throwaway overlay
	truncate -s "$IMAGE_SIZE" "$w/rootfs.raw"
	mkfs.ext4 -q -F -L kohaku-l1 -d "$t" "$w/rootfs.raw"
	echo "nestedhost-step: mkfs.ext4 done at ${SECONDS}s"
	rm -rf --one-file-system "$t"
}
# --- END IMAGE RECIPE ---

readonly NVIDIA_SRC=${SELF%/*}/nvidia-standin/nvidia.c
recipe_text() { sed -n '/^# --- BEGIN IMAGE RECIPE ---$/,/^# --- END IMAGE RECIPE ---$/p' "$SELF"; cat "$NVIDIA_SRC"; }
image_key() { recipe_text | sha256sum | cut -c1-16; }
image_dir() { printf '%s/%s' "$CACHE_ROOT" "$(image_key)"; }
image_complete() { # $1 = dir
	local f
	for f in rootfs.raw vmlinuz initrd.img ssh_key ssh_host_key.pub recipe.txt; do [[ -s $1/$f ]] || return 1; done
}

# ---------------------------------------------------------------- image
ensure_image() {
	local key dir tmp
	key=$(image_key)
	dir=$CACHE_ROOT/$key
	if image_complete "$dir"; then
		phase_done "cached image $key found ($dir)"
		return 0
	fi
	mkdir -p "$CACHE_ROOT"
	exec 8>"$CACHE_ROOT/.lock"
	flock 8
	if image_complete "$dir"; then # built by a concurrent run while we waited
		exec 8>&-
		phase_done "cached image $key found ($dir)"
		return 0
	fi
	[[ -e $dir ]] && { log "removing incomplete $dir"; rm -rf --one-file-system "$dir"; }
	find "$CACHE_ROOT" -maxdepth 1 -name '.build-*' -exec rm -rf --one-file-system {} + 2>/dev/null || true
	tmp=$(mktemp -d "$CACHE_ROOT/.build-$key-XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf --one-file-system '$tmp'" EXIT
	trap 'exit 130' INT TERM
	log "building L1 image $key with mmdebstrap ($IMAGE_SUITE, $MIRROR); log: $LOG_DIR/image-build.log"
	# a separate bash so that set -e holds inside the build (it is off inside `if !`)
	if ! bash "$SELF" _image-build "$tmp" >"$LOG_DIR/image-build.log" 2>&1; then
		tail -n 30 "$LOG_DIR/image-build.log" >&2
		die "image build failed (full log: $LOG_DIR/image-build.log)"
	fi
	sed -n 's/^nestedhost-step: /  /p' "$LOG_DIR/image-build.log" | sed 's/^/nestedhost: /' >&2
	{
		echo "# kohaku nested L1 image $key, built $(date -u +%FT%TZ) on $(hostname)"
		echo "# mirror: $MIRROR; mmdebstrap $(dpkg-query -W -f='${Version}' mmdebstrap)"
		echo "# kernel: $(cat "$tmp/kernel-version")"
		recipe_text
	} >"$tmp/recipe.txt"
	chmod 755 "$tmp"
	mv -T "$tmp" "$dir" # atomic: the directory appears complete or not at all
	trap - EXIT INT TERM
	exec 8>&-
	phase_done "built image $key: $(du -h "$dir/rootfs.raw" | cut -f1) used of $IMAGE_SIZE, kernel $(cat "$dir/kernel-version")"
}

# ---------------------------------------------------------------- L1 process
virsh_ok() { timeout 10 virsh -c "$(uri)" version >/dev/null 2>&1; }

our_qemu_pid() { # prints the pid when our pid file names a live QEMU of this instance
	local pid
	[[ -f $STATE/qemu.pid ]] || return 1
	pid=$(tr -dc 0-9 <"$STATE/qemu.pid")
	[[ -n $pid && -d /proc/$pid ]] || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == qemu-system-x86* ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "-name $L1_HOSTNAME " || return 1
	printf '%s\n' "$pid"
}

stop_qemu() {
	local pid i
	pid=$(our_qemu_pid) || { rm -f "$STATE/qemu.pid"; return 1; }
	log "stopping L1 QEMU pid $pid"
	kill -TERM "$pid"
	for ((i = 0; i < 100; i++)); do
		[[ -d /proc/$pid ]] || break
		sleep 0.1
	done
	if [[ -d /proc/$pid ]]; then
		log "QEMU pid $pid ignored SIGTERM for 10 s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	rm -f "$STATE/qemu.pid"
}

port_busy() { # $1: something already listens on 127.0.0.1:$1
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# shellcheck disable=SC2054 # commas belong to QEMU's option syntax
qemu_args() { # $1 = image dir
	local dir=$1 iommu_dev cmdline
	# 2 MiB huge pages, split evenly between the two NUMA nodes (48 each)
	cmdline="root=/dev/vda rw console=ttyS0 systemd.hostname=$L1_HOSTNAME iommu=pt mitigations=off hugepagesz=2M hugepages=96"
	if [[ $IOMMU == intel ]]; then
		iommu_dev=(-device intel-iommu,intremap=on,caching-mode=on)
		cmdline+=" intel_iommu=on"
	else
		iommu_dev=(-device virtio-iommu-pci)
	fi
	QEMU_ARGS=(
		-name "$L1_HOSTNAME" -uuid "$L1_UUID"
		-machine q35,accel=tcg -cpu max -smp 2 -m 1536
		# two NUMA nodes, one vCPU and half the memory each, like a
		# two-socket GPU host
		-object memory-backend-ram,id=mem0,size=768M -object memory-backend-ram,id=mem1,size=768M
		-numa node,nodeid=0,cpus=0,memdev=mem0 -numa node,nodeid=1,cpus=1,memdev=mem1
		-nodefaults -vga none -display none -no-user-config
		"${iommu_dev[@]}"
		-kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" -append "$cmdline"
		-drive "file=$dir/rootfs.raw,format=raw,if=none,id=root,cache=unsafe" -device virtio-blk-pci,drive=root
		-snapshot
		-netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$PORT-:16509,hostfwd=tcp:127.0.0.1:$SSH_PORT-:22" -device virtio-net-pci,netdev=n0,mac=52:54:00:6b:6f:01
		-chardev "socket,id=con0,host=127.0.0.1,port=$CONSOLE_PORT,server=on,wait=off,logfile=$STATE/console.log"
		-serial chardev:con0
		-daemonize -pidfile "$STATE/qemu.pid"
		# the pass-through stand-ins, each behind its own root port (ACS: small groups)
		-device pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1,addr=0x10
		-device e1000e,bus=rp1,netdev=n1 -netdev user,id=n1,restrict=on
		-device pcie-root-port,id=rp2,bus=pcie.0,chassis=2,slot=2,addr=0x11
		-device edu,bus=rp2
		# the GPU stand-in sits behind a PCIe expander bridge on NUMA node 1
		# (its own root bus, 0x80, as a second socket's root complex is)
		-device pxb-pcie,id=pxb1,bus_nr=128,numa_node=1,bus=pcie.0,addr=0x13
		-device pcie-root-port,id=rp3,bus=pxb1,chassis=3,slot=3,addr=0x0
		-device VGA,bus=rp3,addr=0x0.0x0,multifunction=on
		-device ich9-intel-hda,bus=rp3,addr=0x0.0x1
	)
}

start_qemu() { # $1 = image dir; prints QEMU's pid
	local dir=$1 p pid
	for p in "$PORT" "$CONSOLE_PORT" "$SSH_PORT"; do
		port_busy "$p" && die "127.0.0.1:$p is taken by something else: set KOHAKU_NESTED_PORT"
	done
	mkdir -p "$STATE"
	rm -f "$STATE/qemu.pid" "$STATE/devices.env"
	: >"$STATE/console.log"
	# known_hosts for the forwarded sshd: L1's host key is the image's
	printf '[127.0.0.1]:%s %s\n' "$SSH_PORT" "$(cut -d' ' -f1,2 "$dir/ssh_host_key.pub")" >"$STATE/known_hosts"
	qemu_args "$dir"
	printf '%q ' qemu-system-x86_64 "${QEMU_ARGS[@]}" >"$STATE/qemu.cmdline"
	# 8/9 are our flock fds: QEMU must not inherit (and so hold) them
	qemu-system-x86_64 "${QEMU_ARGS[@]}" 2>"$STATE/qemu.stderr" 8>&- 9>&- ||
		{ cat "$STATE/qemu.stderr" >&2; die "qemu-system-x86_64 failed to start"; }
	pid=$(our_qemu_pid) || die "QEMU started but $STATE/qemu.pid does not name it"
	log "L1 QEMU pid $pid: TCG q35, 2 vCPU, 1.5 GiB on 2 NUMA nodes, $IOMMU IOMMU, libvirtd at $(uri); console $STATE/console.log (and 127.0.0.1:$CONSOLE_PORT)"
	printf '%s\n' "$pid"
}

# console_diagnose asks root's shell on L1's serial console what L1 sees of
# its network and libvirtd, and prints the answer: a boot that reached its
# login prompt but whose libvirtd does not answer says why in the log.
console_diagnose() {
	local fd mark=KOHAKU-DIAG-$RANDOM
	# (a redirection on exec would stay on the shell: only the probe is quiet)
	port_busy "$CONSOLE_PORT" || { log "L1's console socket does not answer"; return 0; }
	exec {fd}<>"/dev/tcp/127.0.0.1/$CONSOLE_PORT"
	# the markers are split in the command so that only the output matches them
	printf '\n%s\n' "echo ${mark}-\"\"BEGIN; ip -br link; ip -br addr; ip route; ss -tln; systemctl --no-pager --lines=15 status libvirtd-tcp.socket libvirtd.service systemd-networkd.service 2>&1 | cat; echo ${mark}-\"\"END" >&"$fd"
	local i
	for ((i = 0; i < 60; i++)); do
		grep -aq "^${mark}-END" "$STATE/console.log" && break
		sleep 1 # (the answer is a few KiB: the socket buffers it unread)
	done
	exec {fd}>&-
	log "what L1 says of its network and libvirtd:"
	sed -n "/^${mark}-BEGIN/,/^${mark}-END/p" "$STATE/console.log" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | sed 's/^/    /' >&2
}

# boot_l1 boots L1 and waits for its libvirtd. Under TCG libvirtd answers
# within seconds of the login prompt; one that has not answered
# ANSWER_GRACE s after it is diagnosed through the console and booted once
# more, with BOOT_TIMEOUT again (a second boot is cheaper than a failed run).
boot_l1() {
	local dir pid attempt=1
	dir=$(image_dir)
	if pid=$(our_qemu_pid); then
		if virsh_ok; then
			phase_done "L1 already running (QEMU pid $pid) and answering on $(uri)"
			return 0
		fi
		log "L1 QEMU pid $pid runs but libvirtd does not answer yet; waiting"
	else
		pid=$(start_qemu "$dir")
	fi
	local deadline=$((SECONDS + BOOT_TIMEOUT)) seen_login="" login_at=0
	while ((SECONDS < deadline)); do
		[[ -d /proc/$pid ]] || { tail -n 30 "$STATE/console.log" >&2; die "L1 QEMU (pid $pid) exited during boot"; }
		if [[ -z $seen_login ]] && grep -aq 'login:\|Reached target.*Multi-User' "$STATE/console.log" 2>/dev/null; then
			seen_login=$(elapsed "$PHASE_T0") login_at=$SECONDS
			log "L1 userspace up after ${seen_login}s"
		fi
		if virsh_ok; then
			phase_done "L1 libvirtd answers on $(uri)"
			return 0
		fi
		if [[ -n $seen_login ]] && ((attempt == 1 && SECONDS - login_at > ANSWER_GRACE)); then
			log "L1 reached its login prompt ${ANSWER_GRACE}s ago but libvirtd does not answer on $(uri)"
			console_diagnose
			stop_qemu
			cp -f "$STATE/console.log" "$STATE/console.1.log"
			log "its console is kept in $STATE/console.1.log"
			attempt=2 seen_login="" deadline=$((SECONDS + BOOT_TIMEOUT))
			log "booting L1 a second time"
			pid=$(start_qemu "$dir")
		fi
		sleep 1
	done
	tail -n 30 "$STATE/console.log" >&2
	[[ -n $seen_login ]] && console_diagnose
	die "L1's libvirtd did not answer on $(uri) within ${BOOT_TIMEOUT}s (QEMU pid $pid left running: run down)"
}

# ---------------------------------------------------------------- checks and inventory
vsh() { timeout 30 virsh -q -c "$(uri)" "$@"; }

# check_identity: L1 must be the machine we booted, never this one.
check_identity() {
	local name uuid
	name=$(vsh hostname)
	uuid=$(vsh capabilities | sed -n 's:.*<uuid>\(.*\)</uuid>.*:\1:p' | head -n1)
	[[ $name == "$L1_HOSTNAME" ]] || die "$(uri) says its hostname is '$name', not $L1_HOSTNAME"
	[[ $uuid == "$L1_UUID" ]] || die "$(uri) says its UUID is '$uuid', not $L1_UUID"
	printf '%s' "$name $uuid"
}

# inventory: find the stand-ins by vendor:product among L1's PCI node devices.
inventory() {
	local out=$STATE/devices.env tmp n x vp addr groups=0
	[[ -s $out ]] && return 0
	tmp=$(mktemp "$out.XXXXXX")
	for n in $(vsh nodedev-list --cap pci); do
		x=$(vsh nodedev-dumpxml "$n")
		vp=$(printf '%s' "$x" | sed -n "s:.*<vendor id='0x\([0-9a-f]*\)'.*:\1:p" | head -n1):$(printf '%s' "$x" | sed -n "s:.*<product id='0x\([0-9a-f]*\)'.*:\1:p" | head -n1)
		[[ $x == *"<iommuGroup"* ]] && groups=$((groups + 1))
		addr=$(sed -E 's/^pci_([0-9a-f]{4})_([0-9a-f]{2})_([0-9a-f]{2})_([0-7])$/\1:\2:\3.\4/' <<<"$n")
		case $vp in
		1234:1111) printf 'GPU=%s\nGPU_DRIVER=%s\n' "$addr" "$(printf '%s' "$x" | tr -d ' \n' | sed -n 's:.*<driver><name>\([^<]*\)</name>.*:\1:p')" ;;
		8086:293e) printf 'GPU_AUDIO=%s\n' "$addr" ;;
		8086:10d3) printf 'NIC=%s\n' "$addr" ;;
		1234:11e8) printf 'EDU=%s\n' "$addr" ;;
		esac
	done >"$tmp"
	printf 'IOMMU_GROUPED=%s\n' "$groups" >>"$tmp"
	mv -f "$tmp" "$out"
}

devices_summary() {
	local GPU="" GPU_DRIVER="" GPU_AUDIO="" NIC="" EDU="" IOMMU_GROUPED=""
	# shellcheck disable=SC1090,SC1091 # written by inventory
	source "$STATE/devices.env"
	printf 'GPU %s (on %s) + audio %s, NIC %s, edu %s; %s PCI devices in IOMMU groups' \
		"${GPU:-?}" "${GPU_DRIVER:-no driver}" "${GPU_AUDIO:-?}" "${NIC:-?}" "${EDU:-?}" "$IOMMU_GROUPED"
}

# ---------------------------------------------------------------- commands
instances_from_args() {
	INSTANCES=(intel)
	local a
	for a in "$@"; do
		case $a in
		--virtio-iommu) INSTANCES=(virtio) ;;
		--both) INSTANCES=(intel virtio) ;;
		*) usage >&2; exit 2 ;;
		esac
	done
}

up_one() { # $1 = instance
	select_instance "$1"
	mkdir -p "$STATE"
	exec 9>"$STATE_ROOT/$INSTANCE.lock"
	flock -n 9 || { log "another nestedhost.sh holds $STATE_ROOT/$INSTANCE.lock; waiting"; flock 9; }
	phase boot; boot_l1
	local id
	phase identity; id=$(check_identity) || exit 1; phase_done "$id"
	phase inventory; inventory; phase_done "$(devices_summary)"
	if [[ $INSTANCE == intel ]]; then
		if ! grep -q '^GPU=.' "$STATE/devices.env" || ! grep -q '^GPU_AUDIO=.' "$STATE/devices.env"; then
			die "L1 does not show the VGA + ich9-intel-hda stand-in"
		fi
		grep -q '^IOMMU_GROUPED=0$' "$STATE/devices.env" && die "L1 shows no IOMMU groups: is intel-iommu working?"
		grep -q '^GPU_DRIVER=nvidia$' "$STATE/devices.env" ||
			die "L1's GPU stand-in is not on the NVIDIA stand-in driver ($(grep '^GPU_DRIVER=' "$STATE/devices.env"))"
	fi
	exec 9>&-
}

cmd_up() {
	need_root
	instances_from_args "$@"
	mkdir -p "$STATE_ROOT" "$LOG_DIR"
	phase packages; ensure_packages
	phase image; ensure_image
	if ((${#INSTANCES[@]} == 1)); then
		up_one "${INSTANCES[0]}"
	else
		# boot in parallel: each waits on its own libvirtd
		local i pids=() rc=0
		for i in "${INSTANCES[@]}"; do (up_one "$i") & pids+=($!); done
		for i in "${pids[@]}"; do wait "$i" || rc=1; done
		((rc == 0)) || die "an instance failed to come up"
	fi
	INSTANCE=""
	log "up: done in $(elapsed "$T_START")s; next: eval \"\$(bash $SELF env)\""
}

cmd_image() {
	need_root
	mkdir -p "$LOG_DIR"
	phase packages; ensure_packages
	phase image; ensure_image
	log "image: done in $(elapsed "$T_START")s"
}

cmd_status() {
	instances_from_args "$@"
	local i ok=0 pid
	for i in "${INSTANCES[@]}"; do
		select_instance "$i"
		if pid=$(our_qemu_pid); then log "QEMU pid $pid"; else log "QEMU: not running"; ok=1; continue; fi
		if virsh_ok; then log "$(uri): answers"; else log "$(uri): no answer"; ok=1; fi
		[[ -s $STATE/devices.env ]] && log "devices: $(devices_summary)"
	done
	INSTANCE=""
	if image_complete "$(image_dir)"; then log "image: $(image_dir)"; else log "image: not built ($(image_dir))"; fi
	return "$ok"
}

cmd_env() {
	local GPU GPU_DRIVER GPU_AUDIO NIC EDU IOMMU_GROUPED
	select_instance intel
	if ! our_qemu_pid >/dev/null || [[ ! -s $STATE/devices.env ]]; then
		die "L1 is not up: run 'bash $SELF up' first"
	fi
	# shellcheck disable=SC1090,SC1091 # written by inventory
	source "$STATE/devices.env"
	cat <<EOF
export KOHAKU_TEST_NESTED_URI=$(uri)
export KOHAKU_TEST_NESTED_SSH_URI='qemu+ssh://root@127.0.0.1:$SSH_PORT/system?keyfile=$(image_dir)/ssh_key&known_hosts=$STATE/known_hosts'
export KOHAKU_TEST_NESTED_NVIDIA_VERSION=$NVIDIA_STANDIN_VERSION
export KOHAKU_TEST_NESTED_HOSTNAME=$L1_HOSTNAME
export KOHAKU_TEST_NESTED_UUID=$L1_UUID
export KOHAKU_TEST_NESTED_GPU=$GPU
export KOHAKU_TEST_NESTED_GPU_AUDIO=$GPU_AUDIO
export KOHAKU_TEST_NESTED_NIC=$NIC
export KOHAKU_TEST_NESTED_EDU=$EDU
EOF
	select_instance virtio
	if our_qemu_pid >/dev/null; then
		cat <<EOF
export KOHAKU_TEST_NESTED_NOIOMMU_URI=$(uri)
export KOHAKU_TEST_NESTED_NOIOMMU_HOSTNAME=$L1_HOSTNAME
export KOHAKU_TEST_NESTED_NOIOMMU_UUID=$L1_UUID
EOF
	fi
}

cmd_down() {
	need_root
	instances_from_args "$@"
	local i pid
	for i in "${INSTANCES[@]}"; do
		select_instance "$i"
		if pid=$(our_qemu_pid); then
			stop_qemu
			log "down: stopped L1 QEMU pid $pid"
		else
			log "down: no L1 of ours is running"
		fi
		rm -f "$STATE/devices.env"
	done
}

main() {
	local cmd=${1:-}
	shift || true
	case $cmd in
	up) cmd_up "$@" ;;
	status) cmd_status "$@" ;;
	env) cmd_env ;;
	image) cmd_image ;;
	down) cmd_down "$@" ;;
	_image-build) image_build_into "$1" ;; # internal: used by ensure_image
	diag)
		instances_from_args "$@"
		for i in "${INSTANCES[@]}"; do select_instance "$i"; console_diagnose; done
		;;
	-h | --help | help) usage ;;
	*) usage >&2; exit 2 ;;
	esac
}

main "$@"
