# hostlib.sh: the shell helpers testhost/testhost.sh and nestedhost/nestedhost.sh
# share: logging and phase timing. Sourced, never run. The caller defines
# log_tag (what its messages start with) before sourcing it.
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
