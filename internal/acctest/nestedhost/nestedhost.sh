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
          QEMU's edu device, an ivshmem-plain with a 256 GiB BAR, an SR-IOV
          NVMe controller whose VFs get NVIDIA's vGPU files, and a
          VGA + ich9-intel-hda pair in one slot, like a
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
  KOHAKU_NESTED_LOG_DIR    build and apt logs (default /var/log/kohaku-nested)
  KOHAKU_NESTED_BAR_DIR    where the large-BAR stand-in's sparse memory file goes
                           (default /var/tmp/kohaku-nested)
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
# the large-BAR stand-in's memory: a sparse file (never written), on disk
readonly BAR_ROOT=${KOHAKU_NESTED_BAR_DIR:-/var/tmp/kohaku-nested}
readonly BAR_GIB=256
# virtual functions the SR-IOV stand-in (QEMU's NVMe) offers at most
readonly SRIOV_MAX_VFS=4
readonly LOG_DIR=${KOHAKU_NESTED_LOG_DIR:-/var/log/kohaku-nested}
readonly HOST_PACKAGES=(qemu-system-x86 qemu-utils libvirt-clients mmdebstrap e2fsprogs)
SELF=$(readlink -f "${BASH_SOURCE[0]}")
readonly SELF HERE=${SELF%/*}

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
. "$HERE/../hostlib.sh"

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (mmdebstrap --mode=root, QEMU)"; }

# ---------------------------------------------------------------- L1 image
# The recipe is recipes/l1.sh (README.md, "What up does"); the image's key
# hashes it, the NVIDIA stand-in's source it builds, and the mirror.
RECIPE=("mirror=$MIRROR" -- "$HERE/recipes/l1.sh" "$HERE/nvidia-standin/nvidia.c")
image_key() { recipe_key "${RECIPE[@]}"; }
image_dir() { printf '%s/%s' "$CACHE_ROOT" "$(image_key)"; }
image_complete() { # $1 = dir
	local f
	for f in rootfs.raw vmlinuz initrd.img nvidia-version ssh_key ssh_host_key.pub recipe.txt; do [[ -s $1/$f ]] || return 1; done
}
image_describe() { echo "$(du -h "$1/rootfs.raw" | cut -f1) used of $(du -h --apparent-size "$1/rootfs.raw" | cut -f1), kernel $(cat "$1/kernel-version")"; }
ensure_l1_image() {
	ensure_image "L1 image $(image_key)" "$(image_dir)" image_complete image_describe \
		"$LOG_DIR/image-build.log" bash "$HERE/recipes/l1.sh" "$MIRROR"
}

# ---------------------------------------------------------------- L1 process
virsh_ok() { timeout 10 virsh -c "$(uri)" version >/dev/null 2>&1; }

our_qemu_pid() { pidfile_pid "$STATE/qemu.pid" 'qemu-system-x86*' "-name $L1_HOSTNAME "; } # of this instance
stop_qemu() { pidfile_stop "$STATE/qemu.pid" "L1 QEMU" 10 'qemu-system-x86*' "-name $L1_HOSTNAME "; }

port_busy() { port_open 127.0.0.1 "$1"; } # $1: something already listens on 127.0.0.1:$1

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
		# qemu64, not max: every instruction of L1 (its kernel, libvirtd, and
		# the QEMU that emulates its L2 guests, whose code generator uses
		# AVX2 where the CPU offers it) is emulated, and max's newer ones
		# cost time (a Debian guest of the test host's booted in about four
		# fifths of the time with qemu64). Both have 40 physical address
		# bits under TCG, room for the 512 GiB 64-bit window below.
		-machine q35,accel=tcg -cpu qemu64 -smp 2 -m 1536
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
	if [[ $IOMMU == intel ]]; then
		# the large-BAR stand-in: ivshmem-plain, whose BAR 2 (64-bit,
		# prefetchable) is its memory backend, 256 GiB: more than the 64-bit
		# aperture L1's OVMF opens for an L2 by default (128 GiB, an eighth
		# of the 40 physical address bits of L2's CPU), which a 64 GiB BAR
		# fits. L1's own window is made large enough for it.
		QEMU_ARGS+=(
			-global q35-pcihost.pci-hole64-size=512G
			-object "memory-backend-file,id=bigbar,size=${BAR_GIB}G,mem-path=$BAR_ROOT/$INSTANCE-bar.mem,share=on"
			-device pcie-root-port,id=rp4,bus=pcie.0,chassis=4,slot=4,addr=0x12
			-device ivshmem-plain,memdev=bigbar,bus=rp4
		)
		# the SR-IOV GPU stand-in: QEMU's NVMe controller, the one device of
		# QEMU 7.2 with SR-IOV, as a physical function with up to 4 virtual
		# functions (the NVIDIA stand-in gives them NVIDIA's vGPU files). SR-IOV
		# needs an NVM subsystem; each VF takes at least 2 flexible queues and 1
		# flexible interrupt, and the PF keeps at least 2 queues of its own
		# (max_ioqpairs - sriov_vq_flexible >= 2). Its root port comes last (addr
		# 0x14, the next bus number), so the other stand-ins keep their addresses.
		# Like the large BAR, only the intel-iommu L1 has it.
		QEMU_ARGS+=(
			-device pcie-root-port,id=rp5,bus=pcie.0,chassis=5,slot=5,addr=0x14
			-device nvme-subsys,id=sriovsys
			-device "nvme,bus=rp5,serial=kohaku-sriov,subsys=sriovsys,max_ioqpairs=12,msix_qsize=8,sriov_max_vfs=$SRIOV_MAX_VFS,sriov_vq_flexible=$((2 * SRIOV_MAX_VFS)),sriov_vi_flexible=$SRIOV_MAX_VFS"
		)
	fi
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
	if [[ $IOMMU == intel ]]; then
		mkdir -p "$BAR_ROOT"
		rm -f "$BAR_ROOT/$INSTANCE-bar.mem"
		truncate -s "${BAR_GIB}G" "$BAR_ROOT/$INSTANCE-bar.mem"
	fi
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
	# (the answer is a few KiB: the socket buffers it unread)
	wait_until 60 1 grep -aq "^${mark}-END" "$STATE/console.log" || true
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
l1_ssh() { # run a command in L1 over its sshd, as root, with the image's key
	timeout 60 ssh -q -i "$(image_dir)/ssh_key" -o UserKnownHostsFile="$STATE/known_hosts" -o BatchMode=yes \
		-o ConnectTimeout=20 -p "$SSH_PORT" root@127.0.0.1 "$@"
}

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
		1af4:1110) printf 'BIGBAR=%s\n' "$addr" ;;
		1b36:0010) # the SR-IOV stand-in's PF (its VFs, when enabled, have the same id)
			if [[ $x == *"<capability type='virt_functions'"* ]]; then
				printf 'SRIOV_PF=%s\nSRIOV_PF_DRIVER=%s\nSRIOV_VFS=%s\n' "$addr" \
					"$(printf '%s' "$x" | tr -d ' \n' | sed -n 's:.*<driver><name>\([^<]*\)</name>.*:\1:p')" \
					"$(printf '%s' "$x" | sed -n "s:.*<capability type='virt_functions' maxCount='\([0-9]*\)'.*:\1:p")"
			fi
			;;
		esac
	done >"$tmp"
	printf 'IOMMU_GROUPED=%s\n' "$groups" >>"$tmp"
	# the mediated-device parent mtty registers (recipes/l1.sh)
	printf 'MDEV_PARENT=%s\n' "$(vsh nodedev-list --cap mdev_types | head -n1)" >>"$tmp"
	mv -f "$tmp" "$out"
}

devices_summary() {
	local GPU="" GPU_DRIVER="" GPU_AUDIO="" NIC="" EDU="" IOMMU_GROUPED="" MDEV_PARENT="" BIGBAR="" SRIOV_PF="" SRIOV_PF_DRIVER="" SRIOV_VFS=""
	# shellcheck source=/dev/null # devices.env: written by inventory at run time
	source "$STATE/devices.env"
	printf 'GPU %s (on %s) + audio %s, NIC %s, edu %s, 256 GiB BAR %s, SR-IOV PF %s (on %s, %s VFs), mdev parent %s; %s PCI devices in IOMMU groups' \
		"${GPU:-?}" "${GPU_DRIVER:-no driver}" "${GPU_AUDIO:-?}" "${NIC:-?}" "${EDU:-?}" "${BIGBAR:-?}" \
		"${SRIOV_PF:-?}" "${SRIOV_PF_DRIVER:-no driver}" "${SRIOV_VFS:-?}" "${MDEV_PARENT:-none}" "$IOMMU_GROUPED"
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
		grep -q '^MDEV_PARENT=mtty_mtty$' "$STATE/devices.env" ||
			die "L1 shows no mediated-device parent mtty_mtty: is the mtty module loaded?"
		{ grep -q "^SRIOV_PF=." "$STATE/devices.env" && grep -q "^SRIOV_VFS=$SRIOV_MAX_VFS\$" "$STATE/devices.env"; } ||
			die "L1 shows no SR-IOV stand-in (QEMU's NVMe, 1b36:0010) with $SRIOV_MAX_VFS VFs"
		# the PF's driver enables its VFs (sriov_configure): L1's nvme
		grep -q '^SRIOV_PF_DRIVER=nvme$' "$STATE/devices.env" ||
			die "L1's SR-IOV stand-in is not on the nvme driver ($(grep '^SRIOV_PF_DRIVER=' "$STATE/devices.env"))"
		# the NVIDIA stand-in that gives its VFs the vGPU files (over sshd:
		# module parameters are no node device)
		local pf_id
		pf_id=$(l1_ssh cat /sys/module/nvidia/parameters/sriov_standin_pf) || die "cannot ask L1's sshd (127.0.0.1:$SSH_PORT) about the NVIDIA stand-in"
		[[ $pf_id == 1b36:0010 ]] ||
			die "L1's NVIDIA stand-in gives no SR-IOV VF the vGPU files (sriov_standin_pf '$pf_id'): is the image older than nvidia.c?"
	fi
	exec 9>&-
}

cmd_up() {
	need_root
	instances_from_args "$@"
	mkdir -p "$STATE_ROOT" "$LOG_DIR"
	phase packages; ensure_packages "${HOST_PACKAGES[@]}"
	phase image; ensure_l1_image
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
	log "up: done in $(since_start)s; next: eval \"\$(bash $SELF env)\""
}

cmd_image() {
	need_root
	mkdir -p "$LOG_DIR"
	phase packages; ensure_packages "${HOST_PACKAGES[@]}"
	phase image; ensure_l1_image
	log "image: done in $(since_start)s"
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
	local GPU GPU_DRIVER GPU_AUDIO NIC EDU IOMMU_GROUPED MDEV_PARENT="" BIGBAR="" SRIOV_PF=""
	select_instance intel
	if ! our_qemu_pid >/dev/null || [[ ! -s $STATE/devices.env ]]; then
		die "L1 is not up: run 'bash $SELF up' first"
	fi
	# shellcheck source=/dev/null # devices.env: written by inventory at run time
	source "$STATE/devices.env"
	cat <<EOF
export KOHAKU_TEST_NESTED_URI=$(uri)
export KOHAKU_TEST_NESTED_SSH_URI='qemu+ssh://root@127.0.0.1:$SSH_PORT/system?keyfile=$(image_dir)/ssh_key&known_hosts=$STATE/known_hosts'
export KOHAKU_TEST_NESTED_NVIDIA_VERSION=$(cat "$(image_dir)/nvidia-version")
export KOHAKU_TEST_NESTED_HOSTNAME=$L1_HOSTNAME
export KOHAKU_TEST_NESTED_UUID=$L1_UUID
export KOHAKU_TEST_NESTED_GPU=$GPU
export KOHAKU_TEST_NESTED_GPU_AUDIO=$GPU_AUDIO
export KOHAKU_TEST_NESTED_NIC=$NIC
export KOHAKU_TEST_NESTED_EDU=$EDU
export KOHAKU_TEST_NESTED_MDEV_PARENT=$MDEV_PARENT
export KOHAKU_TEST_NESTED_BIGBAR=$BIGBAR
export KOHAKU_TEST_NESTED_SRIOV_PF=$SRIOV_PF
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
		rm -f "$STATE/devices.env" "$BAR_ROOT/$INSTANCE-bar.mem"
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
	diag)
		instances_from_args "$@"
		for i in "${INSTANCES[@]}"; do select_instance "$i"; console_diagnose; done
		;;
	-h | --help | help) usage ;;
	*) usage >&2; exit 2 ;;
	esac
}

# Sourced (as recipes_test.go does to read the image keys), it only defines.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
