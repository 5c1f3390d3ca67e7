#!/usr/bin/env bash
# Tests a built ipfailover image with podman, inside network namespaces this
# script makes (TEST-NET 192.0.2.0/24 only; the root namespace is never
# touched). Prints PASS/FAIL per check and exits non-zero on any failure.
# Needs root, podman and runc. Not part of `make test`: it takes a minute.
#
# Environment: IMAGE (default localhost/ipfailover:dev), RUNTIME (default
# /usr/sbin/runc), KEEP=1 leaves containers and namespaces for debugging.
set -uo pipefail

IMAGE=${IMAGE:-localhost/ipfailover:dev}
RUNTIME=${RUNTIME:-/usr/sbin/runc}
BIN=/usr/bin/ipfailover
OLD=/var/lib/ipfailover/keepalived
id=ifoimg-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
netns=()
ctrs=()
failed=0
tmp=$(mktemp -d)

podman_() { podman --runtime "$RUNTIME" "$@"; }
# prun runs a container with the limits this machine needs.
prun() { podman_ run --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@"; }

cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "KEEP=1: left containers ${ctrs[*]:-none} and namespaces ${netns[*]:-none}"
		return
	fi
	local c n
	for c in "${ctrs[@]}"; do podman_ rm -f -t 5 "$c" >/dev/null 2>&1; done
	for n in "${netns[@]}"; do ip netns del "$n" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

pass() { printf 'PASS  %s\n' "$1"; }
fail() {
	printf 'FAIL  %s\n' "$1"
	[[ -n ${2:-} ]] && printf '%s\n' "$2" | sed 's/^/      | /' | head -n 40
	failed=$((failed + 1))
}
# check NAME CMD...: runs CMD, PASS when it exits 0; its output is shown on FAIL.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$out"; fi
}
# wait_for SECONDS CMD...: retries CMD until it succeeds or the deadline passes.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

# master CTR: waits (90 s at most) for CTR to log "Entering MASTER STATE";
# fails at once when the container stops first.
master() {
	local deadline=$((SECONDS + 90))
	while ((SECONDS < deadline)); do
		podman_ logs "$1" 2>&1 | grep -q 'Entering MASTER STATE' && return 0
		[[ $(podman_ inspect "$1" --format '{{.State.Running}}' 2>/dev/null) == true ]] || return 1
		sleep 0.5
	done
	return 1
}
running() { [[ $(podman_ inspect "$1" --format '{{.State.Running}}' 2>/dev/null) == true ]]; }

# mknode NAME ADDR: a namespace with a veth pair (veth0 carries ADDR/24 and
# the default route; veth1 is its up peer so VRRP adverts have a wire).
mknode() {
	local ns=$1 addr=$2
	ip netns add "$ns" || return 1
	netns+=("$ns")
	ip -n "$ns" link add veth0 type veth peer name veth1 &&
		ip -n "$ns" link set lo up &&
		ip -n "$ns" link set veth1 up &&
		ip -n "$ns" link set veth0 up &&
		ip -n "$ns" addr add "$addr/24" dev veth0 &&
		ip -n "$ns" route add default via 192.0.2.254 dev veth0
}

# http NS ADDR PORT PATH: a plain HTTP/1.0 GET from inside NS with bash's
# /dev/tcp; prints the whole response.
http() {
	ip netns exec "$1" timeout 5 bash -c '
		exec 3<>"/dev/tcp/$0/$1" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$0" >&3
		cat <&3' "$2" "$3" "$4"
}
http_ok() { http "$@" | head -n1 | grep -q ' 200 '; }

echo "image-test: $IMAGE (run $id)"
if [[ $(id -u) != 0 ]]; then
	echo "image-test: needs root (network namespaces, privileged containers)" >&2
	exit 1
fi
if ! podman_ image exists "$IMAGE"; then
	echo "image-test: no image $IMAGE; run images/build.sh first" >&2
	exit 1
fi

# --- image metadata ---------------------------------------------------------
inspect() { podman_ image inspect "$IMAGE" --format "$1"; }
check "port 9650/tcp exposed" grep -qx '.*"9650/tcp".*' <<<"$(inspect '{{json .Config.ExposedPorts}}')"
check "entrypoint is $BIN" test "$(inspect '{{json .Config.Entrypoint}}')" = "[\"$BIN\"]"
check "OCI labels (title, version, source)" bash -c '
	for l in title version source; do grep -q "\"org.opencontainers.image.$l\"" <<<"$1" || exit 1; done' _ "$(inspect '{{json .Config.Labels}}')"

