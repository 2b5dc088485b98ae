#!/usr/bin/env bash
# tinyguest.sh - the tiny test guest for scale tests: the test image's Debian
# kernel and a small initramfs (busybox-static from Debian, the few kernel
# modules it needs taken from the test image itself) whose /init reads the
# VM's cloud-init seed (the cidata CD-ROM) and writes a readiness report for
# that seed to the report channel, org.kohaku.report.0, once a second. It
# boots to its report in seconds with 96 MiB under TCG, so fifty of them can
# be counted at once. It is NOT a proof of readiness: real cloud-init guests
# are. See README.md in this directory.
#
# usage: tinyguest.sh build IMAGE_DIR CACHE_ROOT   build or find; prints the dir
#        tinyguest.sh dir   IMAGE_DIR CACHE_ROOT   prints the dir (built or not)
#        tinyguest.sh env   IMAGE_DIR CACHE_ROOT   export lines when built
# IMAGE_DIR is a testhost.sh image dir (vmlinuz, rootfs.qcow2, kernel-version).
# The kernel is the image's own, unpacked to a PVH ELF (vmlinux) that QEMU
# boots directly; boot it with 96 MiB or more and a cmdline such as
# "console=ttyS0 quiet mitigations=off no_timer_check panic=1".
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
readonly SELF HERE=${SELF%/*}
log_tag() { printf tinyguest; }
# shellcheck source=../hostlib.sh
. "$HERE/../hostlib.sh"

# The recipe is recipes/tiny.sh and the /init it installs, recipes/init; the
# key hashes them and the image's kernel version (its modules come from there).
tiny_recipe() { # $1 = image dir: sets RECIPE, recipe_text's arguments
	RECIPE=("kernel=$(cat "$1/kernel-version")" -- "$HERE/recipes/tiny.sh" "$HERE/recipes/init")
}
tiny_key() { tiny_recipe "$1"; recipe_key "${RECIPE[@]}"; } # $1 = image dir
tiny_dir() { printf '%s/tiny-%s' "$2" "$(tiny_key "$1")"; }
tiny_complete() { for f in vmlinux initrd.img recipe.txt; do [[ -s $1/$f ]] || return 1; done; }

cmd_build() {
	local img=$1 cache=$2 dir
	dir=$(tiny_dir "$img" "$cache")
	if tiny_complete "$dir"; then
		log "tiny guest: $dir"
		echo "$dir"
		return
	fi
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.tiny-build.XXXXXX")
	trap 'rm -rf "${tmp:-}"' EXIT
	log "building the tiny guest in $tmp"
	bash "$HERE/recipes/tiny.sh" "$img" "$tmp"
	tiny_recipe "$img"
	{
		echo "# kohaku tiny test guest ${dir##*/}, built $(date -u +%FT%TZ)"
		cat "$tmp/built.txt"
		recipe_text "${RECIPE[@]}"
	} >"$tmp/recipe.txt"
	rm -f "$tmp/built.txt"
	rm -rf "$dir"
	chmod 0755 "$tmp"
	mv "$tmp" "$dir"
	trap - EXIT
	log "built tiny guest $dir: initrd $(du -h --apparent-size "$dir/initrd.img" | cut -f1)"
	echo "$dir"
}

main() {
	[[ $# == 3 ]] || die "usage: tinyguest.sh build|dir|env IMAGE_DIR CACHE_ROOT"
	[[ -s $2/kernel-version && -s $2/rootfs.qcow2 && -s $2/vmlinuz ]] || die "$2 is not a built test image dir"
	case $1 in
	build) cmd_build "$2" "$3" ;;
	dir) tiny_dir "$2" "$3"; echo ;;
	env)
		local dir
		dir=$(tiny_dir "$2" "$3")
		tiny_complete "$dir" || { log "tiny guest $dir not built: KOHAKU_TEST_TINY_* not set (run 'bash testhost.sh up')"; return 0; }
		echo "export KOHAKU_TEST_TINY_KERNEL=$dir/vmlinux"
		echo "export KOHAKU_TEST_TINY_INITRD=$dir/initrd.img"
		;;
	*) die "unknown command $1" ;;
	esac
}

# Sourced (as recipes_test.go does to read the key), it only defines.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
