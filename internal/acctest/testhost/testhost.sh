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
          qemu+tcp://127.0.0.1/system), create the storage pools and the
          kohaku-quickstart network (192.168.123.0/24, DHCP, reachable from
          this machine), build or reuse the cached Debian 12 and Debian 13
          guest images. Idempotent: a second run only reports what it found.
  quickstart
          only what make quickstart needs: packages, libvirtd, the pools, the
          kohaku-quickstart network, the Debian 12 image and the cloud image
          served on loopback (no Debian 13 image, no tiny guest)
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
  down    remove the kohaku-quickstart network and stop the libvirtd that
          `up` started (by its pid file); caches stay
  restart SIGKILL the libvirtd that `up` started (by its pid file) and start it
          again the way `up` does: the fault tests' "libvirtd killed mid-apply".
          Running QEMU domains survive it.

Environment (all optional):
  KOHAKU_TESTHOST_MIRROR      Debian mirror for the guest image (default http://deb.debian.org/debian)
  KOHAKU_TESTHOST_CACHE       image cache root (default /var/cache/kohaku/images)
  KOHAKU_TESTHOST_LOG_DIR     build, apt and smoke logs (default /var/log/kohaku-testhost)
  KOHAKU_TESTHOST_POOLS=0     image, image-debian13: build only, leave libvirtd's
                              pools alone (for a build into a private cache)
  KOHAKU_SMOKE_TIMEOUT        seconds smoke waits for the guest (default 600)
  KOHAKU_SMOKE_KEEP=1         smoke keeps its work dir (overlay, seed, console log)
EOF
}

