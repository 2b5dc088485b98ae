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

# --- BEGIN TINY GUEST RECIPE ---
# Modules: the virtio console for the report channel, the CD-ROM on any of
# the seed's buses (sata/ahci on q35, ide/ata_piix on pc, virtio-scsi) and
# ISO 9660. Their dependencies come from the image's modules.dep.
readonly TINY_MODULES=(virtio_pci virtio_console ahci ata_piix virtio_scsi sr_mod isofs)
readonly TINY_PACKAGES="busybox-static"
tiny_init() {
	cat <<'INIT'
#!/bin/busybox sh
# Kohaku's tiny test guest: report for the seed on the CD-ROM, then idle.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.order); do insmod "/modules/$m.ko" 2>/dev/null; done
say() { echo "kohaku-tiny: $*" >/dev/ttyS0 2>/dev/null || echo "kohaku-tiny: $*"; }
mkdir -p /seed
port= seed=
i=0
while [ $i -lt 600 ]; do
	if [ -z "$port" ]; then
		for n in /sys/class/virtio-ports/*/name; do
			[ -r "$n" ] && [ "$(cat "$n")" = org.kohaku.report.0 ] && port=/dev/$(basename "$(dirname "$n")")
		done
	fi
	if [ -z "$seed" ]; then
		for d in /dev/sr* /dev/sd* /dev/vd*; do
			[ -b "$d" ] || continue
			if mount -t iso9660 -o ro "$d" /seed 2>/dev/null; then
				if [ -f /seed/meta-data ]; then seed=$d; break; fi
				umount /seed
			fi
		done
	fi
	[ -n "$port" ] && [ -n "$seed" ] && [ -c "$port" ] && break
	i=$((i + 1))
	sleep 0.1
done
[ -n "$port" ] || { say "no report channel"; exec sleep 2147483647; }
[ -n "$seed" ] || { say "no seed CD-ROM"; exec sleep 2147483647; }
field() { sed -n "s/^$1:[[:space:]]*//p" /seed/meta-data | head -n1 | sed "s/^[\"']//; s/[\"'][[:space:]]*\$//; s/[[:space:]]*\$//"; }
iid=$(field instance-id)
host=$(field local-hostname)
token=$(sed -n 's/.*"token":[[:space:]]*"\([A-Za-z0-9_-]*\)".*/\1/p' /seed/user-data 2>/dev/null | head -n1)
say "seed on $seed: instance-id $iid, report to $port"
# A write blocks until the host reads the channel; each line is a whole
# report, written again every second in case a reader came and went.
while :; do
	printf '{"token":"%s","instance_id":"%s","hostname":"%s"}\n' "$token" "$iid" "$host" >"$port"
	sleep 1
done
INIT
}
# --- END TINY GUEST RECIPE ---

die() { echo "tinyguest: $*" >&2; exit 1; }
log() { echo "tinyguest: $*" >&2; }

tiny_key() { # $1 = image dir: the image's kernel and this whole script
	{ cat "$1/kernel-version"; cat "$SELF"; } | sha256sum | cut -c1-16
}
tiny_dir() { printf '%s/tiny-%s' "$2" "$(tiny_key "$1")"; }
tiny_complete() { for f in vmlinux initrd.img recipe.txt; do [[ -s $1/$f ]] || return 1; done; }

