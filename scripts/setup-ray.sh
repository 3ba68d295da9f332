#!/usr/bin/env bash
# System packages of the Ray Train platform (platform: ray), separate from the other
# platforms' setup: redis-server from Debian, for the embedded cluster's GCS fault
# tolerance (resources.ray.gcs_ft: redis; no service is started, faultdrill runs its own
# redis-server per run on the head node). Ray itself comes from PyPI with the package's
# extra: pip install 'faultdrill[ray]' (after torch==2.13.0). Idempotent; needs root.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  echo "redis-server: $(redis-server --version | head -n1)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup-ray: redis-server is missing and installing it needs root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends redis-server >/tmp/faultdrill-setup-ray.log 2>&1 \
  || { apt-get update >>/tmp/faultdrill-setup-ray.log 2>&1 \
       && apt-get install -y --no-install-recommends redis-server >>/tmp/faultdrill-setup-ray.log 2>&1; } \
  || { echo "setup-ray: could not install redis-server (see /tmp/faultdrill-setup-ray.log)" >&2; exit 1; }
# Debian's package may start its own service: faultdrill never uses it (it binds 6379 on
# the host); stop it so that the host keeps no daemon it did not ask for.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi
echo "redis-server: $(redis-server --version | head -n1)"
