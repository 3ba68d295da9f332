#!/usr/bin/env bash
# The system packages faultdrill's drills need, on a Debian or Ubuntu machine.
#
#   scripts/setup-system.sh demo    python3-venv (the README's venv), iptables (link faults),
#                                   fuse + libfuse2 (storage outage, unreachable mode)
#   scripts/setup-system.sh tests   the same, plus chromium (the HTML report's browser test),
#                                   and as root the Slurm, Ray and Kubernetes drills' packages
#
# As root: installs what is missing (apt-get; about a minute on a fresh machine) and exits 1
# if something is still missing afterwards. As a normal user: says exactly what is missing
# and the command that installs it, and exits 0 (the demo then runs what it can without
# root; the tests that need root skip).
# Used by both commands of the README and by .ci/run.
set -uo pipefail

what="${1:-demo}"
case "$what" in
  demo | tests) ;;
  *) echo "usage: $0 [demo|tests]" >&2; exit 2 ;;
esac

log="${TMPDIR:-/tmp}/faultdrill-setup-apt.log"

# The tests also drill the embedded Slurm, Ray and Kubernetes clusters: as root, each
# platform's own script installs its packages first (setup-slurm.sh, setup-ray.sh,
# setup-kubernetes.sh; idempotent, seconds when present). FAULTDRILL_SETUP_PLATFORMS names
# which (the script's own tests set it empty).
if [ "$what" = tests ] && [ "$(id -u)" = 0 ]; then
  here="$(cd "$(dirname "$0")" && pwd)"
  for platform in ${FAULTDRILL_SETUP_PLATFORMS-slurm ray kubernetes}; do
    platform_log="${TMPDIR:-/tmp}/faultdrill-setup-$platform.log"
    if ! bash "$here/setup-$platform.sh" >"$platform_log" 2>&1; then
      echo "faultdrill setup: the $platform drills' packages could not be installed:" >&2
      tail -n 20 "$platform_log" >&2
      exit 1
    fi
    echo "faultdrill setup: packages for the $platform drills present"
  done
fi

# Where else to look (a normal user's PATH may lack sbin); overridden by the tests.
sbin_dirs="${FAULTDRILL_SETUP_SBIN-/usr/sbin /sbin}"
lib_dirs="${FAULTDRILL_SETUP_LIBDIRS-/lib /usr/lib /lib64 /usr/lib64 /lib/*-linux-gnu /usr/lib/*-linux-gnu}"

have() {
  command -v "$1" >/dev/null 2>&1 && return 0
  local d
  for d in $sbin_dirs; do [ -x "$d/$1" ] && return 0; done
  return 1
}

have_libfuse2() {
  local d
  for d in $lib_dirs; do [ -e "$d/libfuse.so.2" ] && return 0; done
  return 1
}

# The Debian package names of what is missing, space-separated.
missing_packages() {
  local out=()
  if ! have python3; then
    out+=("python3" "python3-venv")
  elif ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    out+=("python3-venv")  # Debian's python3 comes without ensurepip
  fi
  have iptables || out+=("iptables")
  have fusermount || out+=("fuse")
  have_libfuse2 || out+=("libfuse2")
  if [ "$what" = tests ] && ! have chromium && ! have chromium-browser; then
    out+=("chromium")
  fi
  echo "${out[@]:-}"
}

why() {
  case "$1" in
    iptables) echo "iptables: link faults (link-loss, partition, control-plane cut)" ;;
    fuse) echo "fuse (fusermount): the storage outage's unreachable mode" ;;
    libfuse2) echo "libfuse2: the storage outage's unreachable mode (fusepy loads it)" ;;
    chromium) echo "chromium: the HTML report's browser test" ;;
    python3) echo "python3: faultdrill itself (3.10 or newer)" ;;
    python3-venv) echo "python3-venv: the virtual environment the README makes" ;;
  esac
}

need=$(missing_packages)
if [ -z "$need" ]; then
  echo "faultdrill setup: system packages for the $what present"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "faultdrill setup: missing for the $what (not root, so not installed):"
  for p in $need; do echo "  - $(why "$p")"; done
  echo "  install them with: sudo apt-get install -y --no-install-recommends $need"
  echo "  (without them, and without root, the drills that need them are left out and said)"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "faultdrill setup: missing $need and no apt-get here; install them with your" \
       "distribution's package manager" >&2
  exit 1
fi

packages=()
for p in $need; do
  if [ "$p" = chromium ] && ! apt-cache show chromium >/dev/null 2>&1; then
    packages+=("chromium-browser")  # Ubuntu's name
  else
    packages+=("$p")
  fi
done
echo "faultdrill setup: installing ${packages[*]} (log: $log)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${packages[@]}" >"$log" 2>&1; then
  apt-get update >>"$log" 2>&1
  apt-get install -y --no-install-recommends "${packages[@]}" >>"$log" 2>&1
fi

still=$(missing_packages)
if [ -n "$still" ]; then
  echo "faultdrill setup: still missing after apt-get: $still (see $log)" >&2
  for p in $still; do echo "  - $(why "$p")" >&2; done
  exit 1
fi
echo "faultdrill setup: installed ${packages[*]}"
