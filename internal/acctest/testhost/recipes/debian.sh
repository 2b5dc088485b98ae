# debian.sh: the build the Debian guest image recipes (debian12.sh,
# debian13.sh) share, sourced by them and part of both their keys. The recipe
# sets IMAGE_SUITE, IMAGE_VARIANT, IMAGE_SIZE, IMAGE_INCLUDE (a comma list)
# and IMAGE_KERNEL and defines image_customize ROOT_TREE before calling
# debian_build_into.
# shellcheck shell=bash

# debian_build_into MIRROR WORK_DIR: mmdebstrap a tree, customise it, and leave
# rootfs.qcow2, vmlinuz, initrd.img, kernel-version and packages.txt in WORK_DIR.
debian_build_into() {
	local mirror=$1 w=$2 t=$2/tree k i
	# unsafe-io: no fsync per unpacked file (the tree is thrown away after mkfs);
	# no man pages, translations or docs: less to unpack, copy and store.
	# The kernel goes in with a second apt run: in the same run as initramfs-tools
	# the initrd is generated twice (kernel hook, then initramfs-tools' own trigger).
	# The initrd is generated when the kernel goes in: its configuration first.
	mmdebstrap --mode=root --variant="$IMAGE_VARIANT" --components=main \
		--aptopt='Acquire::Languages "none"' \
		--dpkgopt=force-unsafe-io \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--include="$IMAGE_INCLUDE" \
		--customize-hook="$(declare -f guest_boot_trim); guest_boot_trim \"\$1\"" \
		--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $IMAGE_KERNEL" \
		"$IMAGE_SUITE" "$t" "$mirror"
	sed -i '/^force-unsafe-io$/d' "$t/etc/dpkg/dpkg.cfg.d/99mmdebstrap"
	echo "step: mmdebstrap done at ${SECONDS}s"
	image_customize "$t"
	k=$(find "$t/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
	i=$t/boot/initrd.img-${k##*/vmlinuz-}
	[[ -f $k && -f $i ]] || { echo "kernel or initrd missing in tree" >&2; return 1; }
	cp "$k" "$w/vmlinuz"
	cp "$i" "$w/initrd.img"
	printf '%s\n' "${k##*/vmlinuz-}" >"$w/kernel-version"
	# shellcheck disable=SC2016 # dpkg-query's format, not shell
	chroot "$t" dpkg-query -W -f='${Package} ${Version}\n' >"$w/packages.txt"
	truncate -s "$IMAGE_SIZE" "$w/rootfs.raw"
	mkfs.ext4 -q -F -L kohaku-root -d "$t" "$w/rootfs.raw"
	echo "step: mkfs.ext4 done at ${SECONDS}s"
	qemu-img convert -f raw -O qcow2 "$w/rootfs.raw" "$w/rootfs.qcow2"
	echo "step: qemu-img convert done at ${SECONDS}s"
	rm -f "$w/rootfs.raw"
	rm -rf --one-file-system "$t"
	echo "step: tree removed at ${SECONDS}s"
}

# guest_names TREE: fstab, hostname and hosts, as every guest image has them.
guest_names() {
	printf '/dev/vda / ext4 defaults 0 1\n' >"$1/etc/fstab"
	printf 'debian\n' >"$1/etc/hostname"
	printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n' >"$1/etc/hosts"
}

# guest_boot_trim TREE: what a test guest's boot under TCG does not need, where
# emulation makes it cost most. Debian's default initrd (MODULES=most) holds
# every storage and filesystem driver: about 30 MB that the emulated CPU
# unpacks and udev probes on every boot; the guests boot from virtio-blk with
# ext4 (the kernel's root=/dev/vda), and the seed's CD-ROM (SATA on q35, IDE
# on pc) must be there before systemd's generators run: cloud-init's
# ds-identify looks for it then, and without it disables cloud-init. And the emulated CPU advertises SVM or
# VMX, so udev loads kvm_amd or kvm_intel, whose setup under TCG takes 15-25 s
# of a boot for a hypervisor nothing in the guest can use. e2scrub_reap
# (e2fsprogs: it removes leftover e2scrub snapshots of LVM volumes, which
# the guests have none of) took 16-21 s of a Debian 12 boot under TCG,
# competing with cloud-init for the one vCPU.
guest_boot_trim() {
	local t=$1
	mkdir -p "$t/etc/systemd/system"
	ln -sfn /dev/null "$t/etc/systemd/system/e2scrub_reap.service"
	mkdir -p "$t/etc/initramfs-tools/conf.d" "$t/etc/modprobe.d"
	printf 'MODULES=list\n' >"$t/etc/initramfs-tools/conf.d/kohaku-testhost"
	printf '%s\n' virtio_pci virtio_blk virtio_scsi ext4 crc32c_generic ahci ata_piix sr_mod sd_mod >>"$t/etc/initramfs-tools/modules"
	printf 'blacklist %s\n' kvm_amd kvm_intel kvm >"$t/etc/modprobe.d/kohaku-testhost.conf"
}
