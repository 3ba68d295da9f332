"""Regression diff of two recorded runs (or bundles): what got worse between A and B.

Typical use: the same plan before and after a platform upgrade. Per scenario and control:
verdict changes, recovery-class changes, resume-point changes, detection and recovery time
changes (judged against a stated band: times are observations, not a service level), and
findings that are new in B. A *regression* is anything that makes B prove less than A:

* a scenario's verdict got worse (pass → retest → fail), or its recovery class got worse
  (automatic → manual confirmation → manual restart → unrecoverable → not determined);
* a scenario's conclusion level dropped (consistent results → valid progress → running
  again → none proven), or its failing layer changed (a new failing layer, or another one:
  the failure moved, e.g. from the network to the checkpoint);
* a negative control that A caught is missed in B;
* B resumed from scratch where A resumed from a checkpoint;
* a scenario or control run in A is not run in B (lost coverage);
* the baseline got worse;
* with ``gate_times``: a detection/recovery time outside the band.

``faultdrill diff A B`` exits 1 when there is a regression, so it can gate a pipeline.
Both sides are read from their ``report.json`` as a :class:`~faultdrill.report.model.Report`
(a bundle is verified first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill import rundir
from faultdrill.errors import RunDirError
from faultdrill.report.model import Item, Report, read_report

__all__ = ["Band", "DiffResult", "ItemDiff", "diff_reports", "load_report"]

_VERDICT_RANK = {"pass": 0, "retest": 1, "fail": 2}
_CLASS_RANK = {
    "automatic": 0,
    "manual-confirmation": 1,
    "manual-restart": 2,
    "unrecoverable": 3,
    "not-determined": 4,  # the drill could not tell: it proves the least
}
#: Conclusion levels, higher is more proven (None: not even running again).
_LEVEL_RANK = {None: 0, "running-again": 1, "valid-progress": 2, "consistent-results": 3}
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


def load_report(path: Path, *, verify: bool = True) -> tuple[Report, str]:
    """(the report, a label) of a run directory, a bundle archive or a report.json."""
    if path.is_dir():
        return read_report(path), str(path)
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz", ".tar")):
        from faultdrill.archive.bundle import read_member, verify_bundle

        if verify:
            res = verify_bundle(path)
            if not res.ok:
                raise RunDirError(
                    "bundle failed verification; refusing to compare it "
                    "(--no-verify to compare anyway):\n" + "\n".join(res.lines())
                )
        return Report.from_text(read_member(path, rundir.REPORT_JSON), source=str(path)), str(path)
    if path.is_file():
        return read_report(path), str(path)
    raise RunDirError(f"{path}: no such run directory, bundle or report.json")


def _bad_findings(s: Item) -> dict[str, str]:
    """check name -> worst non-pass verdict, over every kind of evidence."""
    out: dict[str, str] = {}
    for _cat, f in s.findings():
        if _VERDICT_RANK[f.verdict] > _VERDICT_RANK[out.get(f.check, "pass")]:
            out[f.check] = f.verdict
    return out


@dataclass
class ItemDiff:
    id: str
    control: bool
    status: str  # both | only-a | only-b
    verdict: tuple[str | None, str | None] = (None, None)
    recovery_class: tuple[str | None, str | None] = (None, None)
    caught: tuple[bool | None, bool | None] = (None, None)
    level: tuple[str | None, str | None] = (None, None)
    layer: tuple[str | None, str | None] = (None, None)
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
            "level": list(self.level),
            "layer": list(self.layer),
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
                    f"{i.recovery_class[0]} -> {i.recovery_class[1]}, level "
                    f"{i.level[0] or '-'} -> {i.level[1] or '-'}"
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


def _compare_control(d: ItemDiff, a: Item, b: Item) -> None:
    d.caught = (a.caught, b.caught)
    if a.caught and not b.caught:
        d.regressions.append(
            f"negative control no longer caught by {b.expected_check} "
            "(the drill can no longer see this bug)"
        )
    elif not a.caught and b.caught:
        d.changes.append("negative control now caught")


def _compare_scenario(d: ItemDiff, a: Item, b: Item) -> None:
    va, vb = a.verdict, b.verdict
    if _VERDICT_RANK[vb] > _VERDICT_RANK[va]:
        d.regressions.append(f"verdict {va} -> {vb}")
    elif vb != va:
        d.changes.append(f"verdict improved {va} -> {vb}")
    ca, cb = a.recovery_class, b.recovery_class
    if _CLASS_RANK[cb] > _CLASS_RANK[ca]:
        d.regressions.append(f"recovery class {ca} -> {cb}")
    elif cb != ca:
        d.changes.append(f"recovery class {ca} -> {cb}")


def _level(s: Item) -> str | None:
    return s.conclusion.level if s.conclusion is not None else None


def _layer(s: Item) -> str | None:
    return s.layer.layer if s.layer is not None else None


def _compare_conclusion(d: ItemDiff, a: Item, b: Item) -> None:
    """The conclusion level and the failing layer. For a scenario a level that dropped or
    a failing layer that appeared or moved is a regression; for a control (expected to
    fail) a change is said, not gated. Reports written before levels existed (no
    ``conclusion`` on either side) compare nothing here."""
    d.level, d.layer = (_level(a), _level(b)), (_layer(a), _layer(b))
    known = a.conclusion is not None and b.conclusion is not None
    (la, lb), (ya, yb) = d.level, d.layer
    if known and la != lb:
        text = f"conclusion level {la or 'none proven'} -> {lb or 'none proven'}"
        drop = _LEVEL_RANK.get(lb, 0) < _LEVEL_RANK.get(la, 0)
        (d.regressions if drop and not d.control else d.changes).append(text)
    if ya != yb and (a.conclusion is not None or ya is not None):
        text = f"failing layer {ya or 'none'} -> {yb or 'none'}"
        moved = yb is not None
        (d.regressions if moved and not d.control else d.changes).append(text)


def _compare_resume(d: ItemDiff, a: Item, b: Item) -> None:
    ra, rb = a.resume_key(), b.resume_key()
    d.resume = (ra, rb)
    if ra == rb:
        return
    text = f"resume point {ra} -> {rb}"
    from_ckpt = a.questions.resumed_from is not None and a.questions.resumed_from.checkpoint
    scratch = b.questions.resumed_from is not None and b.questions.resumed_from.checkpoint is None
    if not d.control and from_ckpt and scratch:
        d.regressions.append(f"{text}: resumed from scratch where A resumed from a checkpoint")
    else:
        d.changes.append(text)


def _compare_times(d: ItemDiff, a: Item, b: Item, band: Band, gate_times: bool) -> None:
    for k in TIME_KEYS:
        x, y = getattr(a.times, k), getattr(b.times, k)
        ok = band.within(x, y)
        d.times[k] = (x, y, ok)
        if not ok:
            text = f"{k} {x} -> {y} s (outside {band.describe()})"
            if gate_times and not d.control:
                d.regressions.append(text)
            else:
                d.changes.append(text)
    rca, rcb = a.times.recomputed_steps, b.times.recomputed_steps
    if rca != rcb:
        d.changes.append(f"recomputed steps {rca} -> {rcb}")


def _compare_findings(d: ItemDiff, a: Item, b: Item) -> None:
    fa, fb = _bad_findings(a), _bad_findings(b)
    d.new_findings = {
        k: v for k, v in fb.items() if _VERDICT_RANK[v] > _VERDICT_RANK[fa.get(k, "pass")]
    }
    d.resolved_findings = sorted(k for k in fa if k not in fb)
    for k, v in d.new_findings.items():
        msg = next((f.message for _c, f in b.findings() if f.check == k and f.verdict == v), "")
        d.changes.append(f"new finding {v} {k}: {msg}")
    for k in d.resolved_findings:
        d.changes.append(f"resolved finding {k}")


def _diff_item(sid: str, a: Item | None, b: Item | None, band: Band, gate_times: bool) -> ItemDiff:
    if a is None or b is None:
        present = a or b
        d = ItemDiff(sid, bool(present and present.control), "only-a" if b is None else "only-b")
        if b is None:
            d.regressions.append("run in A but not in B (lost coverage)")
        else:
            d.changes.append("new in B")
        return d
    d = ItemDiff(sid, a.control, "both")
    d.verdict = (a.verdict, b.verdict)
    d.recovery_class = (a.recovery_class, b.recovery_class)
    if d.control:
        _compare_control(d, a, b)
    else:
        _compare_scenario(d, a, b)
    _compare_conclusion(d, a, b)
    _compare_resume(d, a, b)
    _compare_times(d, a, b, band, gate_times)
    _compare_findings(d, a, b)
    return d


def _run_changes(a: Report, b: Report) -> tuple[list[str], list[str]]:
    """(regressions, changes) of the runs as wholes: plan, version, environment, baseline."""
    reg: list[str] = []
    chg: list[str] = []
    if a.plan_digest != b.plan_digest:
        chg.append(
            f"plan digest {a.plan_digest[:19]} -> {b.plan_digest[:19]} "
            "(the plans differ: compare with care)"
        )
    if a.faultdrill_version != b.faultdrill_version:
        chg.append(f"faultdrill {a.faultdrill_version} -> {b.faultdrill_version}")
    ea, eb = a.environment.to_json(), b.environment.to_json()
    for k in sorted(set(ea) | set(eb)):
        if ea.get(k) != eb.get(k):
            chg.append(f"environment {k}: {ea.get(k)} -> {eb.get(k)}")
    ba, bb = a.baseline.verdict, b.baseline.verdict
    if _VERDICT_RANK[bb] > _VERDICT_RANK[ba]:
        reg.append(f"baseline verdict {ba} -> {bb}")
    elif ba != bb:
        chg.append(f"baseline verdict {ba} -> {bb}")
    return reg, chg


def diff_reports(
    a: Report,
    b: Report,
    *,
    label_a: str = "A",
    label_b: str = "B",
    band: Band | None = None,
    gate_times: bool = False,
) -> DiffResult:
    """What changed from run A to run B, and which changes are regressions."""
    band = band or Band()
    run_reg, run_chg = _run_changes(a, b)
    ia = {s.id: s for s in a.scenarios}
    ib = {s.id: s for s in b.scenarios}
    order = list(ia) + [k for k in ib if k not in ia]
    items = [_diff_item(k, ia.get(k), ib.get(k), band, gate_times) for k in order]
    return DiffResult(label_a, label_b, band, gate_times, items, run_reg, run_chg)