# ---------------------------------------------------------------- constants
readonly URI_UNIX="qemu:///system"
readonly URI_TCP="qemu+tcp://127.0.0.1/system"
# TLS on loopback with a throwaway PKI of the script's own (pki.sh): client/
# holds a client's certificates, stranger/ one from a CA libvirtd refuses.
readonly PKI_DIR=/var/lib/kohaku-testhost/pki
readonly URI_TLS="qemu+tls://127.0.0.1/system"
readonly URI_TLS_CHECK="$URI_TLS?pkipath=$PKI_DIR/client"
readonly STATE_DIR=/run/kohaku-testhost
readonly PID_FILE=$STATE_DIR/libvirtd.pid
readonly LOCK_FILE=$STATE_DIR/lock
readonly LOG_DIR=${KOHAKU_TESTHOST_LOG_DIR:-/var/log/kohaku-testhost}
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
# The network the quick start's VM joins: a bridge with an address of this
# machine and DHCP from libvirt's dnsmasq, in libvirt's "open" forward mode
# (libvirt adds no firewall rules; this machine has no iptables or nft), so
# this machine reaches its guests and nothing is routed beyond it.
readonly QS_NET=kohaku-quickstart
readonly QS_BRIDGE=kohaku-qs0
readonly QS_NET_PREFIX=192.168.123
SELF=$(readlink -f "${BASH_SOURCE[0]}")
readonly SELF HERE=${SELF%/*}
# the packages up installs, one a line in host-packages (after "#" a comment)
mapfile -t HOST_PACKAGES < <(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$HERE/host-packages")
readonly HOST_PACKAGES
readonly RECIPES=$HERE/recipes # the image recipes: README.md, "The guest images"
# the tiny test guest for scale tests (kernel + busybox initramfs), built from the image
readonly TINYGUEST=$HERE/../tinyguest/tinyguest.sh

# ---------------------------------------------------------------- logging
log_tag() { printf testhost; }
# shellcheck source=../hostlib.sh
. "$HERE/../hostlib.sh"

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (this script configures the whole machine)"; }

# ---------------------------------------------------------------- images
# image_recipe IMAGE sets RECIPE (recipe_text's arguments: what the key of
# debian12, debian13 or cloud hashes) and BUILD (its build command, less the
# work dir). The cloud image is made from the Debian 12 one: its key holds
# that image's key.
image_recipe() {
	case $1 in
	debian12 | debian13)
		RECIPE=("mirror=$MIRROR" -- "$RECIPES/$1.sh" "$RECIPES/debian.sh")
		BUILD=(bash "$RECIPES/$1.sh" "$MIRROR")
		;;
	cloud)
		RECIPE=("base=$(image_key debian12)" -- "$RECIPES/cloud-image.sh")
		BUILD=(bash "$RECIPES/cloud-image.sh" "$(image_dir debian12)")
		;;
	*) die "unknown image $1" ;;
	esac
}
image_key() { image_recipe "$1"; recipe_key "${RECIPE[@]}"; }
image_dir() { # IMAGE: its cache entry, <key> (cloud-<key> for the cloud image)
	local prefix=""
	[[ $1 == cloud ]] && prefix=cloud-
	printf '%s/%s%s' "$CACHE_ROOT" "$prefix" "$(image_key "$1")"
}
image_complete() { # $1 = dir
	local f
	for f in rootfs.qcow2 vmlinuz initrd.img recipe.txt; do [[ -s $1/$f ]] || return 1; done
}
cloud_complete() { [[ -s $1/SHA256SUMS ]]; }
image_describe() { echo "$(du -h --apparent-size "$1/rootfs.qcow2" | cut -f1) qcow2, kernel $(cat "$1/kernel-version")"; }
cloud_describe() { echo "$(du -h --apparent-size "$1/cloud.qcow2" | cut -f1) qcow2, $(du -h --apparent-size "$1/cloud.qcow2.zst" | cut -f1) zstd"; }

# ensure_guest_image IMAGE: build debian12 or debian13 into the cache, or find it.
ensure_guest_image() {
	image_recipe "$1"
	ensure_image "$1 image $(image_key "$1")" "$(image_dir "$1")" image_complete image_describe \
		"$LOG_DIR/image-build.log" "${BUILD[@]}"
}

# ---------------------------------------------------------------- libvirt config
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

our_libvirtd_pid() { pidfile_pid "$PID_FILE" libvirtd; } # prints the pid of the libvirtd we started
stop_our_libvirtd() { pidfile_stop "$PID_FILE" libvirtd 15 libvirtd; }

libvirtd_fail() {
	log "$1"
	for f in "$LIBVIRTD_LOG" "$LIBVIRTD_STDERR"; do
		[[ -s $f ]] || continue
		log "--- tail of $f"
		tail -n 25 "$f" >&2
	done
	die "libvirtd is not usable"
}

start_libvirtd() { # returns once it answers on every URI and its pid file names it
	rm -f "$PID_FILE"
	: >"$LIBVIRTD_STDERR"
	# 8/9 are our flock fds: the daemon must not inherit (and so hold) them
	libvirtd -d --listen --pid-file "$PID_FILE" 2>>"$LIBVIRTD_STDERR" 8>&- 9>&- ||
		libvirtd_fail "libvirtd -d --listen exited with status $?"
	wait_uris 30 || libvirtd_fail "libvirtd did not answer on $URI_UNIX, $URI_TCP and $URI_TLS within 30 s"
	our_libvirtd_pid >/dev/null || libvirtd_fail "libvirtd answers but $PID_FILE does not name it"
}

uris_answer() { virsh_ok "$URI_UNIX" && virsh_ok "$URI_TCP" && virsh_ok "$URI_TLS_CHECK"; }
wait_uris() { wait_until "$1" 0.2 uris_answer; } # $1 = seconds

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
	log "starting: libvirtd -d --listen --pid-file $PID_FILE"
	start_libvirtd
	pid=$(our_libvirtd_pid)
	phase_done "started libvirtd pid $pid; answers on $URI_UNIX, $URI_TCP and $URI_TLS"
}

# restart: a crash and a restart of our libvirtd, not a clean stop. Refuses
# to touch a libvirtd this script did not start.
cmd_restart() {
	local pid
	pid=$(our_libvirtd_pid) || die "no libvirtd started by this script is running (see $PID_FILE): run 'bash $SELF up'"
	log "restart: SIGKILL libvirtd pid $pid"
	kill -KILL "$pid"
	wait_until 5 0.05 pid_gone "$pid" || die "libvirtd pid $pid survived SIGKILL for 5 s"
	start_libvirtd
	pid=$(our_libvirtd_pid)
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

ensure_image_pool() { # $1 = debian12 | debian13
	local dir r pool=$IMAGE_POOL
	[[ $1 == debian12 ]] || pool+=-$1
	dir=$(image_dir "$1")
	r=$(ensure_pool "$pool" "$dir" replace)
	[[ $r == *": found" ]] || vsh pool-refresh "$pool" >/dev/null
	vsh vol-info --pool "$pool" rootfs.qcow2 >/dev/null ||
		die "pool $pool has no volume rootfs.qcow2"
	phase_done "$r (path $dir)"
}

# ---------------------------------------------------------------- quick start network
qs_net_xml() {
	cat <<EOF
<network>
  <name>$QS_NET</name>
  <forward mode='open'/>
  <bridge name='$QS_BRIDGE' stp='off' delay='0'/>
  <ip address='$QS_NET_PREFIX.1' netmask='255.255.255.0'>
    <dhcp>
      <range start='$QS_NET_PREFIX.100' end='$QS_NET_PREFIX.199'/>
    </dhcp>
  </ip>
</network>
EOF
}
net_field() { vsh net-info "$1" 2>/dev/null | awk -F: -v k="$2" '$1 == k { gsub(/^[ \t]+/, "", $2); print $2 }'; }

# ensure_network defines, starts and autostarts the quick start network where
# it is missing; a network that is there is left as it is (running guests
# may be on it), so a second up changes nothing.
ensure_network() {
	local did=() tmp
	if ! vsh net-info "$QS_NET" >/dev/null 2>&1; then
		tmp=$(mktemp)
		qs_net_xml >"$tmp"
		vsh net-define "$tmp" >/dev/null || { rm -f "$tmp"; die "defining network $QS_NET failed"; }
		rm -f "$tmp"
		did+=(defined)
	fi
	if [[ $(net_field "$QS_NET" Active) != yes ]]; then
		vsh net-start "$QS_NET" >/dev/null || die "starting network $QS_NET failed (libvirtd log: $LIBVIRTD_LOG)"
		did+=(started)
	fi
	if [[ $(net_field "$QS_NET" Autostart) != yes ]]; then
		vsh net-autostart "$QS_NET" >/dev/null
		did+=(autostart)
	fi
	if ((${#did[@]})); then
		phase_done "$QS_NET: ${did[*]} (bridge $QS_BRIDGE, $QS_NET_PREFIX.1/24, DHCP)"
	else
		phase_done "$QS_NET: found"
	fi
}

remove_network() {
	vsh net-info "$QS_NET" >/dev/null 2>&1 || return 0
	[[ $(net_field "$QS_NET" Active) == yes ]] && vsh net-destroy "$QS_NET" >/dev/null
	vsh net-undefine "$QS_NET" >/dev/null
	log "down: removed network $QS_NET"
}

# ---------------------------------------------------------------- cloud-style image
# What users boot: a vendor-style cloud image made from the Debian 12 test image
# (recipes/cloud-image.sh), served like a vendor's mirror.
ensure_cloud_image() {
	image_recipe cloud
	ensure_image "cloud image $(image_key cloud)" "$(image_dir cloud)" cloud_complete cloud_describe \
		"$LOG_DIR/cloud-build.log" "${BUILD[@]}"
}

image_http_pid() { pidfile_pid "$IMAGE_HTTP_PID" 'python*' http.server; } # prints the pid of our server

ensure_image_http() {
	local dir pid
	dir=$(image_dir cloud)
	if pid=$(image_http_pid); then
		if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--directory $dir "; then
			phase_done "image server pid $pid already serves $dir"
			return 0
		fi
		kill "$pid"
	fi
	pidfile_start "$IMAGE_HTTP_PID" "$LOG_DIR/image-http.log" \
		python3 -m http.server --bind "$IMAGE_HTTP_ADDR" --directory "$dir" "$IMAGE_HTTP_PORT"
	wait_until 30 0.2 curl -fsS -o /dev/null "http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/SHA256SUMS" 2>/dev/null ||
		die "the image server did not answer (log: $LOG_DIR/image-http.log)"
	phase_done "image server pid $(cat "$IMAGE_HTTP_PID") serves $dir at http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/"
}

stop_image_http() {
	local pid
	pid=$(image_http_pid) || { rm -f "$IMAGE_HTTP_PID"; return 0; }
	pidfile_stop "$IMAGE_HTTP_PID" "image server" 5 'python*' http.server
	log "down: stopped the image server pid $pid"
}

# ---------------------------------------------------------------- commands
# host_base is what up and quickstart both bring up, under the lock: the
# packages, libvirtd, the pools, the quick start network and the Debian 12
# image. The lock stays held until the script exits.
host_base() {
	need_root
	mkdir -p "$STATE_DIR" "$LOG_DIR"
	exec 9>"$LOCK_FILE"
	flock -n 9 || { log "another testhost.sh holds $LOCK_FILE; waiting"; flock 9; }
	phase packages; ensure_packages
	phase pki; ensure_pki
	phase config; ensure_config
	phase libvirtd; ensure_libvirtd
	phase pools; ensure_pools
	phase network; ensure_network
	phase image; ensure_guest_image debian12
}

cmd_up() {
	host_base
	phase image-pool; ensure_image_pool debian12
	phase image-debian13; ensure_guest_image debian13
	phase image-pool-debian13; ensure_image_pool debian13
	phase cloud-image; ensure_cloud_image
	phase image-http; ensure_image_http
	phase tiny-guest; bash "$TINYGUEST" build "$(image_dir debian12)" "$CACHE_ROOT" >/dev/null
	log "up: done in $(since_start)s; next: eval \"\$(bash $SELF env)\""
}

# quickstart: what make quickstart needs of up, and no more: libvirtd, the
# pools and the network, the Debian 12 image and the cloud image made from
# it, served on loopback. The Debian 13 image and the tiny guest (tests only)
# are left for up.
cmd_quickstart() {
	host_base
	phase cloud-image; ensure_cloud_image
	phase image-http; ensure_image_http
	log "quickstart: host ready in $(since_start)s"
}

cmd_image() { # $1 = debian12 | debian13
	need_root
	mkdir -p "$STATE_DIR" "$LOG_DIR"
	phase packages; ensure_packages mmdebstrap e2fsprogs qemu-utils
	phase image; ensure_guest_image "$1"
	if [[ ${KOHAKU_TESTHOST_POOLS:-1} == 0 ]]; then
		log "KOHAKU_TESTHOST_POOLS=0: libvirtd's image pools left alone"
	elif virsh_ok "$URI_UNIX"; then
		phase image-pool; ensure_image_pool "$1"
	else
		log "libvirtd not answering: pool $IMAGE_POOL not refreshed (run up)"
	fi
	log "image: done in $(since_start)s"
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
	dir=$(image_dir debian12)
	if image_complete "$dir"; then log "image: $dir"; else log "image: missing ($dir)"; ok=1; fi
	dir13=$(image_dir debian13)
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
		if [[ $(net_field "$QS_NET" Active) == yes ]]; then
			log "network $QS_NET: active (bridge $QS_BRIDGE)"
		else
			log "network $QS_NET: not active"; ok=1
		fi
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
	local dir cloud
	dir=$(image_dir debian12)
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
export KOHAKU_QUICKSTART_NETWORK=$QS_NET
EOF
	# the tiny test guest (KOHAKU_TEST_TINY_KERNEL, KOHAKU_TEST_TINY_INITRD)
	bash "$TINYGUEST" env "$dir" "$CACHE_ROOT"
	# the cloud-style image, as a vendor serves it
	cloud=$(image_dir cloud)
	if cloud_complete "$cloud" && image_http_pid >/dev/null; then
		cat <<EOF
export KOHAKU_TEST_CLOUD_IMAGE_URL=http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/cloud.qcow2
export KOHAKU_TEST_CLOUD_IMAGE_SUMS=http://$IMAGE_HTTP_ADDR:$IMAGE_HTTP_PORT/SHA256SUMS
export KOHAKU_TEST_CLOUD_IMAGE_DIR=$cloud
EOF
	else
		log "cloud image or its server missing: KOHAKU_TEST_CLOUD_IMAGE_* not set (run 'bash $SELF up')"
	fi
	# the Debian 13 generation (cloud-init 25.x, netplan + networkd)
	dir=$(image_dir debian13)
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
	if virsh_ok "$URI_UNIX"; then remove_network; fi
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
cmd_smoke() { # $1 = debian12 | debian13; the test itself is smoke.sh
	need_root
	local dir
	dir=$(image_dir "$1")
	image_complete "$dir" || die "image not built: run 'bash $SELF up' first"
	virsh_ok "$URI_UNIX" || die "libvirtd does not answer on $URI_UNIX: run 'bash $SELF up' first"
	exec bash "$HERE/smoke.sh" "$URI_UNIX" "$dir" "$LOG_DIR"
}

main() {
	local cmd=${1:-}
	shift || true
	case $cmd in
	up) cmd_up ;;
	quickstart) cmd_quickstart ;;
	status) cmd_status ;;
	env) cmd_env ;;
	image) cmd_image debian12 ;;
	smoke) cmd_smoke debian12 ;;
	down) cmd_down ;;
	restart) cmd_restart ;;
	image-debian13) cmd_image debian13 ;;
	smoke-debian13) cmd_smoke debian13 ;;
	-h | --help | help) usage ;;
	*) usage >&2; exit 2 ;;
	esac
}

# Sourced (as recipes_test.go does to read the image keys), it only defines.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
