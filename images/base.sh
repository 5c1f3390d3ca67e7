#!/usr/bin/env bash
# Makes the local images a registry-free build needs, once, and caches them
# as local tags:
#   $BASE_IMAGE     Debian bookworm (minbase) from debootstrap, apt pointed at
#                   the mirror this machine's apt already uses;
#   $BUILDER_IMAGE  the same rootfs plus the host's Go toolchain (GOROOT).
# A second run finds the tags and returns at once. Set REBUILD_BASE=1 to
# make them again.
set -euo pipefail

BASE_IMAGE=${BASE_IMAGE:-localhost/ipfailover-base:bookworm}
BUILDER_IMAGE=${BUILDER_IMAGE:-localhost/ipfailover-builder:bookworm}
SUITE=${SUITE:-bookworm}
GOROOT_HOST=${GOROOT_HOST:-$(go env GOROOT 2>/dev/null || echo /usr/local/go)}
PODMAN=(podman --runtime "${RUNTIME:-/usr/sbin/runc}")

log() { printf 'base.sh: %s\n' "$*" >&2; }

# debian_mirror prints the first Debian archive URI in the host's apt
# sources (one-line or deb822 format), so no host name is written here.
debian_mirror() {
	local f uri
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		uri=$(awk '
			/^[[:space:]]*#/ { next }
			$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; exit } }
			$1 == "URIs:" { print $2; exit }
		' "$f" | grep -E '/debian/?$' | head -n1 || true)
		if [[ -n $uri ]]; then
			echo "${uri%/}"
			return
		fi
	done
	return 1
}

# apt_sources copies the host's Debian apt sources (main archive, updates,
# security) into the rootfs so that apt-get inside builds uses the same
# mirror.
apt_sources() {
	local root=$1 f
	: >"$root/etc/apt/sources.list"
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		grep -qE '/debian(-security)?/?([[:space:]]|$)' "$f" || continue
		cp "$f" "$root/etc/apt/sources.list.d/host-$(basename "$f")"
	done
	if ! ls "$root"/etc/apt/sources.list.d/host-* >/dev/null 2>&1; then
		echo "deb $2 $SUITE main" >"$root/etc/apt/sources.list"
	fi
}

make_base() {
	local mirror root
	mirror=$(debian_mirror) || { log "no Debian mirror found in /etc/apt/sources*"; exit 1; }
	root=$(mktemp -d /var/tmp/ipfailover-rootfs.XXXXXX)
	trap 'rm -rf "$root"' RETURN
	log "debootstrap $SUITE (minbase) from $mirror"
	debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >/dev/null
	apt_sources "$root" "$mirror"
	# Smaller image, as slim Debian images do: no apt caches, no docs, man
	# pages or translations (and dpkg told not to install them later).
	printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
		'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
		>"$root/etc/dpkg/dpkg.cfg.d/90-nodoc"
	find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
	rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
		"$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
		"$root"/var/log/*.log "$root"/var/cache/debconf/*-old
	tar --numeric-owner -C "$root" -c . |
		"${PODMAN[@]}" import -q \
			--change 'CMD ["/bin/bash"]' \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			- "$BASE_IMAGE" >/dev/null
	log "made $BASE_IMAGE"
}

make_builder() {
	local ctr
	ctr=$("${PODMAN[@]}" create "$BASE_IMAGE" /bin/true)
	trap '"${PODMAN[@]}" rm -f "$ctr" >/dev/null' RETURN
	"${PODMAN[@]}" cp "$GOROOT_HOST" "$ctr:/usr/local/go"
	"${PODMAN[@]}" commit -q \
		--change 'ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV GOTOOLCHAIN=local' \
		"$ctr" "$BUILDER_IMAGE" >/dev/null
	log "made $BUILDER_IMAGE with $("$GOROOT_HOST/bin/go" version)"
}

if [[ ${REBUILD_BASE:-0} == 1 ]] || ! "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
	make_base
	"${PODMAN[@]}" rmi -f "$BUILDER_IMAGE" >/dev/null 2>&1 || true
fi
if ! "${PODMAN[@]}" image exists "$BUILDER_IMAGE"; then
	make_builder
fi
