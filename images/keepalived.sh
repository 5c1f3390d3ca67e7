#!/usr/bin/env bash
# Builds keepalived from Debian's source package without SNMP and D-Bus, as a
# .deb in OUT (default /out), inside a Debian container (the Containerfile's
# keepalived stage). The version is the source of the keepalived binary that
# apt would install from this container's own apt sources, so a rebuild
# follows Debian's updates; the configure flags are Debian's (as its binary's
# `keepalived --version` lists them) less --enable-snmp* and --enable-dbus.
#
# Why: Debian's keepalived links net-snmp's agent libraries, which link Perl,
# and GLib for D-Bus: about 72 MB of packages (12 MB of libraries alone) for
# an SNMP agent and a D-Bus service that no container here runs. Without
# them keepalived needs only libraries the image's other tools need anyway,
# and libnl.
set -euo pipefail

OUT=${OUT:-/out}
# The version only says it is this build of Debian's source: "~" sorts
# before any Debian revision, so no scanner takes it for a fixed version.
SUFFIX="~ipfailover1"
# Debian's packaging of these source versions carries no patches (1:2.2.7-1's
# changelog: "d/patches: drop patch around DBus policy, applied upstream"),
# so their upstream tarball alone is the whole source. For any other version
# the packaging tarball must be fetched and its patches applied.
PATCH_FREE="1:2.2.7-1"

