"""Replay: re-run a bundle's scenarios on the current environment, by another operator.

The methodology asks that the recovery be re-enacted once by someone other than the
original implementer; a recovery only its author can perform is not a stable hand-over.
:func:`replay_bundle` verifies and unpacks the bundle, runs the baseline and the chosen
scenarios of the bundle's plan (unchanged: same digest) into a new run directory, records
the new operator in that run's responsibility dossier (with the original responsibility
beside it), and compares each item with the original: verdict, recovery class, the
control's caught flag, the resume point, and the detection and recovery times within a
stated band. The comparison lands in ``replay.json`` and in the reports.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill.archive.diff import Band, load_report
from faultdrill.errors import DrillError

__all__ = ["ReplayResult", "compare_item", "replay_bundle"]


def _resume(s: dict[str, Any]) -> dict[str, Any] | None:
    r = (s.get("questions") or {}).get("resumed_from")
    return None if not r else {k: r.get(k) for k in ("checkpoint", "step", "data_position")}


def compare_item(orig: dict[str, Any], new: dict[str, Any], band: Band) -> dict[str, Any]:
    """Does the replayed item reproduce the original? Each difference in words."""
    diffs: list[str] = []
    for key in ("verdict", "recovery_class"):
        if orig.get(key) != new.get(key):
            diffs.append(f"{key}: original {orig.get(key)}, replay {new.get(key)}")
    if orig.get("control") and orig.get("caught") != new.get("caught"):
        diffs.append(f"caught: original {orig.get('caught')}, replay {new.get('caught')}")
    ro, rn = _resume(orig), _resume(new)
    if ro != rn:
        diffs.append(f"resume point: original {ro}, replay {rn}")
    to, tn = orig.get("times") or {}, new.get("times") or {}
    times = {}
    for key in ("detect_s", "recover_s"):
        ok = band.within(to.get(key), tn.get(key))
        times[key] = {"original": to.get(key), "replay": tn.get(key), "within_band": ok}
        if not ok:
            diffs.append(
                f"{key}: original {to.get(key)}, replay {tn.get(key)} (outside {band.describe()})"
            )
    return {
        "id": orig.get("id"),
        "control": bool(orig.get("control")),
        "verdict": [orig.get("verdict"), new.get("verdict")],
        "recovery_class": [orig.get("recovery_class"), new.get("recovery_class")],
        "resume": [ro, rn],
        "times": times,
        "matches": not diffs,
        "differences": diffs,
    }


@dataclass
class ReplayResult:
    run_dir: Path
    operator: str
    bundle: str
    band: Band
    items: list[dict[str, Any]] = field(default_factory=list)
    baseline: list[str | None] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return (
            bool(self.items)
            and all(i["matches"] for i in self.items)
            and (self.baseline[0] == self.baseline[1])
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "operator": self.operator,
            "bundle": self.bundle,
            "band": {"abs_s": self.band.abs_s, "rel": self.band.rel, "text": self.band.describe()},
            "baseline_verdict": self.baseline,
            "matches": self.matches,
            "items": self.items,
        }

    def lines(self) -> list[str]:
        out = [f"replay by {self.operator} of {self.bundle} -> {self.run_dir}"]
        if self.baseline[0] != self.baseline[1]:
            out.append(f"  baseline: original {self.baseline[0]}, replay {self.baseline[1]}")
        for i in self.items:
            head = "matches" if i["matches"] else "DIFFERS"
            out.append(
                f"  {i['id']}: {head} (verdict {i['verdict'][0]} -> {i['verdict'][1]}, "
                f"class {i['recovery_class'][0]} -> {i['recovery_class'][1]})"
            )
            out += [f"    {d}" for d in i["differences"]]
        out.append(f"times compared within {self.band.describe()}")
        out.append(
            "result: " + ("outcome matches the original" if self.matches else "outcome differs")
        )
        return out


def _record_operator(
    run_dir: Path, operator: str, bundle: str, manifest: dict[str, Any], original: dict[str, Any]
) -> None:
    path = run_dir / "baseline" / "dossier.json"
    dossier = json.loads(path.read_text()) if path.exists() else {}
    resp = dict(dossier.get("responsibility") or {})
    resp["replay_operator"] = operator
    dossier["responsibility"] = resp
    dossier["replay"] = {
        "operator": operator,
        "bundle": bundle,
        "bundle_manifest_sha256": manifest.get("manifest_sha256"),
        "original_run": manifest.get("source_run"),
        "original_plan_digest": original.get("plan_digest"),
        "original_responsibility": (original.get("plan") or {}).get("responsibility"),
        "replayed_at": dt.datetime.now(tz=dt.timezone.utc).isoformat(timespec="seconds"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dossier, indent=2) + "\n")


def _recorded(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's scenario entries that name an id (others cannot be replayed)."""
    items = report.get("scenarios")
    if not isinstance(items, list):
        return []
    return [s for s in items if isinstance(s, dict) and isinstance(s.get("id"), str)]


