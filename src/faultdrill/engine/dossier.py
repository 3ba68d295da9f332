"""The parts of the baseline's dossiers that are measured on this machine, not planned.

* the data dossier's **access identity** (declared by the plan, and the identity the job's
  replicas reported running as) and **change record**: the content digest of the plan's
  ``data.path`` before the baseline, after it and after the last item, and the data digests
  the job reported, so that a drill that changed its data is seen;
* the resource dossier's **devices** (declared, and what the host has), **quotas** (what
  the plan allows, and the cgroup limits the harness runs under) and **scheduling result**
  (which node got which rank, per incarnation: :func:`faultdrill.judge.dossier.scheduling_result`).

Reading files and ``/proc``/``/sys`` only; every problem becomes a ``problem`` field, never
an exception.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.judge.dossier import (
    access_identities,
    reported_data_digests,
    scheduling_result,
)
from faultdrill.plan.source import file_kind
from faultdrill.safepath import UnsafePathError, open_named

if TYPE_CHECKING:
    from faultdrill.plan import Plan
    from faultdrill.timeline import Timeline

__all__ = [
    "amend_change_record",
    "data_dossier",
    "devices",
    "quotas",
    "resource_extras",
    "snapshot_record",
    "tree_digest",
]


def tree_digest(path: Path) -> dict[str, Any]:
    """sha256 over a file's bytes, or over a directory's files (relative path, NUL, the
    file's sha256, newline; sorted by path); with the number of files and bytes."""
    if not path.is_dir():
        # opened as a regular file only: a FIFO at data.path (or put there since) is said,
        # never waited on
        try:
            f = open_named(path)
        except FileNotFoundError:
            return {"sha256": None, "files": 0, "bytes": 0, "problem": f"{path}: no such file"}
        except UnsafePathError:
            return {"sha256": None, "files": 0, "bytes": 0, "problem": f"{path} {file_kind(path)}"}
        h = hashlib.sha256()
        size = 0
        with f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
                size += len(block)
        return {"sha256": h.hexdigest(), "files": 1, "bytes": size}
    outer = hashlib.sha256()
    files = size = 0
    for sub in sorted(p for p in path.rglob("*") if p.is_file()):
        inner = tree_digest(sub)
        outer.update(f"{sub.relative_to(path)}\0{inner['sha256']}\n".encode())
        files += 1
        size += int(inner["bytes"])
    return {"sha256": outer.hexdigest(), "files": files, "bytes": size}


def snapshot_record(plan: Plan, when: str) -> dict[str, Any]:
    """The data snapshot's state now: the content digest of ``data.path`` (if the plan
    names one), labelled ``when``."""
    rec: dict[str, Any] = {
        "when": when,
        "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if not plan.data.path:
        rec["sha256"] = None
        rec["note"] = "the plan names no data path to hash (data.path)"
        return rec
    try:
        rec.update(tree_digest(Path(plan.data.path).expanduser()))
    except OSError as exc:
        rec.update(sha256=None, problem=f"{plan.data.path}: {exc.strerror or exc}")
    return rec


def data_dossier(
    plan: Plan, tl: Timeline | None, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any]:
    """The data dossier: the plan's data section, the access identity (declared, and as the
    replicas ran), and the change record (before and after the baseline)."""
    reported = reported_data_digests(tl) if tl is not None else []
    return {
        **plan.data.model_dump(mode="json"),
        "access_identity": {
            "declared": plan.data.access or None,
            "observed": [a.to_json() for a in access_identities(tl)] if tl is not None else [],
        },
        "change_record": {
            "declared_digest": plan.data.digest or None,
            "path": plan.data.path or None,
            "snapshots": [r for r in (before, after) if r is not None],
            "reported_by_job": {"baseline": reported},
            "changed": _changed([r for r in (before, after) if r is not None], [reported]),
        },
    }


def _changed(snapshots: list[dict[str, Any]], reported: list[list[str]]) -> bool | None:
    """True when the hashed path or the job's reported digest differ over the drill; None
    when there is nothing to compare."""
    digests = [s.get("sha256") for s in snapshots if s.get("sha256")]
    seen = {d for r in reported for d in r}
    if len(digests) < 2 and not seen:
        return None
    return len(set(digests)) > 1 or len(seen) > 1


def amend_change_record(
    plan: Plan, dossier_path: Path, timelines: Mapping[str, Timeline | None]
) -> None:
    """After the last item: add the data snapshot's state then, and the data digests every
    item's replicas reported, to the dossier's change record (a no-op without a dossier)."""
    if not dossier_path.exists():
        return
    dossier = json.loads(dossier_path.read_text())
    record = dossier.get("data", {}).get("change_record")
    if record is None:
        return
    record["snapshots"].append(snapshot_record(plan, "after the last item"))
    record["reported_by_job"] = {
        item: reported_data_digests(tl) for item, tl in timelines.items() if tl is not None
    }
    record["changed"] = _changed(record["snapshots"], list(record["reported_by_job"].values()))
    dossier_path.write_text(json.dumps(dossier, indent=2) + "\n")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def devices(declared: str) -> dict[str, Any]:
    """The devices the plan declares and what this host has (CPUs, memory, GPUs)."""
    mem = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    gpus = sorted(p.name for p in Path("/dev").glob("nvidia[0-9]*"))
    return {
        "declared": declared,
        "host_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "memory_bytes": mem,
        "gpus": gpus,
    }


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 directory, when the unified hierarchy is mounted."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        if line.startswith("0::"):
            path = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            return path if path.is_dir() else None
    return None


def quotas(plan: Plan) -> dict[str, Any]:
    """What the plan allows the job (nodes, processes, spares, restarts) and the limits the
    harness itself runs under (cgroup v2 ``cpu.max``, ``memory.max``, ``pids.max``: the
    job's processes inherit them unless the platform sets its own)."""
    res = plan.resources
    group = _own_cgroup()
    limits = {
        name: _read(str(group / name)) if group is not None else None
        for name in ("cpu.max", "memory.max", "pids.max")
    }
    return {
        "nodes": res.nodes,
        "min_nodes": res.min_nodes or res.nodes,
        "procs_per_node": res.procs_per_node,
        "spares": res.spares,
        "max_restarts": res.max_restarts,
        "harness_cgroup": str(group) if group is not None else None,
        "harness_limits": limits,
    }


def resource_extras(plan: Plan, tl: Timeline | None) -> dict[str, Any]:
    """The resource dossier's measured part: devices, quotas, scheduling result."""
    return {
        "devices": devices(plan.resources.devices),
        "quotas": quotas(plan),
        "scheduling": [i.to_json() for i in scheduling_result(tl)] if tl is not None else [],
    }
