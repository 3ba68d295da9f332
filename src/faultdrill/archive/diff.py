"""Regression diff of two recorded runs (or bundles): what got worse between A and B.

Typical use: the same plan before and after a platform upgrade. Per scenario and control:
verdict changes, recovery-class changes, resume-point changes, detection and recovery time
changes (judged against a stated band: times are observations, not a service level), and
findings that are new in B. A *regression* is anything that makes B prove less than A:

* a scenario's verdict got worse (pass → retest → fail), or its recovery class got worse;
* a negative control that A caught is missed in B;
* B resumed from scratch where A resumed from a checkpoint;
* a scenario or control run in A is not run in B (lost coverage);
* the baseline got worse;
* with ``gate_times``: a detection/recovery time outside the band.

``faultdrill diff A B`` exits 1 when there is a regression, so it can gate a pipeline.
Both sides are read from their ``report.json`` (a bundle is verified first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill.errors import RunDirError

__all__ = ["Band", "DiffResult", "ItemDiff", "diff_reports", "load_report"]

_VERDICT_RANK = {"pass": 0, "retest": 1, "fail": 2}
_CLASS_RANK = {"automatic": 0, "manual-confirmation": 1, "manual-restart": 2, "unrecoverable": 3}
TIME_KEYS = ("detect_s", "ready_s", "recover_s")


@dataclass(frozen=True)
class Band:
    """Two times agree when they differ by at most ``max(abs_s, rel * first)``."""

    abs_s: float = 3.0
    rel: float = 0.5

    def within(self, a: float | None, b: float | None) -> bool:
        if a is None or b is None:
            return a is None and b is None
        return abs(b - a) <= max(self.abs_s, self.rel * abs(a))

    def describe(self) -> str:
        return f"±{self.abs_s:g} s or ±{self.rel * 100:g}%, whichever is larger"


def load_report(path: Path, *, verify: bool = True) -> tuple[dict[str, Any], str]:
    """(report.json data, a label) of a run directory, a bundle archive or a report.json."""
    if path.is_dir():
        rp = path / "report.json"
        if not rp.exists():
            raise RunDirError(
                f"{path}: no report.json; is this a faultdrill run directory? "
                f"(`faultdrill check {path}` judges a recorded run)"
            )
        text = rp.read_bytes()
    elif path.is_file() and path.name.endswith((".tar.gz", ".tgz", ".tar")):
        from faultdrill.archive.bundle import read_member, verify_bundle

        if verify:
            res = verify_bundle(path)
            if not res.ok:
                raise RunDirError(
                    "bundle failed verification; refusing to compare it "
                    "(--no-verify to compare anyway):\n" + "\n".join(res.lines())
                )
        text = read_member(path, "report.json")
    elif path.is_file():
        text = path.read_bytes()
    else:
        raise RunDirError(f"{path}: no such run directory, bundle or report.json")
    try:
        data = json.loads(text)
    except ValueError as exc:  # also not UTF-8: a binary file given by mistake
        raise RunDirError(
            f"{path}: report.json is not valid JSON ({exc}); give a run directory, a bundle "
            "or the report.json a run wrote"
        ) from exc
    if not isinstance(data, dict) or "scenarios" not in data or "summary" not in data:
        raise RunDirError(f"{path}: not a faultdrill report (no 'scenarios'/'summary')")
    return data, str(path)


def _resume(s: dict[str, Any]) -> dict[str, Any] | None:
    r = (s.get("questions") or {}).get("resumed_from")
    if not r:
        return None
    return {k: r.get(k) for k in ("checkpoint", "step", "data_position")}


def _bad_findings(s: dict[str, Any]) -> dict[str, str]:
    """check name -> worst non-pass verdict, over every kind of evidence."""
    out: dict[str, str] = {}
    groups = [*(s.get("evidence") or {}).values(), s.get("expectation") or {}]
    for ev in groups:
        for f in ev.get("findings", []):
            v = f.get("verdict")
            if v in ("fail", "retest"):
                name = str(f.get("check"))
                if _VERDICT_RANK[v] > _VERDICT_RANK.get(out.get(name, "pass"), 0):
                    out[name] = v
    return out


@dataclass
class ItemDiff:
    id: str
    control: bool
    status: str  # both | only-a | only-b
    verdict: tuple[str | None, str | None] = (None, None)
    recovery_class: tuple[str | None, str | None] = (None, None)
    caught: tuple[bool | None, bool | None] = (None, None)
    resume: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)
    times: dict[str, tuple[float | None, float | None, bool]] = field(default_factory=dict)
    new_findings: dict[str, str] = field(default_factory=dict)
    resolved_findings: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "control": self.control,
            "status": self.status,
            "verdict": list(self.verdict),
            "recovery_class": list(self.recovery_class),
            "caught": list(self.caught),
            "resume": list(self.resume),
            "times": {
                k: {"a": a, "b": b, "within_band": ok} for k, (a, b, ok) in self.times.items()
            },
            "new_findings": self.new_findings,
            "resolved_findings": self.resolved_findings,
            "regressions": self.regressions,
            "changes": self.changes,
        }


@dataclass
class DiffResult:
    a: str
    b: str
    band: Band
    gate_times: bool
    items: list[ItemDiff]
    run_regressions: list[str]
    run_changes: list[str]

    @property
    def regressions(self) -> list[str]:
        return self.run_regressions + [f"{i.id}: {r}" for i in self.items for r in i.regressions]

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "band": {"abs_s": self.band.abs_s, "rel": self.band.rel, "text": self.band.describe()},
            "gate_times": self.gate_times,
            "regressed": self.regressed,
            "regressions": self.regressions,
            "run_changes": self.run_changes,
            "items": [i.to_json() for i in self.items],
        }

    def lines(self) -> list[str]:
        out = [f"diff {self.a} -> {self.b}"]
        out += [f"  run: {c}" for c in self.run_changes]
        out += [f"  run: REGRESSION {r}" for r in self.run_regressions]
        for i in self.items:
            kind = "control" if i.control else "scenario"
            if i.status != "both":
                where = "A" if i.status == "only-a" else "B"
                head = f"  {kind} {i.id}: only in {where}"
            else:
                head = (
                    f"  {kind} {i.id}: verdict {i.verdict[0]} -> {i.verdict[1]}, class "
                    f"{i.recovery_class[0]} -> {i.recovery_class[1]}"
                )
            out.append(head)
            out += [f"    REGRESSION {r}" for r in i.regressions]
            out += [f"    {c}" for c in i.changes]
        out.append(
            f"times compared within {self.band.describe()}"
            + ("" if self.gate_times else " (reported, not gating: observations, not an SLA)")
        )
        out.append(
            f"result: {len(self.regressions)} regression(s)"
            if self.regressed
            else "result: no regression"
        )
        return out


def _diff_item(
    sid: str, a: dict[str, Any] | None, b: dict[str, Any] | None, band: Band, gate_times: bool
) -> ItemDiff:
    control = bool((a or b or {}).get("control"))
    if a is None or b is None:
        d = ItemDiff(sid, control, "only-a" if b is None else "only-b")
        if b is None:
            d.regressions.append("run in A but not in B (lost coverage)")
        else:
            d.changes.append("new in B")
        return d
    d = ItemDiff(sid, control, "both")
    d.verdict = (a.get("verdict"), b.get("verdict"))
    d.recovery_class = (a.get("recovery_class"), b.get("recovery_class"))
    if control:
        d.caught = (a.get("caught"), b.get("caught"))
        if a.get("caught") and not b.get("caught"):
            d.regressions.append(
                f"negative control no longer caught by {b.get('expected_check')} "
                "(the drill can no longer see this bug)"
            )
        elif not a.get("caught") and b.get("caught"):
            d.changes.append("negative control now caught")
    else:
        va, vb = d.verdict
        if _VERDICT_RANK.get(str(vb), 1) > _VERDICT_RANK.get(str(va), 1):
            d.regressions.append(f"verdict {va} -> {vb}")
        elif vb != va:
            d.changes.append(f"verdict improved {va} -> {vb}")
        ca, cb = d.recovery_class
        if _CLASS_RANK.get(str(cb), 3) > _CLASS_RANK.get(str(ca), 3):
            d.regressions.append(f"recovery class {ca} -> {cb}")
        elif cb != ca:
            d.changes.append(f"recovery class {ca} -> {cb}")
    ra, rb = _resume(a), _resume(b)
    d.resume = (ra, rb)
    if ra != rb:
        text = f"resume point {ra} -> {rb}"
        if not control and ra and ra.get("checkpoint") and rb and rb.get("checkpoint") is None:
            d.regressions.append(f"{text}: resumed from scratch where A resumed from a checkpoint")
        else:
            d.changes.append(text)
    ta, tb = a.get("times") or {}, b.get("times") or {}
    for k in TIME_KEYS:
        x, y = ta.get(k), tb.get(k)
        ok = band.within(x, y)
        d.times[k] = (x, y, ok)
        if not ok:
            text = f"{k} {x} -> {y} s (outside {band.describe()})"
            if gate_times and not control:
                d.regressions.append(text)
            else:
                d.changes.append(text)
    rca, rcb = ta.get("recomputed_steps"), tb.get("recomputed_steps")
    if rca != rcb:
        d.changes.append(f"recomputed steps {rca} -> {rcb}")
    fa, fb = _bad_findings(a), _bad_findings(b)
    d.new_findings = {
        k: v for k, v in fb.items() if _VERDICT_RANK[v] > _VERDICT_RANK.get(fa.get(k, "pass"), 0)
    }
    d.resolved_findings = sorted(k for k in fa if k not in fb)
    for k, v in d.new_findings.items():
        msg = next(
            (
                f.get("message")
                for ev in [*(b.get("evidence") or {}).values(), b.get("expectation") or {}]
                for f in ev.get("findings", [])
                if f.get("check") == k and f.get("verdict") == v
            ),
            "",
        )
        d.changes.append(f"new finding {v} {k}: {msg}")
    for k in d.resolved_findings:
        d.changes.append(f"resolved finding {k}")
    return d


def diff_reports(
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    label_a: str = "A",
    label_b: str = "B",
    band: Band | None = None,
    gate_times: bool = False,
) -> DiffResult:
    band = band or Band()
    run_reg: list[str] = []
    run_chg: list[str] = []
    if a.get("plan_digest") != b.get("plan_digest"):
        run_chg.append(
            f"plan digest {str(a.get('plan_digest'))[:19]} -> {str(b.get('plan_digest'))[:19]} "
            "(the plans differ: compare with care)"
        )
    if a.get("faultdrill_version") != b.get("faultdrill_version"):
        run_chg.append(f"faultdrill {a.get('faultdrill_version')} -> {b.get('faultdrill_version')}")
    from faultdrill.report.scope import recorded_environment

    ea, eb = recorded_environment(a), recorded_environment(b)
    for k in sorted(set(ea) | set(eb)):
        if ea.get(k) != eb.get(k):
            run_chg.append(f"environment {k}: {ea.get(k)} -> {eb.get(k)}")
    ba, bb = (a.get("baseline") or {}).get("verdict"), (b.get("baseline") or {}).get("verdict")
    if _VERDICT_RANK.get(str(bb), 1) > _VERDICT_RANK.get(str(ba), 1):
        run_reg.append(f"baseline verdict {ba} -> {bb}")
    elif ba != bb:
        run_chg.append(f"baseline verdict {ba} -> {bb}")
    ia = {s["id"]: s for s in a.get("scenarios") or []}
    ib = {s["id"]: s for s in b.get("scenarios") or []}
    order = list(ia) + [k for k in ib if k not in ia]
    items = [_diff_item(k, ia.get(k), ib.get(k), band, gate_times) for k in order]
    return DiffResult(label_a, label_b, band, gate_times, items, run_reg, run_chg)
