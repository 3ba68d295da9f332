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
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill import rundir
from faultdrill.archive.diff import Band, load_report
from faultdrill.errors import DrillError, RunDirError
from faultdrill.report.model import Item, Report
from faultdrill.safepath import escape, read_bytes, write_file

__all__ = ["ReplayResult", "Trust", "compare_item", "finish_replay", "replay_bundle"]


def compare_item(orig: Item, new: Item, band: Band) -> dict[str, Any]:
    """Does the replayed item reproduce the original? Each difference in words."""
    diffs: list[str] = []
    if orig.verdict != new.verdict:
        diffs.append(f"verdict: original {orig.verdict}, replay {new.verdict}")
    if orig.recovery_class != new.recovery_class:
        diffs.append(f"recovery_class: original {orig.recovery_class}, replay {new.recovery_class}")
    if orig.control and orig.caught != new.caught:
        diffs.append(f"caught: original {orig.caught}, replay {new.caught}")
    lo = orig.conclusion.level if orig.conclusion is not None else None
    ln = new.conclusion.level if new.conclusion is not None else None
    if orig.conclusion is not None and new.conclusion is not None and lo != ln:
        diffs.append(f"conclusion level: original {lo}, replay {ln}")
    ro, rn = orig.resume_key(), new.resume_key()
    if ro != rn:
        diffs.append(f"resume point: original {ro}, replay {rn}")
    times = {}
    for key in ("detect_s", "recover_s"):
        a, b = getattr(orig.times, key), getattr(new.times, key)
        ok = band.within(a, b)
        times[key] = {"original": a, "replay": b, "within_band": ok}
        if not ok:
            diffs.append(f"{key}: original {a}, replay {b} (outside {band.describe()})")
    return {
        "id": orig.id,
        "control": orig.control,
        "verdict": [orig.verdict, new.verdict],
        "recovery_class": [orig.recovery_class, new.recovery_class],
        "level": [lo, ln],
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
    #: What was checked of the source before its plan ran (:meth:`Trust.describe`).
    trust: dict[str, Any] = field(default_factory=dict)

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
            "trust": self.trust,
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


def _record_operator(rr: ReplayResult, manifest: dict[str, Any], original: Report) -> None:
    run_dir, operator, bundle = rr.run_dir, rr.operator, rr.bundle
    path = rundir.dossier_path(run_dir)
    try:
        dossier = json.loads(read_bytes(path, within=run_dir))
    except FileNotFoundError:
        dossier = {}
    resp = dict(dossier.get("responsibility") or {})
    resp["replay_operator"] = operator
    dossier["responsibility"] = resp
    dossier["replay"] = {
        "operator": operator,
        "bundle": bundle,
        "bundle_manifest_sha256": manifest.get("manifest_sha256"),
        "original_run": manifest.get("source_run"),
        "original_plan_digest": original.plan_digest,
        "original_responsibility": original.plan.responsibility.to_json(),
        "source_trust": rr.trust,
        "replayed_at": dt.datetime.now(tz=dt.timezone.utc).isoformat(timespec="seconds"),
    }
    write_file(path, json.dumps(dossier, indent=2) + "\n", within=run_dir)


def finish_replay(out: Path, rr: ReplayResult, manifest: dict[str, Any], original: Report) -> None:
    """Record the replay in the new run: the operator in its responsibility dossier, the
    comparison in ``replay.json`` (neither written through a link: UnsafePathError)."""
    _record_operator(rr, manifest, original)
    write_file(
        out / "replay.json", json.dumps(rr.to_json(), indent=2, default=str) + "\n", within=out
    )


@dataclass(frozen=True)
class Trust:
    """Why the replay may run the source's plan (its programs run as root here).

    ``key``: the bundle's signature must verify against this public key; ``unsigned``: the
    operator accepts a source whose origin is not checked (an unsigned bundle, a signed one
    without the key to check it, or a run directory), and says so; ``verify``: False only
    with ``--no-verify`` (a bundle that fails verification, used anyway). Recorded in the
    replay's responsibility dossier and ``replay.json``."""

    key: Path | None = None
    unsigned: bool = False
    verify: bool = True

    def describe(self, key_id: str | None) -> dict[str, Any]:
        if key_id is not None:
            origin = f"signature verified with key {key_id} (--key)"
        else:
            origin = "origin NOT checked: replayed with --unsigned"
        return {
            "integrity_verified": self.verify,
            "key_id": key_id,
            "origin": origin,
            "unsigned": self.unsigned,
            "no_verify": not self.verify,
        }


def _refuse_untrusted(source: Path, trust: Trust, res: Any) -> None:
    """DrillError unless the verification ``res`` and ``trust`` allow running the bundle."""
    if trust.verify and not res.ok:
        raise DrillError(
            "bundle failed verification; refusing to replay it (its plan runs programs as "
            "root here):\n" + "\n".join(res.lines())
        )
    if trust.key is None and not trust.unsigned:
        said = (
            f"it says it is signed by key {res.signature.get('key_id')}, "
            if res.signature is not None
            else "it is not signed, "
        )
        raise DrillError(
            f"{source}: {said}and its origin was not checked; replay runs the bundle's plan "
            "(its programs, as root): give the signer's public key with --key PUB, or "
            "--unsigned to replay it anyway (recorded in the replay's responsibility dossier)"
        )


def _private_copy(source: Path, tmp: Path) -> Path:
    """The archive copied into the private temporary folder: verified and unpacked from
    the same bytes (nobody can swap the file between the check and the unpacking)."""
    from faultdrill.safepath import open_named

    copy = tmp / "source.bundle"
    try:
        with open_named(source) as src, copy.open("xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, RunDirError) as exc:
        raise DrillError(f"{source}: cannot read the bundle: {exc}") from exc
    return copy


def _open_source(
    source: Path, tmp: Path, trust: Trust
) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """(the original run directory, the bundle's manifest, the trust record) of a bundle
    or run directory; DrillError when the source may not be replayed (see :class:`Trust`)."""
    from faultdrill.archive.bundle import extract_bundle, verify_bundle

    if not source.exists():
        raise DrillError(
            f"{source}: no such bundle or run directory; give an archive made by "
            "`faultdrill bundle` or a run directory"
        )
    if source.is_dir():
        if not trust.unsigned:
            raise DrillError(
                f"{source}: a run directory carries no signature, so its origin cannot be "
                "checked; replay runs its plan (its programs, as root): replay a signed "
                "bundle with --key PUB, or give --unsigned to replay this directory anyway"
            )
        # Replay copies the source's plan.yaml into the new run: never through a link.
        why = escape(source.resolve(), source.resolve() / rundir.PLAN)
        if why is not None:
            raise DrillError(f"{source}: {why}; refusing to copy the plan from it")
        return source, {"source_run": str(source.resolve())}, trust.describe(None)
    archive = _private_copy(source, tmp)
    res = verify_bundle(archive, trust.key)
    _refuse_untrusted(source, trust, res)
    manifest = dict(res.manifest)
    manifest["manifest_sha256"] = res.manifest_sha256
    record = trust.describe(res.key_id)
    return extract_bundle(archive, tmp / "run", verify=False), manifest, record


def _wanted(
    source: Path, known: set[str], original: Report, scenarios: list[str] | None
) -> list[str]:
    """The ids to replay: those asked for (each must be in the plan), else every recorded one."""
    wanted = list(scenarios) if scenarios else [s.id for s in original.scenarios]
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise DrillError(
            f"--scenario: unknown id(s) {', '.join(unknown)}; the bundle's plan has: "
            f"{', '.join(sorted(known))}"
        )
    if not wanted:
        raise DrillError(f"{source}: the original run recorded no scenario to replay")
    return wanted


def _compare(sid: str, original: Report, new: Report, band: Band) -> dict[str, Any]:
    """How replayed item ``sid`` compares with the original (also when one side lacks it)."""
    o, n = original.item(sid), new.item(sid)
    if o is None:
        return {
            "id": sid,
            "matches": False,
            "differences": ["not in the original run"],
            "verdict": [None, n.verdict if n else None],
            "recovery_class": [None, None],
        }
    if n is None:
        skipped = {s.id: s.reason for s in new.skipped}
        return {
            "id": sid,
            "matches": False,
            "differences": [f"not run in the replay: {skipped.get(sid, 'unknown reason')}"],
            "verdict": [o.verdict, None],
            "recovery_class": [o.recovery_class, None],
        }
    return compare_item(o, n, band)


def replay_bundle(
    source: Path,
    operator: str,
    out: Path,
    *,
    scenarios: list[str] | None = None,
    lang: str = "en",
    band: Band | None = None,
    trust: Trust | None = None,
    report: Callable[[str, str], None] = lambda _i, _s: None,
    on_item: Callable[[str, str, Any], None] = lambda _i, _k, _v: None,
) -> ReplayResult:
    """Replay ``source`` (a bundle archive, or a run directory) into the new run ``out``.

    ``scenarios`` limits the items (ids of scenarios or controls); by default every item
    the original run recorded is replayed. ``trust`` (default: none given) says what must
    hold of the source before its plan runs: see :class:`Trust`. Raises DrillError on bad
    input (unknown id, a bundle that fails verification or whose origin is neither checked
    nor waived, an empty operator name).
    """
    from faultdrill.engine.run import run_plan
    from faultdrill.i18n import check_lang
    from faultdrill.judge.evaluate import load_run_plan
    from faultdrill.report import write_reports

    check_lang(lang)
    band = band or Band()
    trust = trust or Trust()
    if not operator.strip():
        raise DrillError("--operator: name the person replaying the drill")
    with tempfile.TemporaryDirectory(prefix="faultdrill-replay-") as tmp:
        orig_dir, manifest, trusted = _open_source(source, Path(tmp), trust)
        if not (orig_dir / rundir.REPORT_JSON).exists():
            raise DrillError(f"{source}: no report.json; not a faultdrill run or bundle")
        original, _ = load_report(orig_dir, verify=False)  # RunDirError if it is not one
        plan = load_run_plan(orig_dir)
        known = {s.id for s in plan.scenarios()} | {c.id for c in plan.controls}
        wanted = _wanted(source, known, original, scenarios)
        plan_src = orig_dir / rundir.PLAN
        result = run_plan(
            plan,
            out,
            source=plan_src if plan_src.exists() else None,
            only=set(wanted),
            controls=True,
            report=report,
            on_item=on_item,
        )
    new = result.to_report()
    rr = ReplayResult(
        out,
        operator,
        str(source),
        band,
        baseline=[original.baseline.verdict, new.baseline.verdict],
        trust=trusted,
    )
    rr.items = [_compare(sid, original, new, band) for sid in wanted]
    finish_replay(out, rr, manifest, original)
    write_reports(result, lang)
    return rr