# --- tools in the image -----------------------------------------------------
tools=$(prun --rm --network none --entrypoint /bin/bash "$IMAGE" -c '
	for t in bash iptables ip6tables nft ip modprobe pgrep /usr/bin/curl /usr/sbin/keepalived '"$BIN"' '"$OLD"'/monitor.sh '"$OLD"'/remove-failover.sh; do
		if p=$(command -v "$t") && [ -x "$p" ]; then echo "have $t"; else echo "missing $t"; fi
	done
	iptables -V; nft -v; ip -V
	echo "signum $(/usr/sbin/keepalived --signum=JSON)"
	/usr/sbin/keepalived --version 2>&1 | grep -o -- "--enable-json"
	/usr/sbin/keepalived --version 2>&1 | sed -n "s/^Config options: */keepalived options /p"
	sed "s/^/monitor: /" '"$OLD"'/monitor.sh
	sed "s/^/remove-failover: /" '"$OLD"'/remove-failover.sh' 2>&1)
for t in bash iptables ip6tables nft ip modprobe pgrep /usr/bin/curl /usr/sbin/keepalived "$BIN" "$OLD/monitor.sh" "$OLD/remove-failover.sh"; do
	check "image has $t" grep -qx "have $t" <<<"$tools"
done
check "iptables uses the nf_tables backend" grep -q 'iptables v.*(nf_tables)' <<<"$tools"
check "keepalived built with --enable-json" grep -qx -- '--enable-json' <<<"$tools"
check "keepalived --signum=JSON prints a number" grep -qxE 'signum [0-9]+' <<<"$tools"
check "monitor.sh execs '$BIN run'" grep -qxF "monitor: exec $BIN run \"\$@\"" <<<"$tools"
check "remove-failover.sh execs '$BIN remove-failover'" grep -qxF "remove-failover: exec $BIN remove-failover \"\$@\"" <<<"$tools"
out=$(prun --rm --network none "$IMAGE" version 2>&1)
check "ipfailover version runs" test -n "$out"
echo "      | $out"
# What the project and the keepalived-operator use (JSON dumps, VRRP with
# its authentication, nftables), BFD for later, and no SNMP or D-Bus: the
# image's keepalived is Debian's source built without them (Containerfile).
opts=$(sed -n 's/^keepalived options //p' <<<"$tools")
check "keepalived has VRRP, VRRP_AUTH, JSON, BFD and NFTABLES" bash -c '
	for o in VRRP VRRP_AUTH JSON BFD NFTABLES; do [[ " $1 " == *" $o "* ]] || exit 1; done' _ "$opts"
check "keepalived has no SNMP and no DBUS" bash -c '! grep -qE "SNMP|DBUS" <<<"$1"' _ "$opts"
echo "      | keepalived options: $opts"

# --- size and contents ------------------------------------------------------
# At most 80 MB as podman counts it (test/bench's bound too). The file
# system is exactly the files of the Debian packages its dpkg database
# lists, checked by the host's dpkg against their checksums, plus what the
# build adds.
size=$(inspect '{{.Size}}')
check "image size $((size / 1000000)) MB <= 80 MB" test "$size" -le 80000000
if mnt=$(podman_ image mount "$IMAGE"); then
	# dpkg reports the docs, man pages and translations the build leaves
	# out as missing; anything else it reports is a fault.
	out=$(dpkg --root="$mnt" --verify 2>&1 |
		awk '!($1 == "missing" && ($2 ~ "^/usr/share/(man|info|locale)/" || $2 ~ "^/usr/share/doc/" && $2 !~ "/copyright$"))')
	check "dpkg --verify: every file of every listed package there, unchanged" test -z "$out"
	[[ -z $out ]] || printf '%s\n' "$out" | sed 's/^/      | /' | head -n 20
	pkgs=$(dpkg-query --admindir="$mnt/var/lib/dpkg" -W -f '${Package} ${Version} ${Source}\n')
	check "dpkg: keepalived is the rebuild of Debian's source, no Perl, net-snmp or GLib" bash -c '
		grep -qE "^keepalived [0-9]+:[^ ]+~ipfailover[0-9]+ keepalived \(" <<<"$1" &&
			! grep -qE "^(perl|libperl|libsnmp|libglib|apt|dpkg) " <<<"$1"' _ "$pkgs"
	echo "      | $(wc -l <<<"$pkgs") packages; $(grep '^keepalived ' <<<"$pkgs")"
	# Every file and link in the image: a package's, or one the build adds.
	owned=$(cat "$mnt"/var/lib/dpkg/info/*.list | sed -E 's#^/(bin|sbin|lib|lib64)/#/usr/\1/#' | sort -u)
	# An alternatives file: mode, link, then slave name and link pairs up
	# to an empty line.
	links=$(for a in "$mnt"/var/lib/dpkg/alternatives/*; do awk 'NR == 2 { print; next } NR > 2 && $0 == "" { exit } NR > 2 && NR % 2 == 0' "$a"; done | sort -u)
	extra=$(cd "$mnt" && find . -xdev \( -type f -o -type l \) | sed 's#^\.##' | sort |
		comm -23 - <(printf '%s\n' "$owned" "$links" | sort -u) |
		grep -vxE "/(bin|sbin|lib|lib64)|/etc/(passwd|group|shadow|gshadow|nsswitch.conf|host.conf|ld.so.cache)|/etc/alternatives/.*|/var/lib/dpkg/.*|$BIN|$OLD/(monitor|remove-failover).sh")
	check "every file in the image is a listed package's or the build's own" test -z "$extra"
	[[ -z $extra ]] || printf '%s\n' "$extra" | sed 's/^/      | /' | head -n 20
	podman_ image unmount "$IMAGE" >/dev/null
else
	fail "podman image mount $IMAGE"
fi

# --- render inside a namespace ---------------------------------------------
nsr=$id-r
if mknode "$nsr" 192.0.2.1; then
	out=$(prun --rm --network "ns:/run/netns/$nsr" \
		-e OPENSHIFT_HA_CONFIG_NAME=image-test \
		-e OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-102 \
		-e OPENSHIFT_HA_VIP_GROUPS=2 \
		-e OPENSHIFT_HA_VRRP_ID_OFFSET=40 \
		"$IMAGE" render 2>&1)
	rc=$?
	check "render exits 0 (interface from the namespace's default route)" test "$rc" = 0
	check "render: two vrrp_instances image_test_VIP_1/2" bash -c '
		grep -q "vrrp_instance image_test_VIP_1" <<<"$1" && grep -q "vrrp_instance image_test_VIP_2" <<<"$1"' _ "$out"
	check "render: router ids 41 and 42" bash -c '
		grep -qE "virtual_router_id[[:space:]]+41" <<<"$1" && grep -qE "virtual_router_id[[:space:]]+42" <<<"$1"' _ "$out"
	check "render: VIPs on veth0" grep -q '192.0.2.100.* dev veth0' <<<"$out"
	[[ $rc == 0 ]] || echo "$out" | sed 's/^/      | /' | head -n 20

	# keepalived's own configuration check of every feature the project,
	# the keepalived-operator and a later BFD step use: a keyword compiled
	# out is "Unknown keyword" and a non-zero exit.
	mkdir -p "$tmp/features"
	cat >"$tmp/features/keepalived.conf" <<-'EOF'
		global_defs {
		   router_id image_test
		   notify_fifo /run/keepalived-notify.fifo
		   vrrp_version 3
		   nftables keepalived
		   script_user root
		   enable_script_security
		}
		track_file chk_image_test {
		   file /run/ipfailover/check
		   weight 0
		}
		vrrp_script chk_curl {
		   script "/usr/bin/curl -s -f -m 1 -o /dev/null http://127.0.0.1:10256/healthz"
		   interval 1
		}
		bfd_instance bfd_peer {
		   neighbor_ip 192.0.2.9
		   source_ip 192.0.2.1
		   min_rx 100
		   min_tx 100
		}
		vrrp_instance image_test_VIP_1 {
		   interface veth0
		   virtual_router_id 41
		   priority 100
		   advert_int 0.1
		   unicast_src_ip 192.0.2.1
		   unicast_peer {
		      192.0.2.2
		   }
		   virtual_ipaddress {
		      192.0.2.100 dev veth0
		   }
		   track_file {
		      chk_image_test weight 0 reverse
		   }
		   track_script {
		      chk_curl
		   }
		   track_bfd {
		      bfd_peer
		   }
		}
	EOF
	out=$(prun --rm --network "ns:/run/netns/$nsr" -v "$tmp/features:/features:ro" \
		--entrypoint /usr/sbin/keepalived "$IMAGE" -t -l -f /features/keepalived.conf 2>&1)
	rc=$?
	check "keepalived -t: notify_fifo, VRRPv3, nftables, track_file, a curl script, unicast, BFD all known" test "$rc" = 0
	[[ $rc == 0 ]] || echo "$out" | sed 's/^/      | /' | head -n 20

	out=$(prun --rm --network "ns:/run/netns/$nsr" \
		-e OPENSHIFT_HA_VIRTUAL_IPS='192.0.2.100-102' -e OPENSHIFT_HA_VRRP_ID_OFFSET=300 \
		"$IMAGE" render 2>&1)
	rc=$?
	check "bad config: exit 2 naming the variable" bash -c '[ "$1" = 2 ] && grep -q OPENSHIFT_HA_VRRP_ID_OFFSET <<<"$2"' _ "$rc" "$out"
else
	fail "namespace $nsr"
fi

# --- remove-failover.sh cleans a namespace ----------------------------------
nsc=$id-c
if mknode "$nsc" 192.0.2.2; then
	ip -n "$nsc" addr add 192.0.2.110/32 dev veth0
	ip -n "$nsc" addr add 192.0.2.111/32 dev veth0
	ip netns exec "$nsc" iptables -I INPUT 1 -d 224.0.0.18/32 -j ACCEPT
	out=$(prun --rm --privileged --network "ns:/run/netns/$nsc" \
		--entrypoint "$OLD/remove-failover.sh" \
		-e OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.110-111 \
		-e OPENSHIFT_HA_NETWORK_INTERFACE=veth0 \
		-e OPENSHIFT_HA_IPTABLES_CHAIN=INPUT \
		"$IMAGE" 2>&1)
	rc=$?
	check "remove-failover.sh exits 0" test "$rc" = 0
	[[ $rc == 0 ]] || echo "$out" | sed 's/^/      | /' | head -n 20
	check "remove-failover.sh released the VIPs" bash -c "! ip -n '$nsc' -4 addr show dev veth0 | grep -qE '192\.0\.2\.11[01]/'"
	check "remove-failover.sh kept the node address" bash -c "ip -n '$nsc' -4 addr show dev veth0 | grep -q '192.0.2.2/24'"
	check "remove-failover.sh removed the VRRP rule" bash -c "! ip netns exec '$nsc' iptables -S INPUT | grep -q '224.0.0.18'"
	out=$(prun --rm --privileged --network "ns:/run/netns/$nsc" \
		--entrypoint "$OLD/remove-failover.sh" \
		-e OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.110-111 \
		-e OPENSHIFT_HA_NETWORK_INTERFACE=veth0 \
		-e OPENSHIFT_HA_IPTABLES_CHAIN=INPUT \
		"$IMAGE" 2>&1)
	rc=$?
	check "remove-failover.sh is idempotent (second run exits 0)" test "$rc" = 0
	[[ $rc == 0 ]] || echo "$out" | sed 's/^/      | /' | head -n 20
else
	fail "namespace $nsc"
fi

# --- the entrypoint elects itself MASTER and serves :9650 -------------------
# Host networking as in the Deployment, here the namespace's; the monitor
# port is 9650 itself, so the default TCP check passes once metrics serve.
nsm=$id-m
ctr=$id-run
if mknode "$nsm" 192.0.2.3; then
	ctrs+=("$ctr")
	if podman_ run -d --name "$ctr" --privileged --network "ns:/run/netns/$nsm" \
		--ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
		-e OPENSHIFT_HA_CONFIG_NAME=image-test \
		-e OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.120 \
		-e OPENSHIFT_HA_NETWORK_INTERFACE=veth0 \
		-e OPENSHIFT_HA_MONITOR_PORT=9650 \
		-e OPENSHIFT_HA_IPTABLES_CHAIN=INPUT \
		-e OPENSHIFT_HA_REPLICA_COUNT=1 \
		"$IMAGE" >/dev/null; then
		logs() { podman_ logs "$ctr" 2>&1; }
		if master "$ctr"; then
			pass "entrypoint: keepalived logs 'Entering MASTER STATE'"
		else
			fail "entrypoint: keepalived logs 'Entering MASTER STATE'" "$(logs | tail -n 30)"
		fi
		check "entrypoint: is PID 1 in its container" bash -c "podman --runtime '$RUNTIME' exec '$ctr' cat /proc/1/cmdline | tr '\0' ' ' | grep -q '^$BIN'"
		check "entrypoint: keepalived runs in the container" bash -c "podman --runtime '$RUNTIME' exec '$ctr' pgrep -x keepalived"
		vip=0
		if wait_for 30 bash -c "ip -n '$nsm' -4 addr show dev veth0 | grep -q '192.0.2.120/'"; then
			vip=1
			pass "entrypoint: VIP 192.0.2.120 on veth0"
		else
			fail "entrypoint: VIP 192.0.2.120 on veth0" "$(ip -n "$nsm" addr show dev veth0)"
		fi
		check "entrypoint: VRRP rule at the top of INPUT" bash -c "ip netns exec '$nsm' iptables -S INPUT | sed -n 2p | grep -q '224.0.0.18/32 -j ACCEPT'"
		if wait_for 30 http_ok "$nsm" 192.0.2.3 9650 /healthz; then pass "entrypoint: GET :9650/healthz 200"; else fail "entrypoint: GET :9650/healthz 200" "$(http "$nsm" 192.0.2.3 9650 /healthz 2>&1)"; fi
		if wait_for 30 http_ok "$nsm" 192.0.2.3 9650 /readyz; then pass "entrypoint: GET :9650/readyz 200"; else fail "entrypoint: GET :9650/readyz 200" "$(http "$nsm" 192.0.2.3 9650 /readyz 2>&1)"; fi
		metric() { http "$nsm" 192.0.2.3 9650 /metrics | grep -q "$1"; }
		if wait_for 30 metric '^keepalived_up 1'; then pass "entrypoint: /metrics keepalived_up 1"; else fail "entrypoint: /metrics keepalived_up 1" "$(http "$nsm" 192.0.2.3 9650 /metrics 2>&1 | grep -v '^#' | head -n 20)"; fi
		if wait_for 30 metric '^keepalived_vrrp_state{.*name="image_test_VIP_1".*} 2'; then
			pass "entrypoint: /metrics keepalived_vrrp_state of image_test_VIP_1 is 2 (MASTER)"
		else
			fail "entrypoint: /metrics keepalived_vrrp_state of image_test_VIP_1 is 2 (MASTER)" "$(http "$nsm" 192.0.2.3 9650 /metrics 2>&1 | grep keepalived_vrrp_state)"
		fi
		check "entrypoint: still running before SIGTERM" running "$ctr"
		podman_ stop -t 30 "$ctr" >/dev/null 2>&1
		code=$(podman_ inspect "$ctr" --format '{{.State.ExitCode}}')
		check "entrypoint: SIGTERM exits 0" test "$code" = 0
		check "entrypoint: SIGTERM released the VIP it held" bash -c "[ $vip = 1 ] && ! ip -n '$nsm' -4 addr show dev veth0 | grep -q '192.0.2.120/'"
		[[ $code == 0 ]] || logs | tail -n 20 | sed 's/^/      | /'
	else
		fail "entrypoint: container starts"
	fi
else
	fail "namespace $nsm"
fi

# --- monitor.sh, the old entry path, starts the same way ---------------------
# With the nftables table instead of the iptables rule, and an IPv6 VIP next
# to the IPv4 one (two instances: a group never mixes families).
nso=$id-o
ctr=$id-old
if mknode "$nso" 192.0.2.4 && ip -n "$nso" addr add 2001:db8::4/64 dev veth0 nodad; then
	ctrs+=("$ctr")
	if podman_ run -d --name "$ctr" --privileged --network "ns:/run/netns/$nso" \
		--ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
		--entrypoint "$OLD/monitor.sh" \
		-e OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.130,2001:db8::130 \
		-e OPENSHIFT_HA_MONITOR_PORT=0 \
		-e OPENSHIFT_HA_METRICS_ADDRESS= \
		-e OPENSHIFT_HA_NFTABLES_RULE=true \
		"$IMAGE" >/dev/null; then
		if master "$ctr"; then
			pass "monitor.sh: starts keepalived, 'Entering MASTER STATE'"
		else
			fail "monitor.sh: starts keepalived, 'Entering MASTER STATE'" "$(podman_ logs "$ctr" 2>&1 | tail -n 30)"
		fi
		if wait_for 30 bash -c "ip -n '$nso' -6 addr show dev veth0 | grep -q '2001:db8::130/'"; then
			pass "monitor.sh: IPv6 VIP 2001:db8::130 on veth0"
		else
			fail "monitor.sh: IPv6 VIP 2001:db8::130 on veth0" "$(ip -n "$nso" addr show dev veth0; podman_ logs "$ctr" 2>&1 | tail -n 20)"
		fi
		check "monitor.sh: IPv4 VIP 192.0.2.130 on veth0" bash -c "ip -n '$nso' -4 addr show dev veth0 | grep -q '192.0.2.130/'"
		nft_rules=$(ip netns exec "$nso" nft list table inet keepalived 2>&1)
		check "monitor.sh: nft table inet keepalived accepts VRRP to 224.0.0.18 and ff02::12" bash -c 'grep -q "224.0.0.18" <<<"$1" && grep -q "ff02::12" <<<"$1" && grep -q accept <<<"$1"' _ "$nft_rules"
		check "monitor.sh: no iptables rule with the nft table" bash -c "! ip netns exec '$nso' iptables -S INPUT | grep -q '224.0.0.18'"
		check "monitor.sh: metrics off with OPENSHIFT_HA_METRICS_ADDRESS empty" bash -c "! ip netns exec '$nso' timeout 2 bash -c 'exec 3<>/dev/tcp/192.0.2.4/9650'"
		check "monitor.sh: still running before SIGTERM" running "$ctr"
		podman_ stop -t 30 "$ctr" >/dev/null 2>&1
		check "monitor.sh: SIGTERM exits 0" test "$(podman_ inspect "$ctr" --format '{{.State.ExitCode}}')" = 0
		check "monitor.sh: SIGTERM released both VIPs" bash -c "! ip -n '$nso' addr show dev veth0 | grep -qE '192\.0\.2\.130/|2001:db8::130/'"
	else
		fail "monitor.sh: container starts"
	fi
else
	fail "namespace $nso"
fi

# --- the keepalived-operator's use: keepalived alone, a curl track script ----
# The operator's DaemonSet runs the image's keepalived directly with its own
# configuration (read-only, from a ConfigMap) and pid file (in a volume its
# config-reloader shares), and reloads it with SIGHUP from that second
# container through a shared process namespace. For services with
# externalTrafficPolicy: Local it tracks a script that curls kube-proxy's
# health check port: 200 while the node has local endpoints. Here a small
# HTTP server in the namespace plays kube-proxy: /healthz answers 200 while
# $www/healthz exists, 404 otherwise.
nsk=$id-k
ctr=$id-kop
kop=$tmp/kop
if mknode "$nsk" 192.0.2.5; then
	mkdir -p "$kop/config" "$kop/pid" "$kop/www"
	# kube-proxy's stand-in; its pid is killed on exit with the namespace.
	ip netns exec "$nsk" python3 -m http.server 10256 --bind 127.0.0.1 --directory "$kop/www" >/dev/null 2>&1 &
	kproxy=$!
	trap 'kill $kproxy 2>/dev/null; cleanup' EXIT
	kop_conf() { # VIP...: the operator-style configuration for these VIPs
		printf '%s\n' 'global_defs {' '    router_id ipfailover/image-test' '}' \
			'vrrp_script image-test/local-svc {' \
			'    script "/usr/bin/curl -s -f -m 1 -o /dev/null http://127.0.0.1:10256/healthz"' \
			'    interval 1' '    rise 1' '    fall 1' '}' \
			'vrrp_instance image-test/local-svc {' '    interface veth0' '    virtual_router_id 60' \
			'    priority 100' '    advert_int 1' '    virtual_ipaddress {'
		printf '        %s\n' "$@"
		printf '%s\n' '    }' '    track_script {' '        image-test/local-svc' '    }' '}'
	}
	kop_conf 192.0.2.140 >"$kop/config/keepalived.conf"
	ctrs+=("$ctr")
	# The operator's keepalived container: its command line, privileged.
	if podman_ run -d --name "$ctr" --privileged --network "ns:/run/netns/$nsk" \
		--ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
		-e POD_NAME=keepalivedgroup-image-test-x7k2p \
		-v "$kop/config:/etc/keepalived:ro" -v "$kop/pid:/etc/keepalived.pid" \
		--entrypoint /bin/bash "$IMAGE" -c \
		'exec /usr/sbin/keepalived --log-console --log-detail --dont-fork --config-id=${POD_NAME} --use-file=/etc/keepalived/keepalived.conf --pid=/etc/keepalived.pid/keepalived.pid' \
		>/dev/null; then
		klogs() { podman_ logs "$ctr" 2>&1; }
		kawait() { # NAME CMD...: pass when CMD succeeds within 30 s, else fail with keepalived's log
			local name=$1
			shift
			if wait_for 30 "$@"; then pass "$name"; else fail "$name" "$(klogs | tail -n 30)"; fi
		}
		vip_on() { ip -n "$nsk" -4 addr show dev veth0 | grep -q "$1/"; }
		# No endpoints yet (404): the script runs and fails, and the VIP
		# stays away past the 3 s a lone node waits before it takes over.
		kawait "operator: no local endpoints, keepalived runs the curl track script: it fails" bash -c "podman --runtime '$RUNTIME' logs '$ctr' 2>&1 | grep -q 'VRRP_Script(image-test/local-svc) failed'"
		sleep 4
		check "operator: keepalived runs as PID 1 under the operator's command line" bash -c "podman --runtime '$RUNTIME' exec '$ctr' cat /proc/1/cmdline | tr '\0' ' ' | grep -q '^/usr/sbin/keepalived --log-console --log-detail --dont-fork --config-id=keepalivedgroup-image-test-x7k2p '"
		check "operator: keepalived wrote the operator's pid file" test -s "$kop/pid/keepalived.pid"
		check "operator: no VIP while the check fails" bash -c "! ip -n '$nsk' -4 addr show dev veth0 | grep -q '192.0.2.140/'"
		# Endpoints appear: the script passes, MASTER, the VIP lands.
		touch "$kop/www/healthz"
		kawait "operator: local endpoints, the script passes: VIP 192.0.2.140 on veth0" vip_on 192.0.2.140
		check "operator: keepalived logs the script succeeding" grep -q 'VRRP_Script(image-test/local-svc) succeeded' <<<"$(klogs)"
		# Endpoints gone: the node gives the VIP up instead of dropping traffic.
		rm "$kop/www/healthz"
		kawait "operator: endpoints gone, the script fails again: VIP released" bash -c "! ip -n '$nsk' -4 addr show dev veth0 | grep -q '192.0.2.140/'"
		# A SIGHUP reload as the operator's config-reloader sends it: from
		# another container sharing the process namespace, by the pid file.
		touch "$kop/www/healthz"
		kop_conf 192.0.2.140 192.0.2.141 >"$kop/config/keepalived.conf"
		out=$(prun --rm --pid "container:$ctr" --network none -v "$kop/pid:/etc/keepalived.pid:ro" \
			--entrypoint /bin/bash "$IMAGE" -c 'kill -HUP "$(cat /etc/keepalived.pid/keepalived.pid)"' 2>&1)
		check "operator: SIGHUP from a second container by the pid file" test -z "$out"
		kawait "operator: after the reload both VIPs of the new configuration on veth0" bash -c "ip -n '$nsk' -4 addr show dev veth0 | grep -q '192.0.2.140/' && ip -n '$nsk' -4 addr show dev veth0 | grep -q '192.0.2.141/'"
		check "operator: keepalived logged the reload" grep -q 'Reloading' <<<"$(klogs)"
		rm "$kop/www/healthz"
		kawait "operator: after the reload the script still runs: both VIPs released without endpoints" bash -c "! ip -n '$nsk' -4 addr show dev veth0 | grep -qE '192\.0\.2\.14[01]/'"
		check "operator: curl was never missing or disabled" bash -c '! grep -E "cannot be accessed|Disabling track script|not executable|No such file" <<<"$1"' _ "$(klogs)"
		check "operator: still running before SIGTERM" running "$ctr"
		podman_ stop -t 30 "$ctr" >/dev/null 2>&1
		check "operator: SIGTERM exits 0" test "$(podman_ inspect "$ctr" --format '{{.State.ExitCode}}')" = 0
	else
		fail "operator: keepalived container starts"
	fi
else
	fail "namespace $nsk"
fi

if ((failed > 0)); then
	echo "image-test: $failed check(s) FAILED"
	exit 1
fi
echo "image-test: all checks PASS"
