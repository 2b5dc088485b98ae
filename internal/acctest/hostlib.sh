# hostlib.sh: the shell helpers testhost/testhost.sh and nestedhost/nestedhost.sh
# (and tinyguest/tinyguest.sh, for its key) share: logging and phase timing, package installs, waiting with a deadline,
# processes started and stopped by their pid files, and the image cache
# (recipe keys, builds renamed into place). Sourced, never run. The caller
# defines log_tag (what its messages start with) before sourcing it, and
# HOST_PACKAGES and LOG_DIR before calling ensure_packages.
# shellcheck shell=bash

HOSTLIB_DIR=$(readlink -f "${BASH_SOURCE[0]%/*}")

# ---------------------------------------------------------------- logging
log() { printf '%s: %s\n' "$(log_tag)" "$*" >&2; }
die() { printf '%s: ERROR: %s\n' "$(log_tag)" "$*" >&2; exit 1; }

T_START=$EPOCHREALTIME
PHASE=""
PHASE_T0=""
elapsed() { # elapsed seconds since $1 (an EPOCHREALTIME value), 1 decimal
	local now=$EPOCHREALTIME
	awk -v a="$1" -v b="$now" 'BEGIN { printf "%.1f", b - a }'
}
since_start() { elapsed "$T_START"; } # seconds since the script started
phase() { PHASE=$1; PHASE_T0=$EPOCHREALTIME; log "[$PHASE] ..."; }
phase_done() { log "[$PHASE] $1 ($(elapsed "$PHASE_T0")s)"; }

# ---------------------------------------------------------------- packages
# Install only what is missing, never let a postinst start a daemon (e.g.
# sshd) on the host, apt-get update only when the lists are missing or stale.
pkg_installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]; }

missing_packages() { # prints the HOST_PACKAGES not installed, one a line
	local p
	for p in "${HOST_PACKAGES[@]}"; do pkg_installed "$p" || printf '%s\n' "$p"; done
}

