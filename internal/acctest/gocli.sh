# gocli.sh: what tofu/tofu.sh and terraform/terraform.sh share to build a
# Terraform-family CLI from its Go module with the local Go toolchain (no
# Debian package provides either, and nothing but the Go module proxy is
# reachable): `go mod download` of the pinned release, a writable copy of
# the module directory (its `replace` directives then resolve), an optional
# patch of that copy, `go build`, and the binary cached outside the checkout
# by version, behind a lock. Sourced, never run.
#
# The caller sets, before calling gocli_main "$@":
#   CLI_NAME     what the log lines name (OpenTofu, Terraform)
#   CLI_MODULE   the Go module path
#   CLI_VERSION  the release (without the leading v)
#   CLI_CACHE    the cache root; the binary is $CLI_CACHE/$CLI_VERSION/<CLI_EXE>
#   CLI_EXE      the binary's file name
#   CLI_PKG      the package to build, relative to the module root
#   CLI_LDFLAGS  -ldflags for go build
# and defines cli_env (prints the export lines for the env subcommand) and,
# optionally, cli_patch (run in the copied module's root before the build).
# shellcheck shell=bash

gocli_log() { printf '%s: %s\n' "${CLI_EXE:-gocli}" "$*" >&2; }
gocli_die() { gocli_log "ERROR: $*"; exit 1; }

gocli_bin() { printf '%s\n' "$CLI_CACHE/$CLI_VERSION/$CLI_EXE"; }

gocli_cached() {
	local bin
	bin=$(gocli_bin)
	[[ -x $bin ]] && "$bin" version >/dev/null 2>&1
}

gocli_build() {
	local bin t0=$EPOCHREALTIME dir
	bin=$(gocli_bin)
	mkdir -p "$CLI_CACHE"
	exec 9>"$CLI_CACHE/.lock"
	flock 9
	if gocli_cached; then
		gocli_log "$CLI_NAME $CLI_VERSION cached: $bin"
		printf '%s\n' "$bin"
		return
	fi
	command -v go >/dev/null || gocli_die "go is needed on PATH"
	gocli_log "building $CLI_NAME $CLI_VERSION from its Go module"
	dir=$(GOFLAGS=-mod=mod go mod download -json "$CLI_MODULE@v$CLI_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -f $dir/go.mod ]] || gocli_die "go mod download of $CLI_MODULE@v$CLI_VERSION gave no module directory"
	GOCLI_TMP=$(mktemp -d "$CLI_CACHE/.build-XXXXXX") # global: the EXIT trap reads it
	trap 'chmod -R u+w "$GOCLI_TMP" 2>/dev/null; rm -rf "$GOCLI_TMP"' EXIT
	cp -r "$dir/." "$GOCLI_TMP/src"
	chmod -R u+w "$GOCLI_TMP/src"
	if declare -F cli_patch >/dev/null; then
		(cd "$GOCLI_TMP/src" && cli_patch)
	fi
	(cd "$GOCLI_TMP/src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$CLI_LDFLAGS" -o "$GOCLI_TMP/$CLI_EXE" "$CLI_PKG")
	"$GOCLI_TMP/$CLI_EXE" version >/dev/null || gocli_die "the built $CLI_EXE does not run"
	mkdir -p "${bin%/*}"
	mv "$GOCLI_TMP/$CLI_EXE" "$bin"
	gocli_log "$CLI_NAME $CLI_VERSION built in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')s: $bin"
	printf '%s\n' "$bin"
}

# gocli_main SCRIPT [build|build-bg|path|env]: the subcommands both scripts
# offer; SCRIPT is the caller's $0 (build-bg runs it again in the background,
# the usage text is its header).
gocli_main() {
	local script=$1 bin
	shift
	bin=$(gocli_bin)
	case "${1:-}" in
	build) gocli_build ;;
	build-bg)
		if gocli_cached; then return 0; fi
		mkdir -p "$CLI_CACHE"
		setsid bash "$script" build >"$CLI_CACHE/build.log" 2>&1 </dev/null &
		gocli_log "building $CLI_NAME $CLI_VERSION in the background (pid $!, log $CLI_CACHE/build.log)"
		;;
	path) if [[ -x $bin ]]; then printf '%s\n' "$bin"; fi ;;
	env)
		[[ -x $bin ]] || gocli_die "$CLI_NAME $CLI_VERSION is not built: run '$script build'"
		cli_env "$bin"
		;;
	*) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$script" >&2; exit 2 ;;
	esac
}
