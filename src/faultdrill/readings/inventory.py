"""The checkpoint inventory: every checkpoint a run wrote, and whether it verifies now.

Built from the probe's ``ckpt_save`` events (id, step, path, sha256 at save time), so it
works for any training script that reports its saves; the plan's ``checkpoint.latest_file``
names the pointer file that publishes a checkpoint. The pointer contract, the same for
every reader (:func:`read_pointer`): the first whitespace-separated token of the file is the
checkpoint id (the id ``checkpoint_saved`` reported); anything after it (a digest, say) is
the script's own business. For each checkpoint:
id, step, size, recorded and current sha256, whether it verifies now (against the sha256
recorded at save and, when the directory has a ``manifest.json`` with ``file``/``bytes``/
``sha256``, against that too), whether it was pruned by the keep policy, who wrote it
(rank, pid, incarnation), which incarnations loaded it, which refused it and why, and which
fault damaged it. Checkpoint directories found on disk that no save reported (a save
published before it was durable, or left half-written) are listed too, as ``unreported``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from faultdrill.records import CheckpointRecord, Inventory, Pointer, plain
from faultdrill.timeline import Timeline

if TYPE_CHECKING:
    from faultdrill.events import Event

__all__ = ["pointer_id", "read_pointer", "sha256_file", "take_inventory", "verify_dir"]

MANIFEST = "manifest.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_dir(ckpt_path: Path) -> tuple[bool | None, str]:
    """Whether a checkpoint directory verifies by its own ``manifest.json`` (``file``,
    ``bytes``, ``sha256``): (True, ""), (False, why), or (None, why) when it has no
    manifest to verify against."""
    if not ckpt_path.is_dir():
        return False, f"{ckpt_path.name}: missing directory"
    try:
        manifest = json.loads((ckpt_path / MANIFEST).read_text())
    except FileNotFoundError:
        return None, f"{ckpt_path.name}: no {MANIFEST} to verify against"
    except (OSError, ValueError) as exc:
        return False, f"{ckpt_path.name}: unreadable {MANIFEST} ({exc})"
    if not isinstance(manifest, dict):
        return False, f"{ckpt_path.name}: {MANIFEST} is not an object"
    state = ckpt_path / str(manifest.get("file", "state.pt"))
    if not state.is_file():
        return False, f"{ckpt_path.name}: missing {state.name}"
    size = state.stat().st_size
    if manifest.get("bytes") is not None and size != manifest["bytes"]:
        return False, f"{state.name} has {size} bytes, {MANIFEST} says {manifest['bytes']}"
    if manifest.get("sha256") and sha256_file(state) != _norm(str(manifest["sha256"])):
        return False, f"{state.name} sha256 differs from its {MANIFEST}"
    return True, ""


def pointer_id(text: str) -> str | None:
    """The checkpoint id a pointer file's text names: its first whitespace-separated token
    (``"step-10"`` and ``"step-10.pt 5f3a..."`` name ``step-10`` and ``step-10.pt``); None
    when the file is empty."""
    parts = text.split(maxsplit=1)
    return parts[0] if parts else None


def read_pointer(path: Path) -> str | None:
    """The checkpoint id the pointer file ``path`` names (:func:`pointer_id`), None when it
    is empty. Raises ``OSError`` (``FileNotFoundError`` when there is none)."""
    return pointer_id(path.read_text(errors="replace"))


def _step_in(name: str) -> int:
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits else 0


def _norm(digest: str) -> str:
    return digest.split(":", 1)[1] if ":" in digest else digest


@dataclass(frozen=True)
class _CheckpointHistory:
    """What the timeline says happened to each checkpoint id, as (mono, ...) entries: which
    incarnation loaded it, which refused it and why, which fault damaged it."""

    loads: dict[str, list[tuple[float, int]]]
    refusals: dict[str, list[tuple[float, int, Any]]]
    damages: dict[str, list[tuple[float, str]]]


class _Handling(TypedDict):
    """Who loaded, refused and damaged one checkpoint (part of its record)."""

    loaded_by: list[int]
    rejected_by: list[dict[str, Any]]
    damaged_by: str | None


class _PointerState(TypedDict):
    file: str
    target: str | None
    problem: str | None


def take_inventory(
    tl: Timeline, ckpt_dir: Path, latest_file: str, keep: int
) -> tuple[list[CheckpointRecord], Pointer]:
    """(one record per checkpoint, the latest pointer's state)."""
    saves = sorted(tl.of("probe", "ckpt_save"), key=lambda e: (int(e["step"]), e.mono))
    history = _checkpoint_history(tl)
    pointer = _latest_pointer(ckpt_dir, latest_file)
    records = _saved_records(tl, saves, ckpt_dir, keep, history, pointer["target"])
    reported = {r.id for r in records}
    records += _unreported_records(ckpt_dir, reported, history, pointer["target"])
    if pointer["target"] and not any(r.latest and r.state != "unreported" for r in records):
        pointer["problem"] = f"{latest_file} names {pointer['target']!r}, which no save reported"
    return records, Pointer.model_validate(pointer)


def _checkpoint_history(tl: Timeline) -> _CheckpointHistory:
    """Every load, refusal and damage the timeline records, by checkpoint id."""
    loads: dict[str, list[tuple[float, int]]] = {}
    refusals: dict[str, list[tuple[float, int, Any]]] = {}
    for inc in tl.incarnations:
        for ld in inc.loads:
            if ld.kind == "ckpt_load":
                loads.setdefault(str(ld["id"]), []).append((ld.mono, inc.index))
            for rej in ld.get("rejected") or []:
                if isinstance(rej, dict):
                    refusals.setdefault(str(rej.get("id")), []).append(
                        (ld.mono, inc.index, rej.get("reason"))
                    )
    damages: dict[str, list[tuple[float, str]]] = {}
    for e in tl.of("fault", "injected"):
        if e.get("ckpt_id"):
            damages.setdefault(str(e["ckpt_id"]), []).append(
                (e.mono, f"{e.get('fault')} ({e.get('damage')})")
            )
    return _CheckpointHistory(loads=loads, refusals=refusals, damages=damages)


def _during(history: _CheckpointHistory, cid: str, lo: float, hi: float) -> _Handling:
    """Who loaded, refused and damaged checkpoint ``cid`` in ``[lo, hi)``: a checkpoint
    record's ``loaded_by``, ``rejected_by`` and ``damaged_by`` (the first damage)."""
    loaded: list[int] = []
    for mono, inc in history.loads.get(cid, []):
        if lo <= mono < hi and inc not in loaded:
            loaded.append(inc)
    refused: list[dict[str, Any]] = []
    for mono, inc, reason in history.refusals.get(cid, []):
        if lo <= mono < hi and all(r["inc"] != inc for r in refused):
            refused.append({"inc": inc, "reason": reason})
    hit = [what for mono, what in history.damages.get(cid, []) if lo <= mono < hi]
    return {"loaded_by": loaded, "rejected_by": refused, "damaged_by": hit[0] if hit else None}


def _saved_again_at(saves: list[Event]) -> dict[int, float]:
    """Index in ``saves`` -> when the same id was next saved again (a redone step); only
    the saves that were."""
    later: dict[int, float] = {}
    for i, e in enumerate(saves):
        nxt = [o.mono for o in saves[i + 1 :] if str(o["id"]) == str(e["id"]) and o.mono > e.mono]
        if nxt:
            later[i] = min(nxt)
    return later


def _latest_pointer(ckpt_dir: Path, latest_file: str) -> _PointerState:
    """The pointer's state: its ``file``, the ``target`` id it names (None when there is no
    pointer file configured, it is empty or unreadable) and a ``problem`` reading it."""
    pointer: _PointerState = {"file": latest_file, "target": None, "problem": None}
    if latest_file:
        try:
            pointer["target"] = read_pointer(ckpt_dir / latest_file)
        except OSError as exc:
            pointer["problem"] = f"cannot read {latest_file}: {exc.strerror}"
    return pointer


def _saved_records(
    tl: Timeline,
    saves: list[Event],
    ckpt_dir: Path,
    keep: int,
    history: _CheckpointHistory,
    target: str | None,
) -> list[CheckpointRecord]:
    """One record per reported save, in ``saves`` order, with its state now."""
    newest_ids = [str(e["id"]) for e in saves][-keep:]
    later = _saved_again_at(saves)
    # A layout whose checkpoints carry manifests: one that lost its manifest does not verify.
    uses_manifest = any(
        (Path(str(e.get("path", ""))).parent / MANIFEST).is_file()
        or (ckpt_dir / str(e["id"]) / MANIFEST).is_file()
        for e in saves
    )
    records = []
    for i, e in enumerate(saves):
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
            **_during(history, cid, e.mono, later.get(i, float("inf"))),
            "latest": cid == target and i not in later,
        }
        if i in later:
            rec.update(
                state="overwritten",
                verifies=None,
                reason="saved again later under the same id (a redone step)",
            )
        elif path.is_file():
            _verify_present(rec, path, uses_manifest)
        elif cid not in newest_ids and not rec["damaged_by"]:
            rec.update(state="pruned", verifies=None, reason="removed by the keep policy")
        else:
            rec.update(state="missing", verifies=False, reason=f"{path} is missing")
        records.append(CheckpointRecord.model_validate(rec))
    return records