def replay_bundle(
    source: Path,
    operator: str,
    out: Path,
    *,
    scenarios: list[str] | None = None,
    lang: str = "en",
    band: Band | None = None,
    verify: bool = True,
    report: Callable[[str, str], None] = lambda _i, _s: None,
    on_item: Callable[[str, str, Any], None] = lambda _i, _k, _v: None,
) -> ReplayResult:
    """Replay ``source`` (a bundle archive, or a run directory) into the new run ``out``.

    ``scenarios`` limits the items (ids of scenarios or controls); by default every item
    the original run recorded is replayed. Raises DrillError on bad input (unknown id, a
    bundle that fails verification, an empty operator name).
    """
    from faultdrill.archive.bundle import extract_bundle, verify_bundle
    from faultdrill.engine.run import run_plan
    from faultdrill.judge.evaluate import load_run_plan
    from faultdrill.report import write_reports
    from faultdrill.report.i18n import check_lang

    check_lang(lang)
    band = band or Band()
    if not operator.strip():
        raise DrillError("--operator: name the person replaying the drill")
    if not source.exists():
        raise DrillError(
            f"{source}: no such bundle or run directory; give an archive made by "
            "`faultdrill bundle` or a run directory"
        )
    with tempfile.TemporaryDirectory(prefix="faultdrill-replay-") as tmp:
        manifest: dict[str, Any] = {}
        if source.is_dir():
            orig_dir = source
            manifest = {"source_run": str(source.resolve())}
        else:
            if verify:
                res = verify_bundle(source)
                manifest = dict(res.manifest)
                manifest["manifest_sha256"] = res.manifest_sha256
            orig_dir = extract_bundle(source, Path(tmp), verify=verify)
        if not (orig_dir / "report.json").exists():
            raise DrillError(f"{source}: no report.json; not a faultdrill run or bundle")
        original, _ = load_report(orig_dir, verify=False)  # RunDirError if it is not one
        plan = load_run_plan(orig_dir)
        known = {s.id for s in plan.scenarios()} | {c.id for c in plan.controls}
        recorded = [s["id"] for s in _recorded(original)]
        wanted = list(scenarios) if scenarios else recorded
        unknown = sorted(set(wanted) - known)
        if unknown:
            raise DrillError(
                f"--scenario: unknown id(s) {', '.join(unknown)}; the bundle's plan has: "
                f"{', '.join(sorted(known))}"
            )
        if not wanted:
            raise DrillError(f"{source}: the original run recorded no scenario to replay")
        plan_src = orig_dir / "plan.yaml"
        result = run_plan(
            plan,
            out,
            source=plan_src if plan_src.exists() else None,
            only=set(wanted),
            controls=True,
            report=report,
            on_item=on_item,
        )
    _record_operator(out, operator, str(source), manifest, original)
    new = json.loads(json.dumps(result.to_json(), default=str))
    by_id = {s["id"]: s for s in new.get("scenarios") or []}
    orig_by_id = {s["id"]: s for s in _recorded(original)}
    rr = ReplayResult(
        out,
        operator,
        str(source),
        band,
        baseline=[
            (original.get("baseline") or {}).get("verdict"),
            (new.get("baseline") or {}).get("verdict"),
        ],
    )
    for sid in wanted:
        o, n = orig_by_id.get(sid), by_id.get(sid)
        if o is None:
            rr.items.append(
                {
                    "id": sid,
                    "matches": False,
                    "differences": ["not in the original run"],
                    "verdict": [None, (n or {}).get("verdict")],
                    "recovery_class": [None, None],
                }
            )
        elif n is None:
            skipped = {s["id"]: s.get("reason") for s in new.get("skipped") or []}
            rr.items.append(
                {
                    "id": sid,
                    "matches": False,
                    "differences": [f"not run in the replay: {skipped.get(sid, 'unknown reason')}"],
                    "verdict": [o.get("verdict"), None],
                    "recovery_class": [o.get("recovery_class"), None],
                }
            )
        else:
            rr.items.append(compare_item(o, n, band))
    (out / "replay.json").write_text(json.dumps(rr.to_json(), indent=2, default=str) + "\n")
    write_reports(result, lang)
    return rr
