#!/usr/bin/env bash
# Installs the Debian packages the tests, the demo and the benchmarks use:
# the real keepalived, iptables (nft backend), nftables, iproute2 and kmod;
# with the argument "image" also podman, runc and debootstrap.
# Quiet and quick when everything is there already.
set -euo pipefail
need=()
command -v keepalived >/dev/null || need+=(keepalived)
command -v iptables >/dev/null || need+=(iptables)
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v modprobe >/dev/null || need+=(kmod)
command -v unshare >/dev/null || need+=(util-linux)
command -v python3 >/dev/null || need+=(python3)
command -v make >/dev/null || need+=(make)
if [[ ${1:-} == image ]]; then # make image, make image-test
  command -v podman >/dev/null || need+=(podman)
  [[ -x /usr/sbin/runc ]] || need+=(runc)
  command -v debootstrap >/dev/null || need+=(debootstrap)
fi
if ((${#need[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "install-deps: need root to install: ${need[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null; then
  echo "install-deps: Go is not on PATH (expected /usr/local/go/bin)" >&2
  exit 1
fi
