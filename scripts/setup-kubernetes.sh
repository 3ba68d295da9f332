#!/usr/bin/env bash
# What the Kubernetes test cluster needs on this machine (root, Debian 12), for the README's
# commands and .ci/run (separate from scripts/setup-system.sh on purpose: only the
# Kubernetes platform needs this):
#   1. etcd from Debian (etcd-server: /usr/bin/etcd), ~10 s;
#   2. kube-apiserver, kube-controller-manager, kube-scheduler v1.20.2: a verified tarball
#      found where faultdrill looks for it (platforms/kubernetes/binaries.py: the directory
#      or file in $FAULTDRILL_K8S_CACHE, shared/cache/ in a parent directory of this
#      checkout, ~/.cache/faultdrill/k8s), else built from Debian's source into
#      ${FAULTDRILL_K8S_CACHE:-~/.cache/faultdrill/k8s} by scripts/build-k8s-binaries.sh
#      (6-7 min of two idle cores, ~2.4 GB of disk while it builds; the work dir is removed).
# The Python client is an extra of the package: pip install -e '.[kubernetes]' (in [dev]).
# usage: scripts/setup-kubernetes.sh        exit 0: ready; 1: could not (the step is named)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
NAME=kubernetes-1.20.2-linux-amd64-bin.tgz
say() { echo "[setup-kubernetes] $*" >&2; }

if [ "$(id -u)" != 0 ]; then
  say "not root: the test cluster needs root (namespaces, cgroups); nothing installed"
  exit 1
fi

if [ ! -x /usr/bin/etcd ]; then
  say "apt-get install etcd-server"
  apt-get install -y --no-install-recommends etcd-server >/tmp/faultdrill-k8s-apt.log 2>&1 \
    || { apt-get update >>/tmp/faultdrill-k8s-apt.log 2>&1 \
         && apt-get install -y --no-install-recommends etcd-server >>/tmp/faultdrill-k8s-apt.log 2>&1; } \
    || { say "FAILED: apt-get install etcd-server (see /tmp/faultdrill-k8s-apt.log)"; exit 1; }
fi

verified() {  # a tarball with a matching .sha256 beside it
  local tgz=$1
  [ -f "$tgz" ] && [ -f "$tgz.sha256" ] \
    && (cd "$(dirname "$tgz")" && sha256sum --check --status "$(basename "$tgz").sha256")
}

candidates=()
if [ -n "${FAULTDRILL_K8S_CACHE:-}" ]; then
  case "$FAULTDRILL_K8S_CACHE" in
    *.tgz) candidates+=("$FAULTDRILL_K8S_CACHE") ;;
    *) candidates+=("$FAULTDRILL_K8S_CACHE/$NAME") ;;
  esac
fi
dir=$(cd "$HERE/.." && pwd)
while [ "$dir" != / ]; do
  dir=$(dirname "$dir")
  candidates+=("$dir/shared/cache/$NAME")
done
candidates+=("$HOME/.cache/faultdrill/k8s/$NAME")

for tgz in "${candidates[@]}"; do
  if verified "$tgz"; then
    say "binaries: $tgz (sha256 verified)"
    exit 0
  fi
done

store=${FAULTDRILL_K8S_CACHE:-$HOME/.cache/faultdrill/k8s}
case "$store" in *.tgz) store=$(dirname "$store") ;; esac
say "no cached binaries (looked in: ${candidates[*]}); building them into $store (6-7 min)"
t0=$(date +%s)
bash "$HERE/build-k8s-binaries.sh" "$store"
verified "$store/$NAME" || { say "FAILED: the build left no verified $store/$NAME"; exit 1; }
say "built in $(( $(date +%s) - t0 )) s: $store/$NAME"
