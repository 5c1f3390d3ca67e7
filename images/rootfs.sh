#!/usr/bin/env bash
# Makes ROOTFS (default /rootfs): the image's file system, exactly the files
# of the Debian packages the image runs, as this container installed them
# (the Containerfile's rootfs stage), and nothing else of the container.
#
#   rootfs.sh PACKAGE...
#
# The packages are the ones named and everything they depend on (Depends and
# Pre-Depends, transitively), less the ones that only serve package
# installation (INSTALL_ONLY: apt, dpkg, debconf, Perl, init script
# helpers), since nothing is installed into the image once it is built.
# What the packages' maintainer scripts made is kept where the image needs
# it: the alternatives that point at a kept file (iptables -> iptables-nft),
# the users and groups, and a linker cache. /var/lib/dpkg/status lists exactly
# the packages kept, with their file lists and checksums, so `dpkg --root`,
# and scanners that read the status file, see what is there.
set -euo pipefail

ROOTFS=${ROOTFS:-/rootfs}
INSTALL_ONLY=${INSTALL_ONLY:-apt debconf dpkg init-system-helpers perl-base tar}
(($# > 0)) || {
	echo "usage: $0 PACKAGE..." >&2
	exit 2
}

log() { printf 'rootfs.sh: %s\n' "$*" >&2; }
installed() { dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }

# provider[virtual] = installed package that provides it.
declare -A provider
while read -r pkg provides; do
	IFS=, read -ra names <<<"$provides"
	for n in "${names[@]}"; do
		n=${n%%(*}
		n=${n// /}
		if [[ -n $n ]]; then provider[$n]=$pkg; fi
	done
done < <(dpkg-query -W -f '${Package} ${Provides}\n')
declare -A skip
for p in $INSTALL_ONLY; do skip[$p]=1; done

# The closure: for each dependency the first alternative that is installed.
declare -A keep
queue=("$@")
while ((${#queue[@]})); do
	p=${queue[0]%%:*}
	queue=("${queue[@]:1}")
	if ! installed "$p"; then
		[[ -n ${provider[$p]:-} ]] || {
			log "$p is not installed"
			exit 1
		}
		p=${provider[$p]}
	fi
	if [[ -n ${keep[$p]:-} || -n ${skip[$p]:-} ]]; then continue; fi
	keep[$p]=1
	IFS=, read -ra deps <<<"$(dpkg-query -W -f '${Pre-Depends},${Depends}' "$p")"
	for d in "${deps[@]}"; do
		IFS='|' read -ra alts <<<"$d"
		for a in "${alts[@]}"; do
			a=${a%%(*}
			a=${a// /}
			a=${a%%:*}
			[[ -n $a ]] || continue
			if installed "$a" || [[ -n ${provider[$a]:-} ]]; then
				queue+=("$a")
				break
			fi
		done
	done
done
mapfile -t pkgs < <(printf '%s\n' "${!keep[@]}" | sort)
log "${#pkgs[@]} packages: ${pkgs[*]}"

mkdir -p "$ROOTFS"
# merged /usr: /bin, /sbin, /lib* are links into /usr, as in the container,
# and the files packages list under them are copied to where they are.
merged=()
for l in /bin /sbin /lib /lib32 /lib64 /libx32; do
	if [[ -L $l ]]; then
		cp -P "$l" "$ROOTFS$l"
		merged+=(-e "s|^$l\$||" -e "s|^$l/|$(realpath "$l")/|")
	fi
done

# Every file, link and directory the packages own that is on disk (dpkg's
# path-exclude keeps docs, man pages and translations off it).
list=$(mktemp)
for p in "${pkgs[@]}"; do
	dpkg-query -L "$p" | while IFS= read -r f; do
		if [[ $f == /* && $f != /. ]] && [[ -e $f || -L $f ]]; then
			printf '%s\n' "$f"
		fi
	done
done | sed "${merged[@]}" -e 's|^/||' | grep . | sort -u >"$list"
tar --no-recursion -C / -cf - -T "$list" | tar -C "$ROOTFS" --keep-directory-symlink -xf -

# Alternatives whose current choice the image has, with their links.
mkdir -p "$ROOTFS/etc/alternatives" "$ROOTFS/var/lib/dpkg/alternatives"
for a in /etc/alternatives/*; do
	t=$(readlink "$a") || continue
	[[ -e $ROOTFS$t ]] || continue
	cp -P "$a" "$ROOTFS$a"
	n=${a##*/}
	if [[ -f /var/lib/dpkg/alternatives/$n ]]; then cp "/var/lib/dpkg/alternatives/$n" "$ROOTFS/var/lib/dpkg/alternatives/"; fi
done
find / -xdev -path "$ROOTFS" -prune -o -lname '/etc/alternatives/*' -print | while IFS= read -r l; do
	t=$(readlink "$l")
	if [[ -L $ROOTFS$t ]]; then cp -P --parents "$l" "$ROOTFS"; fi
done

# Users and groups (base-passwd's, as debootstrap set them), name service
# and the linker cache.
for f in /etc/passwd /etc/group /etc/shadow /etc/gshadow /etc/nsswitch.conf /etc/host.conf; do
	if [[ -e $f ]]; then cp -p "$f" "$ROOTFS$f"; fi
done
ldconfig -r "$ROOTFS"
rm -rf "$ROOTFS/var/cache/ldconfig"

# dpkg's database for exactly these packages.
mkdir -p "$ROOTFS/var/lib/dpkg/info" "$ROOTFS/var/lib/dpkg/updates"
for p in "${pkgs[@]}"; do
	dpkg-query -s "$p"
	echo
done >"$ROOTFS/var/lib/dpkg/status"
# info/format says the file names carry the architecture (libc6:amd64.list).
for f in /var/lib/dpkg/arch /var/lib/dpkg/info/format; do
	if [[ -e $f ]]; then cp -p "$f" "$ROOTFS$f"; fi
done
for p in "${pkgs[@]}"; do
	for f in /var/lib/dpkg/info/"$p".{list,md5sums,conffiles} /var/lib/dpkg/info/"$p":*.{list,md5sums,conffiles}; do
		if [[ -e $f ]]; then cp -p "$f" "$ROOTFS/var/lib/dpkg/info/"; fi
	done
done

# Directories a container expects.
install -d -m 1777 "$ROOTFS/tmp" "$ROOTFS/var/tmp"
install -d -m 0755 "$ROOTFS/run" "$ROOTFS/root" "$ROOTFS/proc" "$ROOTFS/sys" "$ROOTFS/dev"
[[ -e $ROOTFS/var/run ]] || ln -s /run "$ROOTFS/var/run"
log "$(du -sh "$ROOTFS" | cut -f1) in $ROOTFS"