ensure_packages() { # $@ = packages to ensure (default: all)
	local want=("$@") missing=() p
	((${#want[@]})) || want=("${HOST_PACKAGES[@]}")
	for p in "${want[@]}"; do pkg_installed "$p" || missing+=("$p"); done
	if ((${#missing[@]} == 0)); then
		phase_done "all ${#want[@]} packages already installed"
		return 0
	fi
	# the test host and the nested host come up side by side in make check:
	# one apt at a time (dpkg's own lock would fail the second at once)
	local lock still=()
	exec {lock}>/run/kohaku-apt.lock
	flock "$lock"
	for p in "${missing[@]}"; do pkg_installed "$p" || still+=("$p"); done
	if ((${#still[@]} == 0)); then
		exec {lock}>&-
		phase_done "all ${#want[@]} packages installed (while waiting for apt)"
		return 0
	fi
	missing=("${still[@]}")
	log "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# never let a postinst start a daemon (e.g. sshd) on the host
	local policy_added=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy_added=1
	fi
	local need_update=0
	if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
		need_update=1
	else
		for p in "${missing[@]}"; do
			if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]'; then need_update=1; break; fi
		done
	fi
	local rc=0
	if ((need_update)); then
		log "package lists missing or stale: apt-get update"
		apt-get update -qq || rc=$?
	fi
	if ((rc == 0)); then
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$LOG_DIR/apt.log" 2>&1 || rc=$?
		if ((rc != 0 && need_update == 0)); then
			log "install failed (stale lists?): apt-get update and retry"
			rc=0
			apt-get update -qq || rc=$?
			((rc == 0)) && { apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$LOG_DIR/apt.log" 2>&1 || rc=$?; }
		fi
	fi
	((policy_added)) && rm -f /usr/sbin/policy-rc.d
	exec {lock}>&-
	if ((rc != 0)); then
		tail -n 20 "$LOG_DIR/apt.log" >&2 || true
		die "apt-get install failed (full log: $LOG_DIR/apt.log)"
	fi
	phase_done "installed ${#missing[@]} packages: ${missing[*]}"
}

# ---------------------------------------------------------------- config files
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

# ensure_pki makes the throwaway PKI for libvirtd's TLS listener once (pki.sh).
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
	bash "$HERE/pki.sh" "$d"
	for f in "${want[@]}"; do [[ -s $f ]] || die "making the test PKI: $f is missing"; done
	phase_done "made a CA, server and client certificates in $d"
}

# ---------------------------------------------------------------- waiting
# wait_until TIMEOUT INTERVAL CMD...: run CMD every INTERVAL seconds until it
# succeeds (return 0) or TIMEOUT seconds have passed (return 1). Both may have
# decimals; CMD runs at least once.
wait_until() {
	local step=$2 end
	end=$(awk -v t="${EPOCHREALTIME/,/.}" -v d="$1" 'BEGIN { printf "%.0f", (t + d) * 1000000 }')
	shift 2
	until "$@"; do
		((${EPOCHREALTIME//[.,]/} < end)) || return 1
		sleep "$step"
	done
}
pid_gone() { [[ ! -d /proc/$1 ]]; }
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; } # HOST PORT: something listens there

# ---------------------------------------------------------------- processes by pid file
# pidfile_pid FILE COMM [ARG]: prints the pid FILE names when that process is
# alive, its command name matches the glob COMM and, given ARG, its command
# line (arguments joined by spaces, one after the last) holds ARG. A pid file
# left by a process that is gone, or a pid since reused by another program,
# names nothing.
pidfile_pid() {
	local pid
	[[ -f $1 ]] || return 1
	pid=$(tr -dc 0-9 <"$1")
	[[ -n $pid && -d /proc/$pid ]] || return 1
	# shellcheck disable=SC2053 # COMM is a glob (qemu-system-x86*) on purpose
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == $2 ]] || return 1
	[[ -z ${3:-} ]] || tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$3" || return 1
	printf '%s\n' "$pid"
}

# pidfile_start FILE LOG CMD...: start CMD in its own session, detached from
# the terminal and from our lock descriptors (8, 9), so that it outlives this
# script; its output goes to LOG and its pid to FILE.
pidfile_start() {
	local file=$1 out=$2
	shift 2
	setsid "$@" >"$out" 2>&1 </dev/null 8>&- 9>&- &
	printf '%s\n' "$!" >"$file"
}

# pidfile_stop FILE WHAT GRACE COMM [ARG]: SIGTERM the process that
# pidfile_pid FILE COMM ARG names, SIGKILL it when it is still there after
# GRACE seconds, and remove FILE. Returns 1 (removing FILE) when FILE names no
# process of ours: nothing else is ever signalled.
pidfile_stop() {
	local file=$1 what=$2 grace=$3 pid
	pid=$(pidfile_pid "$file" "$4" "${5:-}") || { rm -f "$file"; return 1; }
	log "stopping $what pid $pid"
	kill -TERM "$pid"
	if ! wait_until "$grace" 0.1 pid_gone "$pid"; then
		log "$what pid $pid ignored SIGTERM for $grace s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	rm -f "$file"
}

# ---------------------------------------------------------------- image cache
# An image is a directory of a cache named by its key: the first 16 hex digits
# of the sha256 of its recipe text, which is the settings that choose what it
# is built from (NAME=VALUE lines: the Debian mirror, the key of the image it
# is made from) and then every file its build reads, each under a line with
# its path below internal/acctest. Editing one recipe file changes the keys of
# exactly the images built from it.
recipe_text() { # SETTING... -- FILE...
	local f
	while (($#)) && [[ $1 != -- ]]; do
		printf '%s\n' "$1"
		shift
	done
	shift
	for f; do
		[[ -f $f ]] || die "recipe file $f is missing"
		printf -- '--- %s\n' "$(realpath --relative-to="$HOSTLIB_DIR" "$f")"
		cat "$f"
	done
}
recipe_key() { recipe_text "$@" | sha256sum | cut -c1-16; }

mounts_under() { awk -v p="$1/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r; }
no_mounts_under() { [[ -z $(mounts_under "$1") ]]; }

remove_build_dir() { # $1 = a build work dir; never descends into mounts
	local d=$1 m
	# an interrupted mmdebstrap unmounts /proc, /sys, /dev in its chroot on the way
	# out, a moment after its main process is gone: give it 10 s, then do it
	wait_until 10 0.1 no_mounts_under "$d" || true
	mounts_under "$d" | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf --one-file-system "$d" || log "WARNING: could not remove all of $d"
}

BUILD_PID=""
BUILD_DIR=""
stop_build() { # stop a running image build (its own session) and remove its work dir
	if [[ -n $BUILD_PID ]] && kill -0 "$BUILD_PID" 2>/dev/null; then
		log "stopping image build (session $BUILD_PID)"
		kill -TERM -- "-$BUILD_PID" 2>/dev/null || true
		wait "$BUILD_PID" 2>/dev/null || true
	fi
	BUILD_PID=""
	[[ -z $BUILD_DIR ]] || remove_build_dir "$BUILD_DIR"
	BUILD_DIR=""
}

# ensure_image WHAT DIR COMPLETE DESCRIBE LOG BUILD...: make the cache entry
# DIR unless `COMPLETE DIR` says it is there. RECIPE holds recipe_text's
# arguments for it (DIR's name ends in their key). BUILD... runs with an empty
# work dir (CACHE/.build-*) as its last argument, in its own session, so that
# an interrupt stops all of it (mmdebstrap unmounting its chroot) before the
# work dir is removed; its output goes to LOG, and its "step: " lines are
# shown. The work dir gets recipe.txt (when and where it was built, then the
# recipe text) and becomes DIR by one rename: DIR appears complete or not at
# all, and a failed or interrupted build leaves nothing. Builds hold
# CACHE/.lock (fd 8), so concurrent runs build once; the lock holder removes
# the work dirs of builds killed too hard to clean up. `DESCRIBE DIR` says
# what was built.
ensure_image() {
	local what=$1 dir=$2 complete=$3 describe=$4 out=$5 cache=${2%/*} rc=0 d
	shift 5
	if "$complete" "$dir"; then
		phase_done "cached $what found ($dir)"
		return 0
	fi
	mkdir -p "$cache"
	exec 8>"$cache/.lock"
	flock 8
	if "$complete" "$dir"; then # built by a concurrent run while we waited
		exec 8>&-
		phase_done "cached $what found ($dir)"
		return 0
	fi
	[[ -e $dir ]] && { log "removing incomplete $dir"; rm -rf --one-file-system "$dir"; }
	for d in "$cache"/.build-*; do [[ -d $d ]] && remove_build_dir "$d"; done
	BUILD_DIR=$(mktemp -d "$cache/.build-${dir##*/}-XXXXXX")
	log "building $what in $BUILD_DIR; log: $out"
	trap stop_build EXIT
	trap 'exit 130' INT TERM
	setsid "$@" "$BUILD_DIR" >"$out" 2>&1 </dev/null &
	BUILD_PID=$!
	wait "$BUILD_PID" || rc=$?
	BUILD_PID=""
	if ((rc != 0)); then
		tail -n 30 "$out" >&2
		die "building $what failed with status $rc (full log: $out)"
	fi
	sed -n "s/^step: /$(log_tag):   /p" "$out" >&2
	{
		echo "# $what, built $(date -u +%FT%TZ) on $(hostname)"
		[[ ! -s $BUILD_DIR/kernel-version ]] || echo "# kernel: $(cat "$BUILD_DIR/kernel-version")"
		# images mmdebstrap made list their packages
		[[ ! -s $BUILD_DIR/packages.txt ]] || echo "# mmdebstrap $(dpkg-query -W -f='${Version}' mmdebstrap 2>/dev/null)"
		recipe_text "${RECIPE[@]}"
	} >"$BUILD_DIR/recipe.txt"
	"$complete" "$BUILD_DIR" || die "building $what left an incomplete $BUILD_DIR (log: $out)"
	chmod 755 "$BUILD_DIR"
	mv -T "$BUILD_DIR" "$dir" # atomic: the directory appears complete or not at all
	BUILD_DIR=""
	trap - EXIT INT TERM
	exec 8>&-
	phase_done "built $what: $("$describe" "$dir")"
}
