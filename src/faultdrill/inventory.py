"""The checkpoint inventory: every checkpoint a run wrote, and whether it verifies now.

Built from the probe's ``ckpt_save`` events (id, step, path, sha256 at save time), so it
works for any training script that reports its saves; the plan's ``checkpoint.latest_file``
names the pointer file whose content is the published checkpoint id. For each checkpoint:
id, step, size, recorded and current sha256, whether it verifies now, whether it was pruned
by the keep policy, who wrote it (rank, pid, incarnation) and which incarnations loaded it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from faultdrill.timeline import Timeline

__all__ = ["sha256_file", "take_inventory"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _norm(digest: str) -> str:
    return digest.split(":", 1)[1] if ":" in digest else digest


def take_inventory(
    tl: Timeline, ckpt_dir: Path, latest_file: str, keep: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(one record per checkpoint, the latest pointer's state)."""
    saves = sorted(tl.of("probe", "ckpt_save"), key=lambda e: (int(e["step"]), e.mono))
    newest_ids = [str(e["id"]) for e in saves][-keep:]
    loaded_by: dict[str, list[int]] = {}
    for inc in tl.incarnations:
        for ld in inc.loads:
            if ld.kind == "ckpt_load":
                loaded_by.setdefault(str(ld["id"]), [])
                if inc.index not in loaded_by[str(ld["id"])]:
                    loaded_by[str(ld["id"])].append(inc.index)
    pointer: dict[str, Any] = {"file": latest_file, "target": None, "problem": None}
    if latest_file:
        try:
            pointer["target"] = (ckpt_dir / latest_file).read_text().strip() or None
        except OSError as exc:
            pointer["problem"] = f"cannot read {latest_file}: {exc.strerror}"
    records = []
    for e in saves:
        cid = str(e["id"])
        path = Path(str(e.get("path", "")))
        if not path.is_absolute():
            path = ckpt_dir / path
        rec: dict[str, Any] = {
            "id": cid,
            "step": int(e["step"]),
            "path": str(path),
            "sha256_recorded": _norm(str(e.get("sha256", ""))),
            "sha256_now": None,
            "size": None,
            "data_position": e.get("data_position"),
            "written_by": {
                "rank": e.get("rank"),
                "pid": e.get("pid"),
                "inc": tl.inc_of_pid(int(e.get("pid", -1))),
            },
            "loaded_by": loaded_by.get(cid, []),
            "latest": cid == pointer["target"],
        }
        if path.is_file():
            rec["size"] = path.stat().st_size
            rec["sha256_now"] = sha256_file(path)
            ok = rec["sha256_now"] == rec["sha256_recorded"]
            rec.update(
                state="present",
                verifies=ok,
                reason=None if ok else "sha256 differs from the one recorded at save",
            )
        elif cid not in newest_ids:
            rec.update(state="pruned", verifies=None, reason="removed by the keep policy")
        else:
            rec.update(state="missing", verifies=False, reason=f"{path} is missing")
        records.append(rec)
    if pointer["target"] and not any(r["latest"] for r in records):
        pointer["problem"] = f"{latest_file} names {pointer['target']!r}, which no save reported"
    return records, pointer
