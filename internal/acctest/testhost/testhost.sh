#!/usr/bin/env bash
# testhost.sh - turn a throwaway Debian 12 machine into a libvirt/QEMU host for
# terraform-provider-kohaku acceptance tests. See README.md beside this file.
#
# THROWAWAY TEST HOSTS ONLY: libvirtd is opened on 127.0.0.1:16509 with
# auth_tcp="none" and QEMU runs as root with dynamic_ownership=0.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: testhost.sh COMMAND

  up      install packages, configure and start libvirtd (unix socket and
          qemu+tcp://127.0.0.1/system), create the storage pools and build or
          reuse the cached Debian 12 and Debian 13 guest images. Idempotent: a
          second run only reports what it found.
  status  report what is up; exit 0 when everything `up` makes is there, else 1
  env     print `export` lines for a test run: eval "$(testhost.sh env)"
  image   build (or find) the cached guest image only
  image-debian13
          the same for the Debian 13 image (cloud-init 25.x, netplan + networkd)
  smoke   boot the cached image once under TCG with a NoCloud seed and check that
          cloud-init ran (runcmd marker, MAC-matched static netplan v2 address,
          virtio-9p mount, phone_home, final message); cleans up after itself
  smoke-debian13
          the same with the Debian 13 image
  down    stop the libvirtd that `up` started (by its pid file); caches stay
  restart SIGKILL the libvirtd that `up` started (by its pid file) and start it
          again the way `up` does: the fault tests' "libvirtd killed mid-apply".
          Running QEMU domains survive it.

Environment (all optional):
  KOHAKU_TESTHOST_MIRROR      Debian mirror for the guest image (default http://deb.debian.org/debian)
  KOHAKU_TESTHOST_CACHE       image cache root (default /var/cache/kohaku/images)
  KOHAKU_SMOKE_TIMEOUT        seconds smoke waits for the guest (default 600)
  KOHAKU_SMOKE_KEEP=1         smoke keeps its work dir (overlay, seed, console log)
EOF
}

# ---------------------------------------------------------------- constants
readonly URI_UNIX="qemu:///system"
readonly URI_TCP="qemu+tcp://127.0.0.1/system"
# TLS on loopback with a throwaway PKI of the script's own (see ensure_pki):
# client/ holds what a client needs (cacert.pem, clientcert.pem,
# clientkey.pem, libvirt's pkipath layout); stranger/ holds a client
# certificate from another CA, which libvirtd must refuse.
readonly PKI_DIR=/var/lib/kohaku-testhost/pki
readonly URI_TLS="qemu+tls://127.0.0.1/system"
readonly URI_TLS_CHECK="$URI_TLS?pkipath=$PKI_DIR/client"
readonly STATE_DIR=/run/kohaku-testhost
readonly PID_FILE=$STATE_DIR/libvirtd.pid
readonly LOCK_FILE=$STATE_DIR/lock
readonly LOG_DIR=/var/log/kohaku-testhost
readonly LIBVIRTD_LOG=/var/log/libvirt/libvirtd.log
readonly LIBVIRTD_STDERR=$LOG_DIR/libvirtd.stderr
readonly CACHE_ROOT=${KOHAKU_TESTHOST_CACHE:-/var/cache/kohaku/images}
readonly MIRROR=${KOHAKU_TESTHOST_MIRROR:-http://deb.debian.org/debian}
readonly TEST_POOL=kohaku-acc
readonly TEST_POOL_PATH=/var/lib/kohaku-acc/pool
readonly IMAGE_POOL=kohaku-images
readonly DEFAULT_POOL_PATH=/var/lib/libvirt/images
# The loopback HTTP server that serves the cloud-style image like a vendor's
# mirror (cloud.qcow2, cloud.qcow2.zst, SHA256SUMS), started and stopped by PID.
readonly IMAGE_HTTP_ADDR=127.0.0.1
readonly IMAGE_HTTP_PORT=18480
readonly IMAGE_HTTP_PID=$STATE_DIR/image-http.pid
readonly HOST_PACKAGES=(
	libvirt-daemon            # also holds the storage driver and its dir/fs backend
	libvirt-daemon-driver-qemu
	libvirt-clients
	qemu-system-x86
	qemu-utils
	mmdebstrap
	e2fsprogs
	xorriso
	openssh-server
	openssh-client
	openssl                   # the throwaway TLS PKI
	# the cloud-style image (a partitioned disk that boots through firmware),
	# built without loop devices, and the firmware that boots it
	fdisk
	dosfstools
	mtools
	syslinux
	syslinux-efi
	syslinux-common
	zstd
	ovmf
	python3                   # the loopback HTTP server that serves it
	curl
	xz-utils                  # the tiny test guest's kernel, unpacked (../tinyguest)
)
SELF=$(readlink -f "${BASH_SOURCE[0]}")
# the tiny test guest for scale tests (kernel + busybox initramfs), built from the image
TINYGUEST=$(dirname "$SELF")/../tinyguest/tinyguest.sh
readonly SELF

# ---------------------------------------------------------------- logging
log_tag() { printf testhost; }
# shellcheck source=../hostlib.sh
. "${SELF%/*}/../hostlib.sh"

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (this script configures the whole machine)"; }

# ---------------------------------------------------------------- guest image recipe
# Everything between the BEGIN/END markers is the image recipe: its sha256 (first 16
# hex digits) names the cache directory, so any edit here builds a new image.
# --- BEGIN IMAGE RECIPE ---
readonly IMAGE_SUITE=bookworm
readonly IMAGE_VARIANT=minbase
readonly IMAGE_SIZE=3G
# linux-image-amd64, NOT linux-image-cloud-amd64: the cloud flavour has no 9p.
# ifupdown + isc-dhcp-client: cloud-init 22.4 renders netplan v2 network-config to
# /etc/network/interfaces.d (ENI renderer) when ifupdown is present; no netplan.io.
# resolvconf: without it the ENI "dns-nameservers" lines of a static config do nothing.
# zstd: initramfs-tools falls back to gzip -9 without it (about 60 s more per initrd).
# dbus: systemd-logind (in systemd) starts only when dbus.service exists, and logind is
# what powers the guest off on the ACPI power button, as in Debian's cloud images.
# minbase has no dbus: without it every graceful shutdown waited its whole timeout.
# (Debian 13's recipe gets dbus through netplan.io and systemd-resolved.)
readonly IMAGE_INCLUDE=systemd-sysv,udev,dbus,cloud-init,iproute2,ifupdown,isc-dhcp-client,resolvconf,openssh-server,qemu-guest-agent,initramfs-tools,zstd,curl,ca-certificates,netbase,kmod,python3
# The kernel goes in with a second apt run: in the same run as initramfs-tools the
# initrd is generated twice (kernel hook, then initramfs-tools' own trigger).
readonly IMAGE_KERNEL=linux-image-amd64

image_customize() { # $1 = unpacked root tree
	local t=$1
	printf '/dev/vda / ext4 defaults 0 1\n' >"$t/etc/fstab"
	printf 'debian\n' >"$t/etc/hostname"
	printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n' >"$t/etc/hosts"
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
	# together 40-50 s of a first boot under TCG (user-data can still override both)
	cat >"$t/etc/cloud/cloud.cfg.d/99-kohaku-testhost.cfg" <<'CFG'
datasource_list: [ NoCloud, ConfigDrive, None ]
locale: C.UTF-8
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

image_build_into() { # $1 = empty work dir; leaves rootfs.qcow2 vmlinuz initrd.img there
	local w=$1 t=$1/tree k i
	# unsafe-io: no fsync per unpacked file (the tree is thrown away after mkfs);
	# no man pages, translations or docs: less to unpack, copy and store
	mmdebstrap --mode=root --variant="$IMAGE_VARIANT" --components=main \
		--aptopt='Acquire::Languages "none"' \
		--dpkgopt=force-unsafe-io \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--include="$IMAGE_INCLUDE" \
		--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $IMAGE_KERNEL" \
		"$IMAGE_SUITE" "$t" "$MIRROR"
	sed -i '/^force-unsafe-io$/d' "$t/etc/dpkg/dpkg.cfg.d/99mmdebstrap"
	echo "testhost-step: mmdebstrap done at ${SECONDS}s"
	image_customize "$t"
	k=$(ls -1 "$t"/boot/vmlinuz-* | sort -V | tail -n1)
	i=$t/boot/initrd.img-${k##*/vmlinuz-}
	[[ -f $k && -f $i ]] || { echo "kernel or initrd missing in tree" >&2; return 1; }
	cp "$k" "$w/vmlinuz"
	cp "$i" "$w/initrd.img"
	printf '%s\n' "${k##*/vmlinuz-}" >"$w/kernel-version"
	chroot "$t" dpkg-query -W -f='${Package} ${Version}\n' >"$w/packages.txt"
	truncate -s "$IMAGE_SIZE" "$w/rootfs.raw"
	mkfs.ext4 -q -F -L kohaku-root -d "$t" "$w/rootfs.raw"
	echo "testhost-step: mkfs.ext4 done at ${SECONDS}s"
	qemu-img convert -f raw -O qcow2 "$w/rootfs.raw" "$w/rootfs.qcow2"
	echo "testhost-step: qemu-img convert done at ${SECONDS}s"
	rm -f "$w/rootfs.raw"
	rm -rf --one-file-system "$t"
	echo "testhost-step: tree removed at ${SECONDS}s"
}
# --- END IMAGE RECIPE ---

# Debian 13, the second guest generation: cloud-init 25.x renders network-config with
# netplan for systemd-networkd (systemd-resolved for DNS); no ifupdown, dhclient or
# net-tools. Its own recipe and cache key (this block plus image_build_into, which
# builds it with these IMAGE_DEBIAN13_* values in place of Debian 12's: see
# image_build_gen_into). TESTHOST_GEN=debian13 selects it in the shared functions.
# --- BEGIN IMAGE RECIPE debian13 ---
readonly IMAGE_DEBIAN13_SUITE=trixie
readonly IMAGE_DEBIAN13_VARIANT=minbase
readonly IMAGE_DEBIAN13_SIZE=3G
readonly IMAGE_DEBIAN13_INCLUDE=systemd-sysv,udev,cloud-init,iproute2,netplan.io,systemd-resolved,openssh-server,qemu-guest-agent,initramfs-tools,zstd,curl,ca-certificates,netbase,kmod,python3
readonly IMAGE_DEBIAN13_KERNEL=linux-image-amd64

image_debian13_customize() { # $1 = unpacked root tree
	local t=$1
	printf '/dev/vda / ext4 defaults 0 1\n' >"$t/etc/fstab"
	printf 'debian\n' >"$t/etc/hostname"
	printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n' >"$t/etc/hosts"
	# resolved's stub (not the build host's copy); networkd is disabled by default in Debian
	ln -sfn ../run/systemd/resolve/stub-resolv.conf "$t/etc/resolv.conf"
	chroot "$t" systemctl enable -q systemd-networkd.service systemd-resolved.service serial-getty@ttyS0.service
	# minbase trixie has no locales (locale-gen fails) and no resize2fs
	cat >"$t/etc/cloud/cloud.cfg.d/99-kohaku-testhost.cfg" <<'CFG'
datasource_list: [ NoCloud, ConfigDrive, None ]
locale: C.UTF-8
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
# --- END IMAGE RECIPE debian13 ---

# image_build_gen_into builds generation $TESTHOST_GEN with image_build_into in a fresh
# bash, where IMAGE_* (readonly here) hold that generation's IMAGE_<GEN>_* values and
# image_customize is image_<gen>_customize.
image_build_gen_into() { # $1 = empty work dir
	local g=$TESTHOST_GEN v n vars=("MIRROR=$MIRROR")
	for v in SUITE VARIANT SIZE INCLUDE KERNEL; do
		n=IMAGE_${g^^}_$v
		vars+=("IMAGE_$v=${!n}")
	done
	env "${vars[@]}" bash -euo pipefail -c "$(declare -f image_build_into "image_${g}_customize")
image_customize() { image_${g}_customize \"\$@\"; }
image_build_into \"\$1\"" image-build "$1"
}

recipe_text() { # of Debian 12, or of generation $TESTHOST_GEN plus the build function it reuses
	local g=${TESTHOST_GEN:+ $TESTHOST_GEN}
	sed -n "/^# --- BEGIN IMAGE RECIPE$g ---\$/,/^# --- END IMAGE RECIPE$g ---\$/p" "$SELF"
	[[ -z $g ]] || declare -f image_build_into
}
image_key() { recipe_text | sha256sum | cut -c1-16; }
image_dir() { printf '%s/%s' "$CACHE_ROOT" "$(image_key)"; }
image_complete() { # $1 = dir
	local f
	for f in rootfs.qcow2 vmlinuz initrd.img recipe.txt; do [[ -s $1/$f ]] || return 1; done
}

# ---------------------------------------------------------------- packages
missing_packages() {
	local p
	for p in "${HOST_PACKAGES[@]}"; do pkg_installed "$p" || printf '%s\n' "$p"; done
}

# ---------------------------------------------------------------- libvirt config
# set_conf FILE KEY=VALUE...: drop every active line setting one of the KEYs and
# append "KEY = VALUE" lines in the order given. Prints "changed" when the content
# changed (so a second run with the same settings leaves the file byte for byte).
set_conf() {
	local file=$1 tmp kv keys=()
	shift
	for kv in "$@"; do keys+=("${kv%%=*}"); done
	tmp=$(mktemp "$file.XXXXXX")
	awk -v keys="${keys[*]}" '
		BEGIN { n = split(keys, k, " ") }
		{ for (i = 1; i <= n; i++) if ($0 ~ "^[ \t]*" k[i] "[ \t]*=") next; print }
	' "$file" >"$tmp"
	for kv in "$@"; do printf '%s = %s\n' "${kv%%=*}" "${kv#*=}" >>"$tmp"; done
	if cmp -s "$tmp" "$file"; then
		rm -f "$tmp"
	else
		chmod --reference="$file" "$tmp"
		mv -f "$tmp" "$file"
		echo changed
	fi
}

# ensure_pki makes the throwaway PKI for libvirtd's TLS listener once: a CA,
# a server certificate for 127.0.0.1/localhost, a client certificate, and a
# "stranger" client certificate signed by a CA libvirtd does not trust.
# RSA keys and the key usages libvirt's certificate checks insist on.
ensure_pki() {
	local d=$PKI_DIR f
	local want=("$d/ca/cacert.pem" "$d/server/servercert.pem" "$d/server/serverkey.pem"
		"$d/client/cacert.pem" "$d/client/clientcert.pem" "$d/client/clientkey.pem"
		"$d/stranger/cacert.pem" "$d/stranger/clientcert.pem" "$d/stranger/clientkey.pem")
	for f in "${want[@]}"; do [[ -s $f ]] || break; done
	if [[ -s $f ]]; then
		phase_done "kept $d"
		return 0
	fi
	rm -rf "$d"
	mkdir -p "$d"/{ca,server,client,stranger,stranger-ca}
	chmod 700 "$d"
	local ossl=(openssl)
	ca() { # dir cn
		"${ossl[@]}" req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$2" \
			-keyout "$1/cakey.pem" -out "$1/cacert.pem" \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	}
	issue() { # ca-dir out-dir name cn extensions
		"${ossl[@]}" req -newkey rsa:2048 -nodes -subj "/CN=$4" -keyout "$2/$3key.pem" -out "$2/$3.csr" 2>/dev/null
		printf '%s\n' "$5" | tr ';' '\n' >"$2/$3.ext"
		"${ossl[@]}" x509 -req -in "$2/$3.csr" -CA "$1/cacert.pem" -CAkey "$1/cakey.pem" -CAcreateserial \
			-days 3650 -extfile "$2/$3.ext" -out "$2/$3cert.pem" 2>/dev/null
		rm -f "$2/$3.csr" "$2/$3.ext"
	}
	local leaf="basicConstraints=critical,CA:FALSE;keyUsage=critical,digitalSignature,keyEncipherment"
	ca "$d/ca" "Kohaku throwaway test CA"
	ca "$d/stranger-ca" "Kohaku stranger CA"
	issue "$d/ca" "$d/server" server 127.0.0.1 "$leaf;extendedKeyUsage=serverAuth;subjectAltName=IP:127.0.0.1,DNS:localhost"
	issue "$d/ca" "$d/client" client kohaku-acc-client "$leaf;extendedKeyUsage=clientAuth"
	issue "$d/stranger-ca" "$d/stranger" client kohaku-stranger "$leaf;extendedKeyUsage=clientAuth"
	cp "$d/ca/cacert.pem" "$d/client/cacert.pem"
	cp "$d/ca/cacert.pem" "$d/stranger/cacert.pem" # trusts the server; the server does not trust it
	for f in "${want[@]}"; do [[ -s $f ]] || die "making the test PKI: $f is missing"; done
	phase_done "made a CA, server and client certificates in $d"
}

CONFIG_CHANGED=0
ensure_config() {
	local out="" f
	if ! getent passwd libvirt-qemu >/dev/null; then
		# libvirtd resolves its compiled-in default user before reading qemu.conf
		useradd --system --user-group --no-create-home --home-dir /var/lib/libvirt \
			--shell /usr/sbin/nologin libvirt-qemu
		out+="created user libvirt-qemu; "
	fi
	# Debian 12 ships qemu.conf/libvirtd.conf in libvirt-daemon-system (not installed
	# here: it wants systemd units, polkit, iptables); libvirtd runs on compiled-in
	# defaults without them, so write files holding just our settings.
	mkdir -p /etc/libvirt
	for f in /etc/libvirt/qemu.conf /etc/libvirt/libvirtd.conf; do
		[[ -f $f ]] || printf '# written by %s (throwaway test host)\n' "$SELF" >"$f"
	done
	local changes=""
	changes+=$(set_conf /etc/libvirt/qemu.conf user='"root"' group='"root"' \
		dynamic_ownership=0 remember_owner=0 stdio_handler='"file"')
	changes+=$(set_conf /etc/libvirt/libvirtd.conf listen_tls=1 listen_tcp=1 \
		listen_addr='"127.0.0.1"' tcp_port='"16509"' auth_tcp='"none"' \
		tls_port='"16514"' auth_tls='"none"' ca_file="\"$PKI_DIR/ca/cacert.pem\"" \
		cert_file="\"$PKI_DIR/server/servercert.pem\"" key_file="\"$PKI_DIR/server/serverkey.pem\"" \
		log_outputs="\"3:file:$LIBVIRTD_LOG\"")
	mkdir -p /var/log/libvirt/qemu /run/libvirt "$STATE_DIR" "$LOG_DIR"
	if [[ -n $changes ]]; then
		CONFIG_CHANGED=1
		out+="wrote qemu.conf/libvirtd.conf settings"
	else
		out+="qemu.conf/libvirtd.conf already set"
	fi
	phase_done "$out"
}

# ---------------------------------------------------------------- libvirtd
virsh_ok() { timeout 10 virsh -c "$1" version >/dev/null 2>&1; }

our_libvirtd_pid() { # prints the pid when our pid file names a live libvirtd
	local pid
	[[ -f $PID_FILE ]] || return 1
	pid=$(tr -dc 0-9 <"$PID_FILE")
	[[ -n $pid && -d /proc/$pid && $(cat "/proc/$pid/comm" 2>/dev/null) == libvirtd ]] || return 1
	printf '%s\n' "$pid"
}

stop_our_libvirtd() {
	local pid i
	pid=$(our_libvirtd_pid) || { rm -f "$PID_FILE"; return 1; }
	log "stopping libvirtd pid $pid"
	kill -TERM "$pid"
	for ((i = 0; i < 150; i++)); do
		[[ -d /proc/$pid ]] || break
		sleep 0.1
	done
	if [[ -d /proc/$pid ]]; then
		log "libvirtd pid $pid ignored SIGTERM for 15 s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	rm -f "$PID_FILE"
}

libvirtd_fail() {
	log "$1"
	for f in "$LIBVIRTD_LOG" "$LIBVIRTD_STDERR"; do
		[[ -s $f ]] || continue
		log "--- tail of $f"
		tail -n 25 "$f" >&2
	done
	die "libvirtd is not usable"
}

wait_uris() { # $1 = seconds
	local deadline=$((SECONDS + $1))
	while ((SECONDS < deadline)); do
		virsh_ok "$URI_UNIX" && virsh_ok "$URI_TCP" && virsh_ok "$URI_TLS_CHECK" && return 0
		sleep 0.2
	done
	return 1
}

ensure_libvirtd() {
	local pid
	if virsh_ok "$URI_UNIX"; then
		if pid=$(our_libvirtd_pid); then
			if ((CONFIG_CHANGED)); then
				log "config changed: restarting our libvirtd (pid $pid)"
				stop_our_libvirtd || true
			else
				virsh_ok "$URI_TCP" || libvirtd_fail "our libvirtd (pid $pid) answers on the unix socket but not on $URI_TCP"
				virsh_ok "$URI_TLS_CHECK" || libvirtd_fail "our libvirtd (pid $pid) answers on the unix socket but not on $URI_TLS (pkipath $PKI_DIR/client)"
				phase_done "libvirtd already running (ours, pid $pid), answers on $URI_UNIX, $URI_TCP and $URI_TLS"
				return 0
			fi
		else
			log "a libvirtd not started by this script already answers on $URI_UNIX: not starting another"
			((CONFIG_CHANGED)) && log "WARNING: config was changed; restart that libvirtd yourself for it to apply"
			virsh_ok "$URI_TCP" || libvirtd_fail "that libvirtd does not answer on $URI_TCP (start it with --listen and the libvirtd.conf above)"
			virsh_ok "$URI_TLS_CHECK" || libvirtd_fail "that libvirtd does not answer on $URI_TLS with the certificates in $PKI_DIR (restart it with --listen and the libvirtd.conf above)"
			phase_done "existing libvirtd answers on $URI_UNIX, $URI_TCP and $URI_TLS"
			return 0
		fi
	fi
	if pid=$(our_libvirtd_pid); then
		# ours but not answering: a hung or half-started daemon
		log "our libvirtd (pid $pid) does not answer; restarting it"
		stop_our_libvirtd || true
	elif pid=$(pgrep -x libvirtd | head -n1); [[ -n $pid ]]; then
		libvirtd_fail "a libvirtd (pid $pid) not started by this script runs but does not answer on $URI_UNIX; not touching it"
	fi
	rm -f "$PID_FILE"
	: >"$LIBVIRTD_STDERR"
	log "starting: libvirtd -d --listen --pid-file $PID_FILE"
	# 8/9 are our flock fds: the daemon must not inherit (and so hold) them
	libvirtd -d --listen --pid-file "$PID_FILE" 2>>"$LIBVIRTD_STDERR" 8>&- 9>&- ||
		libvirtd_fail "libvirtd -d --listen exited with status $?"
	wait_uris 30 || libvirtd_fail "libvirtd did not answer on $URI_UNIX, $URI_TCP and $URI_TLS within 30 s"
	pid=$(our_libvirtd_pid) || libvirtd_fail "libvirtd answers but $PID_FILE does not name it"
	phase_done "started libvirtd pid $pid; answers on $URI_UNIX, $URI_TCP and $URI_TLS"
}

# restart: a crash and a restart of our libvirtd, not a clean stop. Refuses
# to touch a libvirtd this script did not start.
cmd_restart() {
	local pid i
	pid=$(our_libvirtd_pid) || die "no libvirtd started by this script is running (see $PID_FILE): run 'bash $SELF up'"
	log "restart: SIGKILL libvirtd pid $pid"
	kill -KILL "$pid"
	for ((i = 0; i < 100; i++)); do
		[[ -d /proc/$pid ]] || break
		sleep 0.05
	done
	[[ -d /proc/$pid ]] && die "libvirtd pid $pid survived SIGKILL for 5 s"
	rm -f "$PID_FILE"
	: >"$LIBVIRTD_STDERR"
	libvirtd -d --listen --pid-file "$PID_FILE" 2>>"$LIBVIRTD_STDERR" ||
		libvirtd_fail "libvirtd -d --listen exited with status $?"
	wait_uris 30 || libvirtd_fail "libvirtd did not answer on $URI_UNIX, $URI_TCP and $URI_TLS within 30 s"
	pid=$(our_libvirtd_pid) || libvirtd_fail "libvirtd answers but $PID_FILE does not name it"
	log "restart: libvirtd pid $pid answers on $URI_UNIX, $URI_TCP and $URI_TLS"
}

# ---------------------------------------------------------------- pools
vsh() { virsh -q -c "$URI_UNIX" "$@"; }
pool_path() { vsh pool-dumpxml "$1" 2>/dev/null | sed -n 's:.*<path>\(.*\)</path>.*:\1:p' | head -n1; }
pool_field() { vsh pool-info "$1" 2>/dev/null | awk -F: -v k="$2" '$1 == k { gsub(/^[ \t]+/, "", $2); print $2 }'; }

# ensure_pool NAME PATH [replace]: prints one status word list to stdout
ensure_pool() {
	local name=$1 path=$2 replace=${3:-} did=() cur
	if vsh pool-info "$name" >/dev/null 2>&1; then
		cur=$(pool_path "$name")
		if [[ $cur != "$path" ]]; then
			if [[ $replace == replace ]]; then
				[[ $(pool_field "$name" State) == running ]] && vsh pool-destroy "$name" >/dev/null
				vsh pool-undefine "$name" >/dev/null
				did+=("replaced (was $cur)")
			else
				log "WARNING: pool $name exists with path $cur, not $path; leaving it as it is"
			fi
		fi
	fi
	if ! vsh pool-info "$name" >/dev/null 2>&1; then
		vsh pool-define-as "$name" dir --target "$path" >/dev/null
		did+=(defined)
	fi
	if [[ $(pool_field "$name" State) != running ]]; then
		vsh pool-build "$name" >/dev/null 2>&1 || mkdir -p "$path"
		vsh pool-start "$name" >/dev/null
		did+=(started)
	fi
	if [[ $(pool_field "$name" Autostart) != yes ]]; then
		vsh pool-autostart "$name" >/dev/null
		did+=(autostart)
	fi
	if ((${#did[@]})); then
		printf '%s: %s' "$name" "${did[*]}"
	else
		printf '%s: found' "$name"
	fi
}

ensure_pools() {
	local a b
	a=$(ensure_pool default "$DEFAULT_POOL_PATH")
	b=$(ensure_pool "$TEST_POOL" "$TEST_POOL_PATH")
	phase_done "$a; $b"
}

ensure_image_pool() {
	local dir r pool=$IMAGE_POOL${TESTHOST_GEN:+-$TESTHOST_GEN}
	dir=$(image_dir)
	r=$(ensure_pool "$pool" "$dir" replace)
	[[ $r == *": found" ]] || vsh pool-refresh "$pool" >/dev/null
	vsh vol-info --pool "$pool" rootfs.qcow2 >/dev/null ||
		die "pool $pool has no volume rootfs.qcow2"
	phase_done "$r (path $dir)"
}

# ---------------------------------------------------------------- image
BUILD_PID=""
stop_build() { # stop a running image build (its own session) and wait for it
	[[ -n $BUILD_PID ]] || return 0
	if kill -0 "$BUILD_PID" 2>/dev/null; then
		log "stopping image build (session $BUILD_PID)"
		kill -TERM -- "-$BUILD_PID" 2>/dev/null || true
		wait "$BUILD_PID" 2>/dev/null || true
	fi
	BUILD_PID=""
}

mounts_under() { awk -v p="$1/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r; }

remove_build_dir() { # $1 = a build work dir; never descends into mounts
	local d=$1 m i
	# an interrupted mmdebstrap unmounts /proc, /sys, /dev in its chroot on the way
	# out, a moment after its main process is gone: give it 10 s, then do it
	for ((i = 0; i < 100; i++)); do
		[[ -z $(mounts_under "$d") ]] && break
		sleep 0.1
	done
	mounts_under "$d" | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf --one-file-system "$d" || log "WARNING: could not remove all of $d"
}

remove_build_leftovers() { # work dirs of interrupted builds (caller holds the cache lock)
	local d
	for d in "$CACHE_ROOT"/.build-*; do
		[[ -d $d ]] && remove_build_dir "$d"
	done
	return 0
}

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
	remove_build_leftovers
	tmp=$(mktemp -d "$CACHE_ROOT/.build-$key-XXXXXX")
	log "building image $key with mmdebstrap (${TESTHOST_GEN:-$IMAGE_SUITE}, $MIRROR); log: $LOG_DIR/image-build.log"
	# A separate bash, so that set -e holds inside the build (it is off under `if !`),
	# in its own session, so that an interrupt stops the whole build (mmdebstrap
	# unmounts what it mounted) before its work dir is removed.
	BUILD_PID=""
	# shellcheck disable=SC2064
	trap "stop_build; remove_build_dir '$tmp'" EXIT
	trap 'exit 130' INT TERM
	setsid bash "$SELF" _image-build "$tmp" >"$LOG_DIR/image-build.log" 2>&1 </dev/null &
	BUILD_PID=$!
	local rc=0
	wait "$BUILD_PID" || rc=$?
	BUILD_PID=""
	if ((rc != 0)); then
		tail -n 30 "$LOG_DIR/image-build.log" >&2
		die "image build failed with status $rc (full log: $LOG_DIR/image-build.log)"
	fi
	sed -n 's/^testhost-step: /  /p' "$LOG_DIR/image-build.log" | sed 's/^/testhost: /' >&2
	{
		echo "# kohaku test guest image $key, built $(date -u +%FT%TZ) on $(hostname)"
		echo "# mirror: $MIRROR; mmdebstrap $(dpkg-query -W -f='${Version}' mmdebstrap)"
		echo "# kernel: $(cat "$tmp/kernel-version")"
		recipe_text
	} >"$tmp/recipe.txt"
	chmod 755 "$tmp"
	mv -T "$tmp" "$dir" # atomic: the directory appears complete or not at all
	trap - EXIT INT TERM
	exec 8>&-
	phase_done "built image $key: $(du -h --apparent-size "$dir/rootfs.qcow2" | cut -f1) qcow2 (virtual $IMAGE_SIZE), kernel $(cat "$dir/kernel-version")"
}

# ---------------------------------------------------------------- cloud-style image
# What users boot: a vendor-style cloud image made from the Debian 12 test image: an
# MBR disk with an active FAT32 ESP (type 0xef) holding the kernel, the initrd,
# SYSLINUX for SeaBIOS and EFI/BOOT/BOOTX64.EFI (SYSLINUX's EFI loader) for OVMF, and
# the ext4 root (found by label) as the second partition. No loop device, no mount:
# debugfs rewrites fstab, mtools fills the ESP, sfdisk and dd assemble the disk. Its
# own cache key: the base image's key plus this recipe.
# --- BEGIN CLOUD RECIPE ---
cloud_build_into() { # $1 = base image dir, $2 = empty work dir
	local b=$1 w=$2 esp_mib=64 root_bytes
	qemu-img convert -f qcow2 -O raw "$b/rootfs.qcow2" "$w/root.raw"
	printf 'LABEL=kohaku-root / ext4 defaults 0 1\n' >"$w/fstab"
	debugfs -w -R 'rm /etc/fstab' "$w/root.raw" >/dev/null 2>&1
	debugfs -w -R "write $w/fstab /etc/fstab" "$w/root.raw" >/dev/null 2>&1
	debugfs -R 'cat /etc/fstab' "$w/root.raw" 2>/dev/null | grep -q '^LABEL=kohaku-root ' || { echo "fstab not rewritten" >&2; return 1; }
	printf 'DEFAULT debian\nTIMEOUT 0\nPROMPT 0\nLABEL debian\n  KERNEL /vmlinuz\n  APPEND initrd=/initrd.img root=LABEL=kohaku-root ro console=ttyS0 panic=5\n' >"$w/syslinux.cfg"
	mkfs.vfat -F 32 -n KOHAKU-ESP -C "$w/esp.img" $((esp_mib * 1024)) >/dev/null
	MTOOLS_SKIP_CHECK=1 mcopy -i "$w/esp.img" "$b/vmlinuz" "$b/initrd.img" "$w/syslinux.cfg" ::/
	MTOOLS_SKIP_CHECK=1 mmd -i "$w/esp.img" ::/EFI ::/EFI/BOOT
	MTOOLS_SKIP_CHECK=1 mcopy -i "$w/esp.img" /usr/lib/SYSLINUX.EFI/efi64/syslinux.efi ::/EFI/BOOT/BOOTX64.EFI
	MTOOLS_SKIP_CHECK=1 mcopy -i "$w/esp.img" /usr/lib/syslinux/modules/efi64/ldlinux.e64 "$w/syslinux.cfg" ::/EFI/BOOT/
	syslinux --install "$w/esp.img"
	root_bytes=$(stat -c %s "$w/root.raw")
	truncate -s $(((1 + esp_mib) * 1048576 + root_bytes)) "$w/disk.raw"
	printf 'label: dos\nstart=2048, size=%d, type=ef, bootable\nstart=%d, type=83\n' $((esp_mib * 2048)) $(((1 + esp_mib) * 2048)) | sfdisk -q "$w/disk.raw"
	dd if=/usr/lib/syslinux/mbr/mbr.bin of="$w/disk.raw" bs=440 count=1 conv=notrunc status=none
	dd if="$w/esp.img" of="$w/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
	dd if="$w/root.raw" of="$w/disk.raw" bs=1M seek=$((1 + esp_mib)) conv=notrunc,sparse status=none
	rm -f "$w/root.raw" "$w/esp.img" "$w/fstab" "$w/syslinux.cfg"
	qemu-img convert -f raw -O qcow2 "$w/disk.raw" "$w/cloud.qcow2"
	rm -f "$w/disk.raw"
	zstd -q -T0 -3 "$w/cloud.qcow2" -o "$w/cloud.qcow2.zst"
	(cd "$w" && sha256sum cloud.qcow2 cloud.qcow2.zst >SHA256SUMS)
}
# --- END CLOUD RECIPE ---
cloud_key() { { image_key; sed -n '/^# --- BEGIN CLOUD RECIPE ---$/,/^# --- END CLOUD RECIPE ---$/p' "$SELF"; } | sha256sum | cut -c1-16; }
cloud_dir() { printf '%s/cloud-%s' "$CACHE_ROOT" "$(cloud_key)"; }

ensure_cloud_image() {
	local dir tmp
	dir=$(cloud_dir)
	if [[ -s $dir/SHA256SUMS ]]; then
		phase_done "cached cloud image found ($dir)"
		return 0
	fi
	exec 8>"$CACHE_ROOT/.lock"
	flock 8
	tmp=$(mktemp -d "$CACHE_ROOT/.build-cloud-XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf --one-file-system '$tmp'" EXIT
	# a separate bash, so that set -e holds inside the build (it is off under `if !`)
	if ! bash "$SELF" _cloud-build "$(image_dir)" "$tmp" >"$LOG_DIR/cloud-build.log" 2>&1 </dev/null; then
		tail -n 20 "$LOG_DIR/cloud-build.log" >&2
		die "cloud image build failed (log: $LOG_DIR/cloud-build.log)"
	fi
	chmod 755 "$tmp"
	rm -rf --one-file-system "$dir"
	mv -T "$tmp" "$dir"
	trap - EXIT
	exec 8>&-
	phase_done "built cloud image: $(du -h --apparent-size "$dir/cloud.qcow2" | cut -f1) qcow2, $(du -h --apparent-size "$dir/cloud.qcow2.zst" | cut -f1) zstd"
}

image_http_pid() { # prints the pid when our pid file names a live server
	local pid
	pid=$(cat "$IMAGE_HTTP_PID" 2>/dev/null) || return 1
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && grep -q http.server "/proc/$pid/cmdline" 2>/dev/null && printf '%s' "$pid"
}

ensure_image_http() {
	local dir pid i
	dir=$(cloud_dir)
	if pid=$(image_http_pid); then
		if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--directory $dir "; then
			phase_done "image server pid $pid already serves $dir"
			return 0
		fi
		kill "$pid"
	fi
	# without the lock descriptors (8, 9): the server outlives this script
	setsid python3 -m http.server --bind "$IMAGE_HTTP_ADDR" --directory "$dir" "$IMAGE_HTTP_PORT" >"$LOG_DIR/image-http.log" 2>&1 </dev/null 8>&- 9>&- &
	echo $! >"$IMAGE_HTTP_PID"
	for i in $(seq 50); do
		curl -fsS -o /dev/null "http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/SHA256SUMS" 2>/dev/null && break
		sleep 0.1
	done
	curl -fsS -o /dev/null "http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/SHA256SUMS" || die "the image server did not answer (log: $LOG_DIR/image-http.log)"
	phase_done "image server pid $(cat "$IMAGE_HTTP_PID") serves $dir at http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/ (took ${i}00 ms)"
}

stop_image_http() {
	local pid
	if pid=$(image_http_pid); then
		kill "$pid"
		log "down: stopped the image server pid $pid"
	fi
	rm -f "$IMAGE_HTTP_PID"
}

# ---------------------------------------------------------------- commands
cmd_up() {
	need_root
	mkdir -p "$STATE_DIR" "$LOG_DIR"
	exec 9>"$LOCK_FILE"
	flock -n 9 || { log "another testhost.sh holds $LOCK_FILE; waiting"; flock 9; }
	phase packages; ensure_packages
	phase pki; ensure_pki
	phase config; ensure_config
	phase libvirtd; ensure_libvirtd
	phase pools; ensure_pools
	phase image; ensure_image
	phase image-pool; ensure_image_pool
	phase image-debian13; TESTHOST_GEN=debian13 ensure_image
	phase image-pool-debian13; TESTHOST_GEN=debian13 ensure_image_pool
	phase cloud-image; ensure_cloud_image
	phase image-http; ensure_image_http
	phase tiny-guest; bash "$TINYGUEST" build "$(image_dir)" "$CACHE_ROOT" >/dev/null
	log "up: done in $(elapsed "$T_START")s; next: eval \"\$(bash $SELF env)\""
}

cmd_image() {
	need_root
	mkdir -p "$STATE_DIR" "$LOG_DIR"
	phase packages; ensure_packages mmdebstrap e2fsprogs qemu-utils
	phase image; ensure_image
	if virsh_ok "$URI_UNIX"; then
		phase image-pool; ensure_image_pool
	else
		log "libvirtd not answering: pool $IMAGE_POOL not refreshed (run up)"
	fi
	log "image: done in $(elapsed "$T_START")s"
}

cmd_status() {
	local ok=0 pid dir dir13 p v
	if p=$(missing_packages | tr '\n' ' '); [[ -z $p ]]; then
		log "packages: all ${#HOST_PACKAGES[@]} installed"
	else
		log "packages: missing $p"; ok=1
	fi
	if pid=$(our_libvirtd_pid); then log "libvirtd: pid $pid (started by testhost.sh)"
	elif pgrep -x libvirtd >/dev/null; then log "libvirtd: running, not started by testhost.sh (pid $(pgrep -x libvirtd | head -n1))"
	else log "libvirtd: not running"; ok=1
	fi
	if virsh_ok "$URI_UNIX"; then log "$URI_UNIX: answers"; else log "$URI_UNIX: no answer"; ok=1; fi
	if virsh_ok "$URI_TCP"; then log "$URI_TCP: answers"; else log "$URI_TCP: no answer"; ok=1; fi
	if virsh_ok "$URI_TLS_CHECK"; then log "$URI_TLS: answers"; else log "$URI_TLS: no answer"; ok=1; fi
	dir=$(image_dir)
	if image_complete "$dir"; then log "image: $dir"; else log "image: missing ($dir)"; ok=1; fi
	dir13=$(TESTHOST_GEN=debian13 image_dir)
	if image_complete "$dir13"; then log "image debian13: $dir13"; else log "image debian13: missing ($dir13)"; ok=1; fi
	if image_complete "$dir"; then
		local tiny
		tiny=$(bash "$TINYGUEST" dir "$dir" "$CACHE_ROOT")
		if [[ -s $tiny/vmlinux && -s $tiny/initrd.img ]]; then log "tiny guest: $tiny"; else log "tiny guest: missing ($tiny)"; ok=1; fi
	fi
	if virsh_ok "$URI_UNIX"; then
		for p in "default:$DEFAULT_POOL_PATH" "$TEST_POOL:$TEST_POOL_PATH" "$IMAGE_POOL:$dir" "$IMAGE_POOL-debian13:$dir13"; do
			local n=${p%%:*} wantp=${p#*:} st path
			st=$(pool_field "$n" State); path=$(pool_path "$n")
			if [[ $st == running && $path == "$wantp" ]]; then
				log "pool $n: running at $path"
			else
				log "pool $n: ${st:-undefined} ${path:+at $path}${path:+ }(want running at $wantp)"; ok=1
			fi
		done
		for v in "$IMAGE_POOL" "$IMAGE_POOL-debian13"; do
			if vsh vol-info --pool "$v" rootfs.qcow2 >/dev/null 2>&1; then
				log "volume $v/rootfs.qcow2: present"
			else
				log "volume $v/rootfs.qcow2: missing"; ok=1
			fi
		done
	fi
	if ((ok == 0)); then log "status: up"; else log "status: NOT up (run: bash $SELF up)"; fi
	return "$ok"
}

cmd_env() {
	local dir
	dir=$(image_dir)
	image_complete "$dir" || die "image $dir not built: run 'bash $SELF up' first"
	cat <<EOF
export KOHAKU_URI=$URI_UNIX
export KOHAKU_TEST_TCP_URI=$URI_TCP
export KOHAKU_TEST_TLS_URI=$URI_TLS
export KOHAKU_TEST_TLS_PKI=$PKI_DIR/client
export KOHAKU_TEST_TLS_STRANGER_PKI=$PKI_DIR/stranger
export KOHAKU_TEST_POOL=$TEST_POOL
export KOHAKU_TEST_IMAGE_POOL=$IMAGE_POOL
export KOHAKU_TEST_BASE_VOLUME=rootfs.qcow2
export KOHAKU_TEST_KERNEL=$dir/vmlinuz
export KOHAKU_TEST_INITRD=$dir/initrd.img
EOF
	# the tiny test guest (KOHAKU_TEST_TINY_KERNEL, KOHAKU_TEST_TINY_INITRD)
	bash "$TINYGUEST" env "$dir" "$CACHE_ROOT"
	# the cloud-style image, as a vendor serves it
	if [[ -s $(cloud_dir)/SHA256SUMS ]] && image_http_pid >/dev/null; then
		cat <<EOF
export KOHAKU_TEST_CLOUD_IMAGE_URL=http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/cloud.qcow2
export KOHAKU_TEST_CLOUD_IMAGE_SUMS=http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/SHA256SUMS
export KOHAKU_TEST_CLOUD_IMAGE_DIR=$(cloud_dir)
EOF
	else
		log "cloud image or its server missing: KOHAKU_TEST_CLOUD_IMAGE_* not set (run 'bash $SELF up')"
	fi
	# the Debian 13 generation (cloud-init 25.x, netplan + networkd)
	dir=$(TESTHOST_GEN=debian13 image_dir)
	if image_complete "$dir"; then
		cat <<EOF
export KOHAKU_TEST_GEN2_IMAGE_POOL=$IMAGE_POOL-debian13
export KOHAKU_TEST_GEN2_BASE_VOLUME=rootfs.qcow2
export KOHAKU_TEST_GEN2_KERNEL=$dir/vmlinuz
export KOHAKU_TEST_GEN2_INITRD=$dir/initrd.img
EOF
	else
		log "image $dir (debian13) not built: KOHAKU_TEST_GEN2_* not set (run 'bash $SELF up')"
	fi
}

cmd_down() {
	need_root
	local pid running
	stop_image_http
	if pid=$(our_libvirtd_pid); then
		running=$(virsh -q -c "$URI_UNIX" list --name 2>/dev/null | sed '/^$/d' | tr '\n' ' ' || true)
		[[ -n $running ]] && log "WARNING: domains still running (their QEMU processes outlive libvirtd): $running"
		stop_our_libvirtd
		log "down: stopped libvirtd pid $pid; caches in $CACHE_ROOT kept"
	else
		rm -f "$PID_FILE"
		if pgrep -x libvirtd >/dev/null; then
			log "down: the running libvirtd was not started by testhost.sh; leaving it alone"
		else
			log "down: no libvirtd of ours is running"
		fi
	fi
}

# ---------------------------------------------------------------- smoke
SMOKE_DOM=""
SMOKE_DIR=""
SMOKE_LISTENER=""
smoke_cleanup() {
	set +e
	if [[ -n $SMOKE_DOM ]] && virsh -q -c "$URI_UNIX" domstate "$SMOKE_DOM" >/dev/null 2>&1; then
		virsh -q -c "$URI_UNIX" destroy "$SMOKE_DOM" >/dev/null 2>&1
	fi
	if [[ -n $SMOKE_LISTENER ]] && kill -0 "$SMOKE_LISTENER" 2>/dev/null; then
		kill "$SMOKE_LISTENER" 2>/dev/null
		wait "$SMOKE_LISTENER" 2>/dev/null
	fi
	if [[ -n $SMOKE_DIR && -d $SMOKE_DIR ]]; then
		[[ -f $SMOKE_DIR/console.log ]] && cp -f "$SMOKE_DIR/console.log" "$LOG_DIR/smoke-console.log"
		if [[ ${KOHAKU_SMOKE_KEEP:-0} == 1 ]]; then
			log "smoke: kept $SMOKE_DIR"
		else
			rm -rf --one-file-system "$SMOKE_DIR"
		fi
	fi
}

cmd_smoke() {
	need_root
	local dir py timeout=${KOHAKU_SMOKE_TIMEOUT:-600}
	dir=$(image_dir)
	image_complete "$dir" || die "image not built: run 'bash $SELF up' first"
	virsh_ok "$URI_UNIX" || die "libvirtd does not answer on $URI_UNIX: run 'bash $SELF up' first"
	command -v xorriso >/dev/null || die "xorriso missing: run 'bash $SELF up' first"
	py=$(command -v python3 || true)
	[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
	[[ -n $py ]] || die "python3 is needed for the phone-home listener"
	mkdir -p "$LOG_DIR"

	SMOKE_DIR=$(mktemp -d /var/tmp/kohaku-smoke.XXXXXX)
	trap smoke_cleanup EXIT
	trap 'exit 130' INT TERM
	local id mac token d=$SMOKE_DIR
	id=smoke-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
	SMOKE_DOM=kohaku-$id
	mac=52:54:00:$(od -An -N3 -tx1 /dev/urandom | sed 's/^ //; s/ /:/g')
	token=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
	mkdir -p "$d/seed" "$d/share"
	printf '%s\n' "$token" >"$d/share/token"

	phase smoke-listener
	cat >"$d/listener.py" <<'PY'
import http.server, os, sys, time
out, portfile, lifetime = sys.argv[1], sys.argv[2], float(sys.argv[3])
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(out, "ab") as f:
            f.write(self.path.encode() + b" " + body + b"\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok\n")
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
srv.timeout = 1
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(portfile + ".tmp", portfile)
end = time.time() + lifetime   # stops by itself
while time.time() < end:
    srv.handle_request()
PY
	"$py" "$d/listener.py" "$d/phonehome.log" "$d/port" "$((timeout + 30))" &
	SMOKE_LISTENER=$!
	local i port
	for ((i = 0; i < 50; i++)); do [[ -s $d/port ]] && break; sleep 0.1; done
	port=$(cat "$d/port" 2>/dev/null) || die "phone-home listener did not start"
	phase_done "listener pid $SMOKE_LISTENER on 127.0.0.1:$port (guest sees 10.0.2.2:$port)"

	phase smoke-seed
	cat >"$d/seed/meta-data" <<EOF
instance-id: $id
local-hostname: kohaku-smoke
EOF
	# MAC-matched static netplan v2 config (what kohaku_seed generates); slirp's
	# DHCP would hand out 10.0.2.15, so 10.0.2.50 proves the static config applied.
	cat >"$d/seed/network-config" <<EOF
version: 2
ethernets:
  nic0:
    match:
      macaddress: "$mac"
$([[ ${KOHAKU_SMOKE_SET_NAME:-1} == 1 ]] && echo "    set-name: eth0" || true)
    addresses: [10.0.2.50/24]
    gateway4: 10.0.2.2
    nameservers:
      addresses: [10.0.2.3]
EOF
	cat >"$d/seed/user-data" <<EOF
#cloud-config
runcmd:
  - [sh, -c, 'echo "KOHAKU-SMOKE marker-\$((6*7)) \$(hostname)" > /dev/ttyS0']
  - [sh, -c, 'echo "KOHAKU-SMOKE addr \$(ip -4 -br addr | grep -v ^lo | tr -s " " | tr "\\n" ";")" > /dev/ttyS0']
  - [sh, -c, 'echo "KOHAKU-SMOKE dns \$(grep -h ^nameserver /etc/resolv.conf | tr "\\n" ";")" > /dev/ttyS0']
  - [sh, -c, 'echo "KOHAKU-SMOKE eni \$(grep -hv "^#" /etc/network/interfaces.d/* /etc/netplan/* 2>/dev/null | tr -s " " | tr "\\n" "|")" > /dev/ttyS0']
  - [sh, -c, 'mkdir -p /mnt/k9p && mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 kohaku9p /mnt/k9p && echo "KOHAKU-SMOKE 9p \$(cat /mnt/k9p/token)" > /dev/ttyS0 || echo "KOHAKU-SMOKE 9p FAILED" > /dev/ttyS0']
phone_home:
  url: http://10.0.2.2:$port/x/\$INSTANCE_ID
  post: [instance_id, hostname, pub_key_ed25519]
  tries: 10
EOF
	xorriso -as mkisofs -quiet -o "$d/seed.iso" -V cidata -J -r "$d/seed" 2>"$d/xorriso.log" ||
		{ cat "$d/xorriso.log" >&2; die "xorriso failed"; }
	qemu-img create -q -f qcow2 -F qcow2 -b "$dir/rootfs.qcow2" "$d/overlay.qcow2"
	phase_done "seed.iso (cidata) and qcow2 overlay on $dir/rootfs.qcow2"

	phase smoke-boot
	cat >"$d/domain.xml" <<EOF
<domain type='qemu'>
  <name>$SMOKE_DOM</name>
  <memory unit='MiB'>1024</memory>
  <vcpu>2</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>$dir/vmlinuz</kernel>
    <initrd>$dir/initrd.img</initrd>
    <cmdline>root=/dev/vda rw console=ttyS0</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$d/overlay.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='$d/seed.iso'/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
    </disk>
    <filesystem type='mount' accessmode='passthrough'>
      <source dir='$d/share'/>
      <target dir='kohaku9p'/>
      <readonly/>
    </filesystem>
    <interface type='user'>
      <mac address='$mac'/>
      <model type='virtio'/>
    </interface>
    <serial type='file'>
      <source path='$d/console.log'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
	local t0=$EPOCHREALTIME
	virsh -q -c "$URI_UNIX" create "$d/domain.xml" >/dev/null
	log "domain $SMOKE_DOM started (TCG, 2 vCPU, 1 GiB, mac $mac); waiting up to ${timeout}s"
	local c=$d/console.log got_marker="" got_home="" got_final="" deadline=$((SECONDS + timeout))
	while ((SECONDS < deadline)); do
		[[ -z $got_marker ]] && grep -q 'KOHAKU-SMOKE marker-42' "$c" 2>/dev/null && got_marker=$(elapsed "$t0") && log "runcmd marker on ttyS0 after ${got_marker}s"
		[[ -z $got_home ]] && grep -q "instance_id=$id" "$d/phonehome.log" 2>/dev/null && got_home=$(elapsed "$t0") && log "phone_home POST received after ${got_home}s"
		[[ -z $got_final ]] && grep -q 'Cloud-init v\. .* finished at' "$c" 2>/dev/null && got_final=$(elapsed "$t0") && log "cloud-init final message after ${got_final}s"
		[[ -n $got_marker && -n $got_home && -n $got_final ]] && break
		virsh -q -c "$URI_UNIX" domstate "$SMOKE_DOM" >/dev/null 2>&1 || { log "domain went away"; break; }
		sleep 1
	done
	local fail=() addr ninep
	addr=$(grep -a 'KOHAKU-SMOKE addr' "$c" 2>/dev/null | tail -n1 | sed 's/.*KOHAKU-SMOKE addr //' | tr -d '\r' || true)
	ninep=$(grep -a 'KOHAKU-SMOKE 9p' "$c" 2>/dev/null | tail -n1 | sed 's/.*KOHAKU-SMOKE 9p //' | tr -d '\r' || true)
	[[ -n $got_marker ]] || fail+=("no runcmd marker on the console")
	[[ -n $got_home ]] || fail+=("no phone_home POST")
	[[ -n $got_final ]] || fail+=("no cloud-init final message")
	if [[ ${KOHAKU_SMOKE_SET_NAME:-1} == 1 ]]; then
		[[ $addr == *eth0\ *10.0.2.50/24* ]] || fail+=("eth0 does not have the static 10.0.2.50/24 (got: ${addr:-nothing})")
	else
		[[ $addr == *10.0.2.50/24* ]] || fail+=("no interface has the static 10.0.2.50/24 (got: ${addr:-nothing})")
	fi
	[[ $ninep == "$token" ]] || fail+=("9p share not read back (got: ${ninep:-nothing})")
	log "guest addresses: ${addr:-?}; 9p token: $([[ $ninep == "$token" ]] && echo match || echo "${ninep:-?}")"
	log "guest resolv.conf: $(grep -a 'KOHAKU-SMOKE dns' "$c" 2>/dev/null | tail -n1 | sed 's/.*KOHAKU-SMOKE dns //' | tr -d '\r' || true)"
	log "guest network config: $(grep -a 'KOHAKU-SMOKE eni' "$c" 2>/dev/null | tail -n1 | sed 's/.*KOHAKU-SMOKE eni //' | tr -d '\r' || true)"
	[[ -s $d/phonehome.log ]] && log "phone_home: $(head -c 300 "$d/phonehome.log" | tr '\n' ' ')"
	grep -a 'Cloud-init v\. .* finished at' "$c" 2>/dev/null | tail -n1 | tr -d '\r' | sed 's/^/testhost: guest: /' >&2 || true
	if grep -aqE 'Failed to run module|Traceback' "$c" 2>/dev/null; then
		log "WARNING: cloud-init reported module failures:"
		grep -aE 'Failed to run module|Traceback' "$c" | head -n 5 | sed 's/^/testhost:   /' >&2
	fi
	if ((${#fail[@]})); then
		log "--- tail of guest console"
		tail -n 40 "$c" >&2 2>/dev/null || true
		phase_done "FAILED: ${fail[*]}"
		log "console log kept at $LOG_DIR/smoke-console.log"
		exit 1
	fi
	phase_done "cloud-init ran and phoned home; static address, 9p and runcmd OK"
	phase smoke-cleanup
	virsh -q -c "$URI_UNIX" destroy "$SMOKE_DOM" >/dev/null
	SMOKE_DOM=""
	smoke_cleanup
	SMOKE_DIR="" SMOKE_LISTENER=""
	trap - EXIT INT TERM
	phase_done "domain destroyed, overlay/seed removed, listener stopped (console log: $LOG_DIR/smoke-console.log)"
	log "smoke: PASS in $(elapsed "$T_START")s"
}

main() {
	local cmd=${1:-}
	shift || true
	case $cmd in
	up) cmd_up ;;
	status) cmd_status ;;
	env) cmd_env ;;
	image) cmd_image ;;
	smoke) cmd_smoke ;;
	down) cmd_down ;;
	restart) cmd_restart ;;
	image-debian13) TESTHOST_GEN=debian13 cmd_image ;;
	smoke-debian13) TESTHOST_GEN=debian13 cmd_smoke ;;
	_cloud-build) cloud_build_into "$1" "$2" ;; # internal: used by ensure_cloud_image
	_image-build) if [[ -n ${TESTHOST_GEN:-} ]]; then image_build_gen_into "$1"; else image_build_into "$1"; fi ;; # internal: used by ensure_image
	-h | --help | help) usage ;;
	*) usage >&2; exit 2 ;;
	esac
}

main "$@"
