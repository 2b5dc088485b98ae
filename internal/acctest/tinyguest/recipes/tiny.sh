#!/usr/bin/env bash
# tiny.sh IMAGE_DIR WORK_DIR: the recipe of the tiny test guest (README.md
# beside ../tinyguest.sh): the kernel of the testhost image in IMAGE_DIR,
# unpacked to a PVH ELF (vmlinux), and a busybox initramfs (initrd.img) whose
# /init is the file init beside this one. tinyguest.sh runs it in an empty work
# dir; its cache key hashes this file, init and the image's kernel version.
set -euo pipefail

HERE=$(readlink -f "${BASH_SOURCE[0]%/*}")
die() { echo "tinyguest: $*" >&2; exit 1; }

# Modules: the virtio console for the report channel, the CD-ROM on any of
# the seed's buses (sata/ahci on q35, ide/ata_piix on pc, virtio-scsi) and
# ISO 9660, and virtio disks (init names data disks on the console). Their
# dependencies come from the image's modules.dep.
TINY_MODULES=(virtio_pci virtio_console virtio_blk ahci ata_piix virtio_scsi sr_mod isofs)
TINY_PACKAGES=(busybox-static)

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
	(cd "$w" && apt-get download "${TINY_PACKAGES[@]}" >/dev/null 2>"$w/apt.err") || { cat "$w/apt.err" >&2; die "apt-get download ${TINY_PACKAGES[*]} failed"; }
	dpkg-deb -x "$w"/busybox-static_*.deb "$w/bb"
	cp "$w/bb/bin/busybox" "$w/tree/bin/busybox"
	cp "$HERE/init" "$w/tree/init"
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
		echo "# kernel: $kver (from $img)"
		echo "# packages: $(cd "$w" && printf '%s ' ./*.deb | sed 's:\./::g')"
		echo "# modules: $(tr '\n' ' ' <"$w/tree/modules.order")"
	} >"$w/built.txt"
	rm -rf "$w/tree" "$w/bb" "$w"/*.deb "$w/modules.dep" "$w/apt.err"
}

build_into "$@"