def _verify_present(rec: dict[str, Any], path: Path, uses_manifest: bool) -> None:
    """Fill in ``rec`` for a checkpoint file that is on disk: its size, its sha256 now, and
    whether it verifies against the recorded sha256 and its directory's manifest (a missing
    manifest fails when ``uses_manifest``, the other checkpoints having one)."""
    rec["size"] = path.stat().st_size
    rec["sha256_now"] = sha256_file(path)
    ok = rec["sha256_now"] == rec["sha256_recorded"]
    by_manifest, why = verify_dir(path.parent)
    if by_manifest is None and uses_manifest:
        by_manifest, why = False, f"no {MANIFEST} (the other checkpoints have one)"
    rec.update(
        state="present",
        verifies=ok and by_manifest is not False,
        manifest_verifies=by_manifest,
        reason=None
        if ok and by_manifest is not False
        else ("sha256 differs from the one recorded at save" if not ok else why),
    )


def _unreported_records(
    ckpt_dir: Path, reported: set[str], history: _CheckpointHistory, target: str | None
) -> list[CheckpointRecord]:
    """Records for the checkpoint directories under ``ckpt_dir`` that no save reported,
    skipping hidden ones and empty ones without a manifest."""
    if not ckpt_dir.is_dir():
        return []
    records = []
    for child in sorted(ckpt_dir.iterdir()):
        if child.name in reported or child.name.startswith(".") or not child.is_dir():
            continue
        ok_dir, why = verify_dir(child)
        if ok_dir is None and not any(child.iterdir()):
            continue
        records.append(
            CheckpointRecord.model_validate(
                {
                    "id": child.name,
                    "step": _step_in(child.name),
                    "path": str(child),
                    "state": "unreported",
                    "verifies": ok_dir,
                    "manifest_verifies": ok_dir,
                    "reason": "no save reported it" + (f"; {why}" if why else ""),
                    "written_by": None,
                    **_during(history, child.name, float("-inf"), float("inf")),
                    "latest": child.name == target,
                }
            )
        )
    return records


