# hostlib.sh: the shell helpers testhost/testhost.sh and nestedhost/nestedhost.sh
# share: logging, phase timing and package installs. Sourced, never run. The
# caller defines log_tag (what its messages start with) before sourcing it,
# and HOST_PACKAGES and LOG_DIR before calling ensure_packages.
# shellcheck shell=bash

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
phase() { PHASE=$1; PHASE_T0=$EPOCHREALTIME; log "[$PHASE] ..."; }
phase_done() { log "[$PHASE] $1 ($(elapsed "$PHASE_T0")s)"; }

# ---------------------------------------------------------------- packages
# Install only what is missing, never let a postinst start a daemon (e.g.
# sshd) on the host, apt-get update only when the lists are missing or stale.
pkg_installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]; }

ensure_packages() { # $@ = packages to ensure (default: all)
	local want=("$@") missing=() p
	((${#want[@]})) || want=("${HOST_PACKAGES[@]}")
	for p in "${want[@]}"; do pkg_installed "$p" || missing+=("$p"); done
	if ((${#missing[@]} == 0)); then
		phase_done "all ${#want[@]} packages already installed"
		return 0
	fi
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
	if ((rc != 0)); then
		tail -n 20 "$LOG_DIR/apt.log" >&2 || true
		die "apt-get install failed (full log: $LOG_DIR/apt.log)"
	fi
	phase_done "installed ${#missing[@]} packages: ${missing[*]}"
}
