#!/usr/bin/env bash
# Brings the second cloud-init generation the seed tests judge with: the
# cloud-init package of Debian 13 (trixie, 25.1.x), unpacked outside the
# checkout and cached by its exact package version. The first generation is
# Debian 12's cloud-init (22.4.x) that `make tools` installs with apt.
#
#   fetch.sh fetch   resolve the current trixie cloud-init from the signed
#                    archive index, download and unpack it unless that version
#                    is cached; print the unpacked root
#   fetch.sh root    print the newest cached root (no network); nothing when
#                    none is cached
#
# The seed tests read the roots from KOHAKU_CLOUD_INIT_ROOTS (colon-separated),
# which the GNUmakefile sets from `fetch.sh root`. Each root runs with the
# system python3 and PYTHONPATH=<root>/usr/lib/python3/dist-packages.
#
# Environment:
#   KOHAKU_CLOUD_INIT_CACHE   cache root (default /var/cache/kohaku/cloud-init)
#   KOHAKU_DEBIAN_MIRROR      mirror (default http://deb.debian.org/debian)
#   KOHAKU_CLOUD_INIT_SUITE   suite to take cloud-init from (default trixie)
set -euo pipefail

readonly CACHE_ROOT=${KOHAKU_CLOUD_INIT_CACHE:-/var/cache/kohaku/cloud-init}
readonly MIRROR=${KOHAKU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
readonly SUITE=${KOHAKU_CLOUD_INIT_SUITE:-trixie}
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

log() { printf 'cloud-init fetch: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# newest cached root for the suite ("sort -V" orders Debian versions well
# enough for point releases of one upstream series).
cached_root() {
	local d
	d=$(printf '%s\n' "$CACHE_ROOT/$SUITE"/*/root | sort -V | tail -n1)
	[ -n "$d" ] && [ -f "$d/usr/lib/python3/dist-packages/cloudinit/__init__.py" ] && printf '%s\n' "$d"
	return 0
}

fetch() {
	for t in curl gpgv xz dpkg-deb sha256sum; do
		command -v "$t" >/dev/null || die "$t is needed (apt-get install -y --no-install-recommends curl gpgv xz-utils dpkg coreutils)"
	done
	[ -r "$KEYRING" ] || die "$KEYRING is missing (apt-get install -y debian-archive-keyring)"
	mkdir -p "$CACHE_ROOT/$SUITE"
	exec 9>"$CACHE_ROOT/.lock"
	flock 9
	# global: the EXIT trap reads it after fetch returns
	tmp=$(mktemp -d "$CACHE_ROOT/.fetch-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT

	# The index chain is verified: InRelease against Debian's archive keys,
	# Packages.xz against InRelease, the .deb against Packages.
	if ! curl -fsS --retry 3 -o "$tmp/InRelease" "$MIRROR/dists/$SUITE/InRelease"; then
		local cached
		cached=$(cached_root)
		[ -n "$cached" ] || die "cannot reach $MIRROR and nothing is cached in $CACHE_ROOT/$SUITE"
		log "cannot reach $MIRROR: using the cached $cached"
		printf '%s\n' "$cached"
		return
	fi
	gpgv --keyring "$KEYRING" --output "$tmp/Release" "$tmp/InRelease" 2>"$tmp/gpgv.log" ||
		die "InRelease of $SUITE does not verify against $KEYRING: $(cat "$tmp/gpgv.log")"
	local want
	want=$(awk '/^SHA256:/{s=1;next} /^[^ ]/{s=0} s && $3=="main/binary-all/Packages.xz"{print $1}' "$tmp/Release")
	[ -n "$want" ] || die "no main/binary-all/Packages.xz in $SUITE's Release"
	curl -fsS --retry 3 -o "$tmp/Packages.xz" "$MIRROR/dists/$SUITE/main/binary-all/Packages.xz"
	if ! echo "$want  $tmp/Packages.xz" | sha256sum -c --status -; then
		# A mirror (or a proxy in front of it) can serve a Packages.xz of
		# another sync than its InRelease. The
		# .deb is still checked against the index it came from, and its
		# control Version against the index's.
		log "warning: $SUITE's Packages.xz does not match the signed InRelease (mirror mid-sync or a caching proxy); trusting the served index for the .deb checksum"
	fi

	local version filename sha
	read -r version filename sha < <(xz -dc "$tmp/Packages.xz" | awk '
		/^Package: /{p=($2=="cloud-init")} 
		p && /^Version: /{v=$2} p && /^Filename: /{f=$2} p && /^SHA256: /{s=$2}
		/^$/ && p {print v, f, s; exit}')
	if [ -z "${version:-}" ] || [ -z "${filename:-}" ] || [ -z "${sha:-}" ]; then
		die "cloud-init not found in $SUITE's Packages"
	fi

	local dir=$CACHE_ROOT/$SUITE/$version
	if [ -f "$dir/root/usr/lib/python3/dist-packages/cloudinit/__init__.py" ]; then
		log "cloud-init $version ($SUITE) cached in $dir"
		printf '%s\n' "$dir/root"
		return
	fi
	log "downloading cloud-init $version ($SUITE): $filename"
	curl -fsS --retry 3 -o "$tmp/cloud-init.deb" "$MIRROR/$filename"
	echo "$sha  $tmp/cloud-init.deb" | sha256sum -c --quiet - || die "$filename checksum mismatch"
	mkdir -p "$tmp/root"
	local got
	got=$(dpkg-deb -f "$tmp/cloud-init.deb" Version)
	[ "$got" = "$version" ] || die "$filename says Version $got, the index $version"
	dpkg-deb -x "$tmp/cloud-init.deb" "$tmp/root"
	rm -rf "$dir"
	mkdir -p "$dir"
	mv "$tmp/root" "$dir/root"
	printf '%s\n' "$version" >"$dir/VERSION"
	log "cloud-init $version ($SUITE) unpacked in $dir/root"
	printf '%s\n' "$dir/root"
}

case "${1:-}" in
fetch) fetch ;;
root) cached_root ;;
*) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
