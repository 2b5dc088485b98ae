#!/usr/bin/env bash
# Brings the OpenTofu CLI the acceptance suite's core also runs under. No
# Debian package provides it and nothing but the Go module proxy is
# reachable, so it is built from its Go module with the local Go toolchain:
# `go mod download` of the pinned release, a writable copy of the module
# directory (its one `replace` then applies), `go build ./cmd/tofu`. The
# binary is cached outside the checkout by version.
#
#   tofu.sh build   build (or find) the pinned release; print the binary's path.
#                   A build under way elsewhere is waited for (a lock).
#   tofu.sh build-bg
#                   start `build` in the background unless the binary is
#                   cached (make check starts it before the host's images are
#                   built, so the compile overlaps them); log in the cache root
#   tofu.sh path    print the cached binary's path (no build); nothing if absent
#   tofu.sh env     print the export lines that make terraform-plugin-testing
#                   run OpenTofu: eval "$(tofu.sh env)"
#
# Environment:
#   KOHAKU_TOFU_VERSION  release to build (default below)
#   KOHAKU_TOFU_CACHE    cache root (default /var/cache/kohaku/tofu)
set -euo pipefail

# 1.11 brought write-only attributes to OpenTofu; the suite's core uses them.
readonly VERSION=${KOHAKU_TOFU_VERSION:-1.12.6}
readonly CACHE_ROOT=${KOHAKU_TOFU_CACHE:-/var/cache/kohaku/tofu}
readonly BIN=$CACHE_ROOT/$VERSION/tofu

log() { printf 'tofu: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cached() { [[ -x $BIN ]] && "$BIN" version >/dev/null 2>&1; }

build() {
	mkdir -p "$CACHE_ROOT"
	exec 9>"$CACHE_ROOT/.lock"
	flock 9
	if cached; then
		log "OpenTofu $VERSION cached: $BIN"
		printf '%s\n' "$BIN"
		return
	fi
	command -v go >/dev/null || die "go is needed on PATH"
	local t0=$EPOCHREALTIME dir
	log "building OpenTofu $VERSION from its Go module"
	dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/opentofu/opentofu@v$VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -f $dir/go.mod ]] || die "go mod download of github.com/opentofu/opentofu@v$VERSION gave no module directory"
	tmp=$(mktemp -d "$CACHE_ROOT/.build-XXXXXX") # global: the EXIT trap reads it
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	cp -r "$dir/." "$tmp/src"
	chmod -R u+w "$tmp/src"
	(cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$tmp/tofu" ./cmd/tofu)
	"$tmp/tofu" version >/dev/null || die "the built tofu does not run"
	mkdir -p "${BIN%/*}"
	mv "$tmp/tofu" "$BIN"
	log "OpenTofu $VERSION built in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')s: $BIN"
	printf '%s\n' "$BIN"
}

case "${1:-}" in
build) build ;;
build-bg)
	if cached; then exit 0; fi
	mkdir -p "$CACHE_ROOT"
	setsid bash "$0" build >"$CACHE_ROOT/build.log" 2>&1 </dev/null &
	log "building OpenTofu $VERSION in the background (pid $!, log $CACHE_ROOT/build.log)"
	;;
path) if [[ -x $BIN ]]; then printf '%s\n' "$BIN"; fi ;;
env)
	[[ -x $BIN ]] || die "OpenTofu $VERSION is not built: run '$0 build'"
	# terraform-plugin-testing runs the CLI at TF_ACC_TERRAFORM_PATH; OpenTofu
	# resolves an unqualified provider to registry.opentofu.org, so the
	# in-process provider is served under that address.
	printf 'export TF_ACC_TERRAFORM_PATH=%q\nexport TF_ACC_PROVIDER_HOST=registry.opentofu.org\nexport TF_ACC_PROVIDER_NAMESPACE=hashicorp\n' "$BIN"
	# A CLI config of its own (empty): when TF_CLI_CONFIG_FILE names a missing
	# file OpenTofu warns on stdout, before its version (Terraform warns on
	# stderr), and terraform-exec then cannot parse `tofu version`.
	: >"$CACHE_ROOT/empty.tofurc"
	printf 'export TF_CLI_CONFIG_FILE=%q\n' "$CACHE_ROOT/empty.tofurc"
	;;
*) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
