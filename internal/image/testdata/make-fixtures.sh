#!/bin/sh
# Regenerates the fixtures in this directory (needs qemu-img, sgdisk, sfdisk,
# xorriso, xz and bzip2). The tests only read the results.
#
#   qemu-images.tar.xz  real images made by qemu-img & co., to check the
#                       inspector against their tools rather than against
#                       images built by the tests themselves
#   raw.img.bz2         a 64 KiB raw disk image (MBR boot signature, a text at
#                       1024) compressed by bzip2: the stdlib has no writer
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir img
qemu-img create -q -f qcow2 img/plain.qcow2 1M
qemu-img create -q -f qcow2 -o compat=0.10 img/v2.qcow2 1M
qemu-img create -q -f qcow2 -b plain.qcow2 -F qcow2 img/backing.qcow2
qemu-img create -q -f qcow2 -o data_file=data.raw img/datafile.qcow2 1M
rm -f img/data.raw
qemu-img create -q -f qcow2 --object secret,id=sec0,data=abc \
	-o encrypt.format=luks,encrypt.key-secret=sec0 luks.qcow2 1M
head -c 65536 luks.qcow2 >img/luks-header.qcow2 # the header is all that is read
qemu-img create -q -f vmdk img/sparse.vmdk 1M
qemu-img create -q -f vmdk -o subformat=monolithicFlat img/flat.vmdk 1M
rm -f img/flat-flat.vmdk
qemu-img create -q -f vdi img/x.vdi 1M
qemu-img create -q -f vhdx img/x.vhdx 1M
qemu-img create -q -f vpc img/dynamic.vhd 1M
qemu-img create -q -f vpc -o subformat=fixed img/fixed.vhd 1M
qemu-img create -q -f qed img/x.qed 1M
mkdir isosrc && echo hello >isosrc/hello.txt
xorriso -as mkisofs -quiet -o img/small.iso -V KOHAKU isosrc 2>/dev/null
truncate -s 4M img/gpt.raw && sgdisk -n 1:2048:0 -t 1:8300 img/gpt.raw >/dev/null 2>&1
test "$(dd if=img/gpt.raw bs=1 skip=512 count=8 2>/dev/null)" = "EFI PART"
truncate -s 2M img/mbr.raw && printf 'label: dos\nstart=2048, type=83\n' | sfdisk -q img/mbr.raw
tar -C img --format=gnu -cf - . | xz -9 >"$here/qemu-images.tar.xz"

python3 - <<'PY'
b = bytearray(65536)
b[510:512] = b"\x55\xaa"
t = b"kohaku bzip2 fixture\n"
b[1024:1024 + len(t)] = t
open("raw.img", "wb").write(b)
PY
bzip2 -9 -c raw.img >"$here/raw.img.bz2"
