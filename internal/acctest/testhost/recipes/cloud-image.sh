#!/usr/bin/env bash
# cloud-image.sh BASE_IMAGE_DIR WORK_DIR: the recipe of the vendor-style cloud
# image, made from the Debian 12 test image in BASE_IMAGE_DIR: an MBR disk with
# an active FAT32 ESP (type 0xef) holding the kernel, the initrd, SYSLINUX for
# SeaBIOS and EFI/BOOT/BOOTX64.EFI (SYSLINUX's EFI loader) for OVMF, and the
# ext4 root (found by label) as the second partition. No loop device, no mount:
# debugfs rewrites fstab, mtools fills the ESP, sfdisk and dd assemble the disk.
# Leaves cloud.qcow2, cloud.qcow2.zst and SHA256SUMS in WORK_DIR. Its cache key
# hashes this file and the base image's key.
set -euo pipefail

b=$1 w=$2 esp_mib=64
qemu-img convert -f qcow2 -O raw "$b/rootfs.qcow2" "$w/root.raw"
printf 'LABEL=kohaku-root / ext4 defaults 0 1\n' >"$w/fstab"
debugfs -w -R 'rm /etc/fstab' "$w/root.raw" >/dev/null 2>&1
debugfs -w -R "write $w/fstab /etc/fstab" "$w/root.raw" >/dev/null 2>&1
debugfs -R 'cat /etc/fstab' "$w/root.raw" 2>/dev/null | grep -q '^LABEL=kohaku-root ' || { echo "fstab not rewritten" >&2; exit 1; }
printf 'DEFAULT debian\nTIMEOUT 0\nPROMPT 0\nLABEL debian\n  KERNEL /vmlinuz\n  APPEND initrd=/initrd.img root=LABEL=kohaku-root ro console=ttyS0 panic=5\n' >"$w/syslinux.cfg"
mkfs.vfat -F 32 -n KOHAKU-ESP -C "$w/esp.img" $((esp_mib * 1024)) >/dev/null
MTOOLS_SKIP_CHECK=1 mcopy -i "$w/esp.img" "$b/vmlinuz" "$b/initrd.img" "$w/syslinux.cfg" ::/
MTOOLS_SKIP_CHECK=1 mmd -i "$w/esp.img" ::/EFI ::/EFI/BOOT
MTOOLS_SKIP_CHECK=1 mcopy -i "$w/esp.img" /usr/lib/SYSLINUX.EFI/efi64/syslinux.efi ::/EFI/BOOT/BOOTX64.EFI
MTOOLS_SKIP_CHECK=1 mcopy -i "$w/esp.img" /usr/lib/syslinux/modules/efi64/ldlinux.e64 "$w/syslinux.cfg" ::/EFI/BOOT/
syslinux --install "$w/esp.img"
root_bytes=$(stat -c %s "$w/root.raw")
truncate -s $(((1 + esp_mib) * 1048576 + root_bytes)) "$w/disk.raw"
printf 'label: dos\nstart=2048, size=%d, type=ef, bootable\nstart=%d, type=83\n' $((esp_mib * 2048)) $(((1 + esp_mib) * 2048)) | sfdisk -q "$w/disk.raw"
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$w/disk.raw" bs=440 count=1 conv=notrunc status=none
dd if="$w/esp.img" of="$w/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="$w/root.raw" of="$w/disk.raw" bs=1M seek=$((1 + esp_mib)) conv=notrunc,sparse status=none
rm -f "$w/root.raw" "$w/esp.img" "$w/fstab" "$w/syslinux.cfg"
qemu-img convert -f raw -O qcow2 "$w/disk.raw" "$w/cloud.qcow2"
rm -f "$w/disk.raw"
zstd -q -T0 -3 "$w/cloud.qcow2" -o "$w/cloud.qcow2.zst"
(cd "$w" && sha256sum cloud.qcow2 cloud.qcow2.zst >SHA256SUMS)