log() { printf 'keepalived.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

export DEBIAN_FRONTEND=noninteractive
# Source indexes for every Debian archive apt already uses (deb822 and
# one-line forms).
for f in /etc/apt/sources.list.d/*.sources; do
	if [[ -e $f ]]; then sed -i 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb deb-src/' "$f"; fi
done
n=0
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
	[[ -s $f ]] || continue
	n=$((n + 1))
	sed -n 's/^deb[[:space:]]/deb-src /p' "$f" >"/etc/apt/sources.list.d/ipfailover-deb-src-$n.list"
done
apt-get update -qq

# The source package of the binary apt would install: "keepalived (1:2.2.7-1)"
# for a binary-only rebuild such as 1:2.2.7-1+b2, plain "keepalived" otherwise.
binver=$(apt-cache policy keepalived | awk '$1 == "Candidate:" { print $2 }')
[[ -n $binver && $binver != "(none)" ]] || die "no keepalived binary package in this container's apt sources"
src=$(apt-cache show "keepalived=$binver" | awk -F': ' '$1 == "Source" { print $2; exit }')
srcver=$binver
if [[ $src == *"("*")" ]]; then
	srcver=${src#*(}
	srcver=${srcver%)}
fi
log "Debian's keepalived $binver, source version $srcver"

work=$(mktemp -d /var/tmp/keepalived-build.XXXXXX)
cd "$work"
# Each file of the source package, checked against the hash in Debian's
# signed index by apt's own downloader.
missing=() dsc="" orig=""
while read -r uri name _ hash; do
	uri=${uri//\'/}
	if ! /usr/lib/apt/apt-helper download-file "$uri" "$name" "$hash" >/dev/null 2>apt-helper.err; then
		missing+=("$name")
		log "could not fetch $name: $(tail -n1 apt-helper.err)"
		continue
	fi
	case $name in
	*.dsc) dsc=$name ;;
	*.orig.tar.*) orig=$name ;;
	esac
done < <(apt-get source --print-uris -qq "keepalived=$srcver" | grep "^'")
[[ -n $dsc && -n $orig ]] || die "Debian's source package keepalived $srcver could not be fetched (.dsc and upstream tarball)"

if ((${#missing[@]} == 0)); then
	# The whole source package: dpkg-source applies Debian's patches.
	# --no-check: apt-helper checked every file against the signed index.
	dpkg-source -x --no-check "$dsc" src >/dev/null
elif [[ ${#missing[@]} == 1 && ${missing[0]} == *.debian.tar.* && $srcver == "$PATCH_FREE" ]]; then
	log "building from the upstream tarball alone: Debian's packaging of $srcver has no patches"
	mkdir src
	tar -xf "$orig" -C src --strip-components=1
else
	die "Debian's packaging of keepalived $srcver (${missing[*]}) could not be fetched, and its patches must be applied"
fi

# Debian's build dependencies less those of SNMP (libsnmp-dev) and D-Bus
# (libglib2.0-dev), and less debhelper and autoconf: configure is run as
# shipped, without dh.
builddeps=$(awk '
	/^Build-Depends:/ { on = 1; sub(/^Build-Depends:/, ""); print; next }
	on && /^[ \t]/ { print; next }
	{ on = 0 }' "$dsc" | tr '\n' ' ' | tr ',' '\n' |
	grep -vE '^[[:space:]]*(libsnmp-dev|libglib2\.0-dev|debhelper-compat|debhelper|autoconf)([[:space:](]|$)' |
	paste -sd, -)
apt-get satisfy -y -qq --no-install-recommends "build-essential, dpkg-dev, $builddeps" >/dev/null

# Debian's configure flags (dh_auto_configure's and debian/rules' own) less
# --enable-snmp, --enable-snmp-rfcv2, --enable-snmp-rfcv3 and --enable-dbus,
# with Debian's hardening build flags.
cd src
eval "$(dpkg-buildflags --export=sh)"
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
./configure --build="$(dpkg-architecture -qDEB_BUILD_GNU_TYPE)" \
	--prefix=/usr --includedir="\${prefix}/include" --mandir="\${prefix}/share/man" \
	--infodir="\${prefix}/share/info" --sysconfdir=/etc --localstatedir=/var \
	--disable-option-checking --disable-silent-rules --libdir="\${prefix}/lib/$triplet" \
	--runstatedir=/run --disable-maintainer-mode --disable-dependency-tracking \
	--enable-sha1 --enable-json --enable-bfd --enable-regex --with-init=systemd \
	--disable-snmp --disable-dbus >../configure.log 2>&1 || {
	tail -n 30 ../configure.log >&2
	die "configure failed"
}
make -j"$(nproc)" >../make.log 2>&1 || {
	tail -n 30 ../make.log >&2
	die "make failed"
}

# The package: the daemon (stripped as dh_strip does) and its copyright.
stage=$work/stage
install -D -m 0755 keepalived/keepalived "$stage/usr/sbin/keepalived"
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage/usr/sbin/keepalived"
if [[ -f debian/copyright ]]; then
	install -D -m 0644 debian/copyright "$stage/usr/share/doc/keepalived/copyright"
else
	install -D -m 0644 COPYING "$stage/usr/share/doc/keepalived/copyright"
fi
mkdir -p "$work/shlibs/debian" "$stage/DEBIAN"
printf 'Source: keepalived\n\nPackage: keepalived\nArchitecture: any\n' >"$work/shlibs/debian/control"
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O -e"$stage/usr/sbin/keepalived" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[[ -n $depends ]] || die "dpkg-shlibdeps found no dependencies"
version=$srcver$SUFFIX
cat >"$stage/DEBIAN/control" <<EOF
Package: keepalived
Source: keepalived ($srcver)
Version: $version
Architecture: $(dpkg-architecture -qDEB_HOST_ARCH)
Maintainer: ipfailover image build <ipfailover@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends
Section: admin
Priority: optional
Homepage: http://keepalived.org
Description: Failover and monitoring daemon for LVS clusters (without SNMP and D-Bus)
 Debian's keepalived source package $srcver, built with Debian's configure
 flags and build flags less SNMP and D-Bus, for the ipfailover image: only
 /usr/sbin/keepalived.
EOF
mkdir -p "$OUT"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$OUT/keepalived_${version#*:}_$(dpkg-architecture -qDEB_HOST_ARCH).deb" >/dev/null
log "built $(ls "$OUT"/keepalived_*.deb): Depends: $depends"
"$stage/usr/sbin/keepalived" --version 2>&1 | grep -E '^(Keepalived|Config options)' >&2
