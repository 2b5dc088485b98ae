#!/usr/bin/env bash
# Brings the OpenTofu CLI the acceptance suite's core also runs under. No
# Debian package provides it and nothing but the Go module proxy is
# reachable, so it is built from its Go module with the local Go toolchain:
# `go mod download` of the pinned release, a writable copy of the module
# directory (its one `replace` then applies), `go build ./cmd/tofu`. The
# binary is cached outside the checkout by version (gocli.sh, shared with
# terraform/terraform.sh).
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

# shellcheck source=../gocli.sh
source "${BASH_SOURCE[0]%/*}/../gocli.sh"

# 1.11 brought write-only attributes to OpenTofu; the suite's core uses them.
CLI_NAME=OpenTofu
CLI_MODULE=github.com/opentofu/opentofu
CLI_VERSION=${KOHAKU_TOFU_VERSION:-1.12.6}
CLI_CACHE=${KOHAKU_TOFU_CACHE:-/var/cache/kohaku/tofu}
CLI_EXE=tofu
CLI_PKG=./cmd/tofu
CLI_LDFLAGS="-s -w -X github.com/opentofu/opentofu/version.dev=no"

cli_env() {
	# terraform-plugin-testing runs the CLI at TF_ACC_TERRAFORM_PATH; OpenTofu
	# resolves an unqualified provider to registry.opentofu.org, so the
	# in-process provider is served under that address.
	printf 'export TF_ACC_TERRAFORM_PATH=%q\nexport TF_ACC_PROVIDER_HOST=registry.opentofu.org\nexport TF_ACC_PROVIDER_NAMESPACE=hashicorp\n' "$1"
	# A CLI config of its own (empty): when TF_CLI_CONFIG_FILE names a missing
	# file OpenTofu warns on stdout, before its version (Terraform warns on
	# stderr), and terraform-exec then cannot parse `tofu version`.
	: >"$CLI_CACHE/empty.tofurc"
	printf 'export TF_CLI_CONFIG_FILE=%q\n' "$CLI_CACHE/empty.tofurc"
}

gocli_main "$0" "$@"