_EVENT_KEYS = ("ts", "mono", "src", "kind", "task")


def inventory_summary(tl: Timeline) -> Inventory:
    """The recorded inventory of one item, for report.json: the pointer at the end, one
    record per checkpoint, the saves that failed, and the pointer as storage faults saw it.
    Read from events only, so a recorded run can be re-judged offline."""
    latest = tl.first("harness", "ckpt_latest")
    return Inventory.model_validate(
        plain(
            {
                "taken": latest is not None,
                "latest": {k: latest.get(k) for k in ("file", "target", "problem")}
                if latest
                else None,
                "checkpoints": [
                    {k: v for k, v in e.to_json().items() if k not in _EVENT_KEYS}
                    for e in tl.of("harness", "ckpt_inventory")
                ],
                "failed_saves": [
                    {
                        "step": e.get("step"),
                        "error": e.get("error"),
                        "errno": e.get("errno"),
                        "rank": e.get("rank"),
                        "duration_s": e.get("duration_s"),
                    }
                    for e in tl.of("probe", "ckpt_save_failed")
                ],
                "pointer_observed": [
                    {
                        "when": e.get("when"),
                        "latest": e.get("latest"),
                        "verifies": e.get("latest_verifies"),
                        "problem": e.get("latest_problem"),
                    }
                    for e in tl.of("fault", "storage_observed")
                ],
            }
        )
    )
