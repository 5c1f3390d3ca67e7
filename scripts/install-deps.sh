#!/usr/bin/env bash
# Installs, from Debian's packages, every program the tests, the demo and the
# benchmarks run; with the argument "image" also what make image and make
# image-test run (podman, runc, debootstrap, catatonit); with "kube" that and
# what the test Kubernetes cluster runs or builds with (containerd, the CNI
# plugins, gcc and libc6-dev for the pause binary). The programs and their
# packages are the table in deps.txt beside this script, which deps_test.go
# holds against the code. Quiet and quick when everything is there already.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case ${1:-} in
  "") groups=" test " ;;
  image) groups=" test image " ;;
  kube) groups=" test image kube " ;;
  *) echo "usage: $0 [image|kube]" >&2; exit 2 ;;
esac
export PATH="$PATH:/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/sbin"

need=()
while read -r program package group _; do
  [[ -z $program || $program == \#* || $package == - ]] && continue
  [[ $groups == *" $group "* ]] || continue
  if [[ $program == /* ]]; then
    [[ -e $program ]] && continue
  else
    command -v "$program" >/dev/null && continue
  fi
  [[ " ${need[*]} " == *" $package "* ]] || need+=("$package")
done <"$here/deps.txt"

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
if ! command -v go >/dev/null; then
  echo "install-deps: Go is not on PATH (expected /usr/local/go/bin)" >&2
  exit 1
fi
