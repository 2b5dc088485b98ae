#!/usr/bin/env bash
# Brings a Terraform CLI new enough for the features the Terraform these
# machines have (1.11) lacks: actions and list resources for `terraform query`
# came in 1.14. It is built from its Go module with the local Go toolchain
# and cached outside the checkout by version, as tofu/tofu.sh builds
# OpenTofu (both use gocli.sh). Terraform's module zip leaves out the
# remote-state backends it keeps as nested modules (azurerm, consul, cos,
# gcs, kubernetes, oci, oss, pg, s3), which its go.mod replaces with local
# directories; the build drops those backends from the copy it compiles.
# The tests use the local backend only.
#
#   terraform.sh build     build (or find) the pinned release; print the binary's
#                          path. A build under way elsewhere is waited for (a lock).
#   terraform.sh build-bg  start `build` in the background unless the binary is
#                          cached; log in the cache root
#   terraform.sh path      print the cached binary's path (no build); nothing if absent
#   terraform.sh env       print the export line that makes terraform-plugin-testing
#                          run it: eval "$(terraform.sh env)"
#
# Environment:
#   KOHAKU_TERRAFORM_VERSION  release to build (default below)
#   KOHAKU_TERRAFORM_CACHE    cache root (default /var/cache/kohaku/terraform)
set -euo pipefail

# shellcheck source=../gocli.sh
source "${BASH_SOURCE[0]%/*}/../gocli.sh"

# 1.14 brought actions and list resources; 1.14.9 is the newest 1.14 release
# the Go module proxy serves.
CLI_NAME=Terraform
CLI_MODULE=github.com/hashicorp/terraform
CLI_VERSION=${KOHAKU_TERRAFORM_VERSION:-1.14.9}
CLI_CACHE=${KOHAKU_TERRAFORM_CACHE:-/var/cache/kohaku/terraform}
CLI_EXE=terraform
CLI_PKG=.
CLI_LDFLAGS="-s -w -X github.com/hashicorp/terraform/version.dev=no"

# cli_patch drops every module go.mod replaces with a directory the zip does
# not hold, and the backend registrations that import it.
cli_patch() {
	local mod path alias
	while read -r mod path; do
		[[ -d $path ]] && continue
		gocli_log "dropping $mod (not in the module zip)"
		sed -i "\\|^replace $mod => |d; \\|^[[:space:]]*$mod v|d" go.mod
		alias=$(sed -n "s|^[[:space:]]*\\([A-Za-z0-9_]*\\) \"$mod\"\$|\\1|p" internal/backend/init/init.go)
		[[ -n $alias ]] || continue
		sed -i "\\|\"$mod\"\$|d; /[[:space:]]$alias\\.New()/d" internal/backend/init/init.go
	done < <(sed -n 's|^replace \([^ ]*\) => \(\./[^ ]*\)$|\1 \2|p' go.mod)
}

cli_env() {
	# terraform-plugin-testing runs the CLI at TF_ACC_TERRAFORM_PATH.
	printf 'export TF_ACC_TERRAFORM_PATH=%q\n' "$1"
}

gocli_main "$0" "$@"
