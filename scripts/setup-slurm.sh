#!/usr/bin/env bash
# System packages for the Slurm platform's embedded cluster (`platform: slurm` with
# `slurm: {embedded: true}`, tests/test_slurm_*.py): Slurm 22.05's daemons and clients and
# munge, from Debian. A few MB, seconds. Nothing is started or enabled: faultdrill brings
# its own munged, slurmctld and slurmd up for each drill, with its own files, and takes
# them down after it. Idempotent; needs root. (A real cluster needs none of this on the
# machine that runs faultdrill beyond slurm-client: sbatch, squeue, scontrol, scancel.)
set -euo pipefail

tools=(slurmctld slurmd sbatch srun scontrol squeue scancel munged)
missing=()
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "setup-slurm.sh: missing ${missing[*]}; run as root to install them" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
packages=(slurmctld slurmd slurm-client munge)
# No service may start at install time (on a machine with an init system, munge and
# slurmctld would): the drills start their own daemons.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y --no-install-recommends "${packages[@]}" \
  || { apt-get update && apt-get install -y --no-install-recommends "${packages[@]}"; }
