#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 from Debian 12's
# `kubernetes` source package, offline from any other registry, and pack them as
#   OUT_DIR/kubernetes-1.20.2-linux-amd64-bin.tgz  (+ .sha256 beside it)
#
# usage: scripts/build-k8s-binaries.sh OUT_DIR [WORK_DIR]
#
# Steps (measured in ../shared/notes/kubernetes.md, sections 1-3):
#   1. apt-get install golang-1.19-go rsync (rsync: k8s' make copies binaries with it)
#   2. the source through a PRIVATE apt configuration (deb-src lists in WORK_DIR/apt; the
#      system's apt configuration and lists are never changed)
#   3. the reflect2 patch (vendored modern-go/reflect2 v1.0.1 segfaults under Go >= 1.18)
#   4. make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler"
#      (plain `go build` fails: module mode wants the network, GOPATH mode lacks the
#      generated openapi package); 6-7 min of two cores, 1.4 GB RSS, ~2.4 GB disk
#   5. tar + sha256 into OUT_DIR; WORK_DIR is removed unless KEEP_WORK=1
# Exit status: 0 built, 1 failed (the failing step is named on stderr).
set -euo pipefail

VERSION=1.20.2
OUT_DIR=${1:?usage: $0 OUT_DIR [WORK_DIR]}
HERE=$(cd "$(dirname "$0")" && pwd)
PATCH="$HERE/kubernetes-reflect2-go119.patch"
W=${2:-$(mktemp -d -t faultdrill-k8s-build.XXXXXX)}
NAME="kubernetes-$VERSION-linux-amd64-bin.tgz"

step() { echo "[build-k8s] $(date +%T) $*" >&2; }
fail() { echo "[build-k8s] FAILED: $*" >&2; exit 1; }
cleanup() { [ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$W"; }
trap cleanup EXIT

[ -f "$PATCH" ] || fail "patch $PATCH is missing"
[ "$(id -u)" = 0 ] || fail "installing the Go toolchain needs root (apt-get)"
mkdir -p "$OUT_DIR" "$W"

step "1/5 packages: golang-1.19-go rsync"
if ! command -v /usr/lib/go-1.19/bin/go >/dev/null || ! command -v rsync >/dev/null; then
  apt-get install -y --no-install-recommends golang-1.19-go rsync >"$W/apt-install.log" 2>&1 \
    || { apt-get update >>"$W/apt-install.log" 2>&1 \
         && apt-get install -y --no-install-recommends golang-1.19-go rsync >>"$W/apt-install.log" 2>&1; } \
    || fail "apt-get install golang-1.19-go rsync (see $W/apt-install.log)"
fi

step "2/5 source: deb-src through a private apt configuration in $W/apt"
mkdir -p "$W/apt/parts" "$W/apt/lists/partial" "$W/apt/cache/archives/partial" "$W/src"
SOURCES=/etc/apt/sources.list.d/debian.sources
[ -f "$SOURCES" ] || fail "$SOURCES not found (Debian 12 deb822 sources expected)"
sed 's/^Types: deb$/Types: deb-src/' "$SOURCES" >"$W/apt/parts/src.sources"
A=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$W/apt/parts"
   -o "Dir::State::Lists=$W/apt/lists" -o "Dir::Cache=$W/apt/cache")
apt-get "${A[@]}" update >"$W/apt-src.log" 2>&1 || fail "apt-get update (deb-src), see $W/apt-src.log"
(cd "$W/src" && apt-get "${A[@]}" source kubernetes >>"$W/apt-src.log" 2>&1) \
  || fail "apt-get source kubernetes, see $W/apt-src.log"
SRC=$(find "$W/src" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -1)
[ -n "$SRC" ] || fail "no kubernetes-* source directory in $W/src"

step "3/5 patch: reflect2 for Go >= 1.18"
(cd "$SRC" && patch -p1 --forward <"$PATCH" >"$W/patch.log" 2>&1) || fail "patch, see $W/patch.log"

step "4/5 make (6-7 min on 2 cores)"
(cd "$SRC" && PATH=/usr/lib/go-1.19/bin:$PATH \
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" \
  >"$W/make.log" 2>&1) || { tail -20 "$W/make.log" >&2; fail "make, see $W/make.log"; }
BIN="$SRC/_output/bin"
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$BIN/$b" ] || fail "$BIN/$b was not built"
  "$BIN/$b" --version 2>&1 | grep -q "v$VERSION" || fail "$b --version is not v$VERSION"
done

step "5/5 pack: $OUT_DIR/$NAME"
tmp="$OUT_DIR/.$NAME.part"
tar -C "$BIN" -czf "$tmp" ./kube-apiserver ./kube-controller-manager ./kube-scheduler
mv "$tmp" "$OUT_DIR/$NAME"
(cd "$OUT_DIR" && sha256sum "$NAME" >"$NAME.sha256")
step "done: $(cat "$OUT_DIR/$NAME.sha256")"