# modules_closure MODULES_DEP NAME...: load order, dependencies first.
modules_closure() {
	local dep=$1; shift
	awk -v want="$*" '
		function base(p) { sub(/.*\//, "", p); sub(/\.ko(\.[a-z]+)?$/, "", p); return p }
		{ k = $1; sub(/:$/, "", k); n = base(k); path[n] = k; deps[n] = ""
		  for (i = NF; i >= 2; i--) deps[n] = deps[n] " " base($i) }
		function visit(n,   d, a, i) {
			if (seen[n]++) return
			split(deps[n], a, " ")
			for (i = 1; i in a; i++) visit(a[i])
			print n, path[n]
		}
		END { split(want, w, " "); for (i = 1; i in w; i++) { if (!(w[i] in path)) { print "missing " w[i] > "/dev/stderr"; exit 1 } visit(w[i]) } }
	' "$dep"
}

build_into() { # $1 = image dir, $2 = empty work dir
	local img=$1 w=$2 kver
	kver=$(cat "$img/kernel-version")
	command -v debugfs >/dev/null || die "debugfs (e2fsprogs) is missing"
	qemu-img convert -O raw "$img/rootfs.qcow2" "$w/root.raw"
	debugfs -R "cat /usr/lib/modules/$kver/modules.dep" "$w/root.raw" 2>/dev/null >"$w/modules.dep"
	[[ -s $w/modules.dep ]] || die "no modules.dep for $kver in $img/rootfs.qcow2"
	mkdir -p "$w/tree/bin" "$w/tree/modules" "$w/tree/proc" "$w/tree/sys" "$w/tree/dev" "$w/tree/seed"
	local name path
	: >"$w/tree/modules.order"
	while read -r name path; do
		debugfs -R "dump /usr/lib/modules/$kver/$path $w/tree/modules/$name.ko" "$w/root.raw" 2>/dev/null
		[[ -s $w/tree/modules/$name.ko ]] || die "module $path missing in the image"
		[[ $path == *.ko ]] || die "module $path is compressed; busybox insmod wants plain .ko"
		echo "$name" >>"$w/tree/modules.order"
	done < <(modules_closure "$w/modules.dep" "${TINY_MODULES[@]}")
	rm -f "$w/root.raw"
	(cd "$w" && apt-get download $TINY_PACKAGES >/dev/null 2>"$w/apt.err") || { cat "$w/apt.err" >&2; die "apt-get download $TINY_PACKAGES failed"; }
	dpkg-deb -x "$w"/busybox-static_*.deb "$w/bb"
	cp "$w/bb/bin/busybox" "$w/tree/bin/busybox"
	tiny_init >"$w/tree/init"
	chmod 0755 "$w/tree/init" "$w/tree/bin/busybox"
	# busybox's own cpio: the test host need not have cpio installed.
	(cd "$w/tree" && find . | LC_ALL=C sort | "$w/bb/bin/busybox" cpio -o -H newc) | gzip -9n >"$w/initrd.img"
	# The kernel as an uncompressed PVH ELF: QEMU starts it directly, with no
	# xz decompression under TCG, which halves the boot's CPU time (about
	# 2.8 s instead of 5.4 s here). 96 MiB of guest memory holds it.
	local off
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$img/vmlinuz" | head -n1 | cut -d: -f1 || true)
	[[ -n $off ]] || die "$img/vmlinuz is not an xz-compressed bzImage"
	tail -c +$((off + 1)) "$img/vmlinuz" | xz -dc --single-stream >"$w/vmlinux" 2>/dev/null || true
	# An ELF note "Xen", type 18 (XEN_ELFNOTE_PHYS32_ENTRY), is the PVH entry.
	[[ $(head -c4 "$w/vmlinux" | tr -d '\0') == $'\x7fELF' ]] || die "unpacking $img/vmlinuz gave no ELF kernel"
	LC_ALL=C grep -qaP '\x04\x00\x00\x00[\x04\x08]\x00\x00\x00\x12\x00\x00\x00Xen\x00' "$w/vmlinux" || die "the kernel has no PVH entry (XEN_ELFNOTE_PHYS32_ENTRY): QEMU cannot boot it directly"
	{
		echo "# kohaku tiny test guest $(basename "$(tiny_dir "$img" "$(dirname "$w")")"), built $(date -u +%FT%TZ)"
		echo "# kernel: $kver (from $img)"
		echo "# packages: $(cd "$w" && printf '%s ' ./*.deb | sed 's:\./::g')"
		echo "# modules: $(tr '\n' ' ' <"$w/tree/modules.order")"
		sed -n '/^# --- BEGIN TINY GUEST RECIPE ---$/,/^# --- END TINY GUEST RECIPE ---$/p' "$SELF"
	} >"$w/recipe.txt"
	rm -rf "$w/tree" "$w/bb" "$w"/*.deb "$w/modules.dep" "$w/apt.err"
}

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
	build_into "$img" "$tmp"
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

main "$@"
