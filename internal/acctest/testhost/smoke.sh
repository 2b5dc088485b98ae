#!/usr/bin/env bash
# smoke.sh URI IMAGE_DIR LOG_DIR: testhost.sh smoke. Boots the guest image in
# IMAGE_DIR once under TCG through the libvirtd at URI with a NoCloud seed and
# checks that cloud-init ran: the runcmd marker on the console, a MAC-matched
# static netplan v2 address, a virtio-9p mount read back, the phone_home POST
# (received by smoke_listener.py) and cloud-init's final message. Cleans up
# after itself; the last console log stays in LOG_DIR/smoke-console.log.
# Environment: KOHAKU_SMOKE_TIMEOUT, KOHAKU_SMOKE_KEEP, KOHAKU_SMOKE_SET_NAME
# (see testhost.sh's usage and README.md).
set -euo pipefail

HERE=$(readlink -f "${BASH_SOURCE[0]%/*}")
readonly HERE URI=$1 IMAGE_DIR=$2 LOG_DIR=$3
log_tag() { printf testhost; }
# shellcheck source=../hostlib.sh
. "$HERE/../hostlib.sh"

SMOKE_DOM=""
SMOKE_DIR=""
SMOKE_LISTENER=""
smoke_cleanup() {
	set +e
	if [[ -n $SMOKE_DOM ]] && virsh -q -c "$URI" domstate "$SMOKE_DOM" >/dev/null 2>&1; then
		virsh -q -c "$URI" destroy "$SMOKE_DOM" >/dev/null 2>&1
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

main() {
	local dir=$IMAGE_DIR py timeout=${KOHAKU_SMOKE_TIMEOUT:-600}
	command -v xorriso >/dev/null || die "xorriso missing: run 'bash $HERE/testhost.sh up' first"
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
	"$py" "$HERE/smoke_listener.py" "$d/phonehome.log" "$d/port" "$((timeout + 30))" &
	SMOKE_LISTENER=$!
	local port
	wait_until 30 0.2 test -s "$d/port" || true
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
$(if [[ ${KOHAKU_SMOKE_SET_NAME:-1} == 1 ]]; then echo "    set-name: eth0"; fi)
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
    <cmdline>root=/dev/vda rw console=ttyS0 panic=5</cmdline>
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
	virsh -q -c "$URI" create "$d/domain.xml" >/dev/null
	log "domain $SMOKE_DOM started (TCG, 2 vCPU, 1 GiB, mac $mac); waiting up to ${timeout}s"
	local c=$d/console.log got_marker="" got_home="" got_final="" deadline=$((SECONDS + timeout))
	while ((SECONDS < deadline)); do
		[[ -z $got_marker ]] && grep -q 'KOHAKU-SMOKE marker-42' "$c" 2>/dev/null && got_marker=$(elapsed "$t0") && log "runcmd marker on ttyS0 after ${got_marker}s"
		[[ -z $got_home ]] && grep -q "instance_id=$id" "$d/phonehome.log" 2>/dev/null && got_home=$(elapsed "$t0") && log "phone_home POST received after ${got_home}s"
		[[ -z $got_final ]] && grep -q 'Cloud-init v\. .* finished at' "$c" 2>/dev/null && got_final=$(elapsed "$t0") && log "cloud-init final message after ${got_final}s"
		[[ -n $got_marker && -n $got_home && -n $got_final ]] && break
		virsh -q -c "$URI" domstate "$SMOKE_DOM" >/dev/null 2>&1 || { log "domain went away"; break; }
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
	virsh -q -c "$URI" destroy "$SMOKE_DOM" >/dev/null
	SMOKE_DOM=""
	smoke_cleanup
	SMOKE_DIR="" SMOKE_LISTENER=""
	trap - EXIT INT TERM
	phase_done "domain destroyed, overlay/seed removed, listener stopped (console log: $LOG_DIR/smoke-console.log)"
	log "smoke: PASS in $(since_start)s"
}

main
