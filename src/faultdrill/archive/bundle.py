"""The evidence bundle: one archive that lets someone who was not there check and replay a run.

``faultdrill bundle RUN_DIR`` packs, under one top folder of a ``.tar.gz``:

=============================  ==============================================================
``manifest.json``              sha256 and size of every other file, tool version, plan
                               digest, environment (where recorded, where bundled), contents
``plan.yaml`` ``plan.json``    the plan as written and as validated
``baseline/dossier.json``      the baseline's frozen dossiers
``*/events/*.jsonl``           the event export of the baseline, every scenario and control
``*/ledger.jsonl``             every change made to the machine, and whether it was undone
``*/workload.json``, logs      what each job read, what its agents printed
``checkpoint-inventory.json``  every checkpoint each item wrote, and whether it verified
``faults/ITEM.sh``             the fault scripts actually applied (recorded commands)
``runbook.md``                 the recovery runbook (``runbook.en.md``/``runbook.zh.md``)
``report.*``                   report.json and the human reports in both languages
=============================  ==============================================================

Checkpoint files and torchrun's temp folders are left out (their inventory is in) unless
asked for. The unpacked folder is a run directory: ``faultdrill check`` re-judges it, the
reports re-render from it, ``faultdrill replay`` re-runs its plan.

``faultdrill bundle verify ARCHIVE`` recomputes every hash: a modified, missing or added file
(or an archive too damaged to read) fails verification. The manifest itself is not signed;
compare its sha256 (printed by both commands) with the one recorded at sign-off.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from faultdrill import __version__
from faultdrill.errors import RunDirError
from faultdrill.events import read_jsonl
from faultdrill.report.i18n import LANGS, check_lang
from faultdrill.report.model import Report, read_report

__all__ = [
    "MANIFEST",
    "BundleError",
    "VerifyResult",
    "extract_bundle",
    "make_bundle",
    "read_member",
    "verify_bundle",
]

MANIFEST = "manifest.json"
FORMAT = "faultdrill-bundle/1"
_ITEM_PARENTS = ("scenarios", "controls")


class BundleError(RunDirError):
    """A bundle cannot be made, read or trusted."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _item_dirs(run_dir: Path) -> Iterator[tuple[str, str, bool | None, Path]]:
    """(kind, id, control flag, directory) of every recorded item."""
    if (run_dir / "baseline").is_dir():
        yield "baseline", "baseline", None, run_dir / "baseline"
    for parent in _ITEM_PARENTS:
        base = run_dir / parent
        if base.is_dir():
            for d in sorted(p for p in base.iterdir() if p.is_dir()):
                yield parent[:-1], d.name, parent == "controls", d


def _run_files(run_dir: Path, ckpt_dir: str, with_checkpoints: bool) -> list[Path]:
    """Every regular file of the run to pack, relative paths, sorted."""
    skip_dirs = set()
    for _k, _i, _c, d in _item_dirs(run_dir):
        skip_dirs.add(d / "tmp")
        if not with_checkpoints:
            skip_dirs.add(d / ckpt_dir)
    out = []
    for path in sorted(run_dir.rglob("*")):
        if any(path == s or s in path.parents for s in skip_dirs):
            continue
        if path.is_file() and not path.is_symlink():
            out.append(path.relative_to(run_dir))
    return out


def _inventory(run_dir: Path) -> dict[str, Any]:
    """Every item's checkpoint inventory, from its recorded ``harness`` events."""
    out: dict[str, Any] = {}
    for kind, item_id, _c, d in _item_dirs(run_dir):
        harness = d / "events" / "harness.jsonl"
        if not harness.exists():
            continue
        recs = list(read_jsonl(harness))
        latest = next((r for r in recs if r.get("kind") == "ckpt_latest"), None)
        out[f"{kind}/{item_id}"] = {
            "latest": {k: latest.get(k) for k in ("file", "target", "problem")} if latest else None,
            "checkpoints": [
                {k: v for k, v in r.items() if k not in ("ts", "mono", "src", "kind", "task")}
                for r in recs
                if r.get("kind") == "ckpt_inventory"
            ],
        }
    return out


def _fault_script(kind: str, item_id: str, d: Path) -> str | None:
    """The commands a fault actually ran in one item, as a commented shell script."""
    from faultdrill.report.runbook import ledger_changes, undo_hint

    events: list[dict[str, Any]] = []
    for path in sorted((d / "events").glob("*.jsonl")):
        events += [e for e in read_jsonl(path) if e.get("src") == "fault"]
    events.sort(key=lambda e: float(e.get("mono", 0.0)))
    if not events:
        return None
    lines = [
        "#!/bin/sh",
        f"# Fault script actually applied in {kind} {item_id} (recorded by faultdrill "
        f"{__version__}).",
        "# Pids, ports and paths are those of the original run: look up the current ones",
        "# (see runbook.md) before running any line. Undo lines come from the ledger.",
        "",
    ]
    for e in events:
        ts = dt.datetime.fromtimestamp(float(e.get("ts", 0.0)), tz=dt.timezone.utc)
        when = ts.isoformat(timespec="milliseconds")
        k = e.get("kind")
        facts = {
            x: y
            for x, y in e.items()
            if x not in ("ts", "mono", "src", "kind", "task", "command", "spec")
        }
        lines.append(f"# {when} {k}: {json.dumps(facts, default=str, ensure_ascii=False)}")
        cmd = e.get("command")
        if cmd is not None:
            lines.append(" ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd))
    changes = ledger_changes(d)
    if changes:
        lines += ["", "# --- changes recorded in the ledger, and how each is undone ---"]
        for c in changes:
            state = "reverted" if c["reverted"] else ("applied" if c["applied"] else "recorded")
            lines.append(f"# [{state}] {c['kind']}: {c['label']}")
        lines.append("# undo, newest first:")
        for c in reversed(changes):
            lines.append("# " + undo_hint(str(c["kind"]), dict(c["data"])))
    return "\n".join(lines) + "\n"


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _read_run_report(run_dir: Path) -> Report:
    if not (run_dir / "report.json").exists():
        raise BundleError(
            f"{run_dir}: no report.json; is this a faultdrill run directory? "
            f"(run `faultdrill check {run_dir}` to judge a recorded run first)"
        )
    try:
        return read_report(run_dir)
    except RunDirError as exc:
        raise BundleError(str(exc)) from exc


def _generated(report: Report, run_dir: Path, lang: str) -> dict[str, bytes]:
    """The members rendered for the bundle: reports and runbooks in every language, the
    checkpoint inventory, each item's fault script."""
    from faultdrill.report import render_html, render_markdown
    from faultdrill.report.runbook import render_runbook

    generated: dict[str, bytes] = {}
    for lg in LANGS:
        generated[f"report.{lg}.md"] = render_markdown(report, lg).encode()
        generated[f"report.{lg}.html"] = render_html(report, run_dir, lg).encode()
        name = "runbook.md" if lg == lang else f"runbook.{lg}.md"
        generated[name] = render_runbook(report, run_dir, lg).encode()
    generated["checkpoint-inventory.json"] = (
        json.dumps(_inventory(run_dir), indent=2, default=str) + "\n"
    ).encode()
    for kind, item_id, _c, d in _item_dirs(run_dir):
        script = _fault_script(kind, item_id, d)
        if script is not None:
            generated[f"faults/{kind}-{item_id}.sh"] = script.encode()
    return generated


def _contents(files: dict[str, Any]) -> dict[str, list[str]]:
    """The manifest's table of contents: which members play which role."""

    def role(prefix: tuple[str, ...] = (), suffix: tuple[str, ...] = ()) -> list[str]:
        return sorted(
            n
            for n in files
            if (not prefix or n.startswith(prefix)) and (not suffix or n.endswith(suffix))
        )

    return {
        "plan": [n for n in ("plan.yaml", "plan.json") if n in files],
        "baseline_dossiers": role(("baseline/dossier",)),
        "event_export": [n for n in files if "/events/" in n],
        "ledgers": role(suffix=("ledger.jsonl",)),
        "checkpoint_inventory": ["checkpoint-inventory.json"],
        "fault_scripts": role(("faults/",)),
        "runbook": role(("runbook",)),
        "reports": role(("report.",)),
    }


def _manifest(
    report: Report,
    run_dir: Path,
    files: dict[str, dict[str, Any]],
    *,
    lang: str,
    with_checkpoints: bool,
    now: dt.datetime,
) -> dict[str, Any]:
    from faultdrill.engine.item import environment_facts

    return {
        "format": FORMAT,
        "tool": {"name": "faultdrill", "version": __version__},
        "created": now.isoformat(timespec="seconds"),
        "source_run": str(run_dir),
        "task_id": report.task_id,
        "plan_digest": report.plan_digest,
        "recorded_with": report.faultdrill_version,
        "summary": report.summary.to_json(),
        "language": lang,
        "environment": {
            "recorded": report.environment.to_json(),
            "bundled_on": environment_facts(),
        },
        "with_checkpoints": with_checkpoints,
        "contents": _contents(files),
        "files": dict(sorted(files.items())),
    }


def _write_archive(
    out: Path, root: str, manifest_bytes: bytes, members: list[tuple[str, Path | bytes]], now: float
) -> None:
    """The archive, written beside ``out`` and moved into place once complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            _add_bytes(tar, f"{root}/{MANIFEST}", manifest_bytes, now)
            for name, src in members:
                if isinstance(src, bytes):
                    _add_bytes(tar, f"{root}/{name}", src, now)
                else:
                    _add_bytes(tar, f"{root}/{name}", src.read_bytes(), src.stat().st_mtime)
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BundleError(f"{out}: cannot write the bundle: {exc}") from exc


def make_bundle(
    run_dir: Path,
    out: Path | None = None,
    *,
    lang: str = "en",
    with_checkpoints: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Pack ``run_dir`` into ``out`` (default ``RUN_DIR.bundle.tar.gz`` beside it).

    Returns (archive path, manifest). Raises BundleError when the run has no report.json
    (run ``faultdrill check RUN_DIR`` first) or the archive cannot be written.
    """
    check_lang(lang)
    run_dir = run_dir.resolve()
    report = _read_run_report(run_dir)
    out = (out or run_dir.parent / f"{run_dir.name}.bundle.tar.gz").resolve()
    if run_dir == out or run_dir in out.parents:
        raise BundleError(f"{out}: write the bundle outside the run directory it packs")
    now = dt.datetime.now(tz=dt.timezone.utc)
    generated = _generated(report, run_dir, lang)
    members: list[tuple[str, Path | bytes]] = []
    for rel in _run_files(run_dir, report.plan.checkpoint.dir, with_checkpoints):
        name = rel.as_posix()
        if name in generated or name == MANIFEST:
            continue
        members.append((name, run_dir / rel))
    members += sorted(generated.items())
    files: dict[str, dict[str, Any]] = {}
    for name, src in members:
        data = src if isinstance(src, bytes) else src.read_bytes()
        files[name] = {"sha256": _sha256(data), "size": len(data)}
    manifest = _manifest(
        report, run_dir, files, lang=lang, with_checkpoints=with_checkpoints, now=now
    )
    manifest_bytes = (json.dumps(manifest, indent=2, default=str) + "\n").encode()
    _write_archive(out, run_dir.name, manifest_bytes, members, now.timestamp())
    manifest["manifest_sha256"] = _sha256(manifest_bytes)
    return out, manifest


# --- verification -------------------------------------------------------------------------


@dataclass
class VerifyResult:
    archive: Path
    root: str = ""
    manifest: dict[str, Any] = field(default_factory=dict)
    manifest_sha256: str | None = None
    checked: int = 0
    modified: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.modified or self.missing or self.added or self.problems)

    def lines(self) -> list[str]:
        out = [
            f"{self.archive}: {'OK' if self.ok else 'FAILED'} — {self.checked} file(s) checked "
            f"against the manifest (manifest sha256 {self.manifest_sha256 or 'n/a'})"
        ]
        out += [f"  modified: {n}" for n in self.modified]
        out += [f"  missing:  {n}" for n in self.missing]
        out += [f"  added:    {n}" for n in self.added]
        out += [f"  problem:  {p}" for p in self.problems]
        return out


def _safe_name(name: str) -> bool:
    p = PurePosixPath(name)
    return not p.is_absolute() and ".." not in p.parts and name != ""


def _tar_problem(exc: BaseException) -> str:
    """One line for an archive tarfile cannot read (its own message lists every method)."""
    if isinstance(exc, tarfile.ReadError):
        return "not a tar archive (gzip, bzip2, xz or plain); make one with `faultdrill bundle`"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def verify_bundle(archive: Path) -> VerifyResult:
    """Recompute every member's sha256 and compare with the manifest. Never raises on a
    damaged archive: damage is a verification failure (``problems``)."""
    res = VerifyResult(archive)
    if archive.is_dir():
        res.problems.append(
            "is a directory; `bundle verify` expects an archive made by `faultdrill bundle` "
            f"(to pack this run: faultdrill bundle {archive})"
        )
        return res
    if not archive.is_file():
        res.problems.append("no such file")
        return res
    seen: dict[str, str] = {}
    manifest_raw: bytes | None = None
    roots: set[str] = set()
    try:
        with tarfile.open(archive, "r:*") as tar:
            for m in tar:
                if not _safe_name(m.name):
                    res.problems.append(f"unsafe member path {m.name!r}")
                    continue
                parts = PurePosixPath(m.name).parts
                roots.add(parts[0])
                if m.isdir():
                    continue
                rel = "/".join(parts[1:])
                if not m.isfile():
                    res.problems.append(f"{rel or m.name}: not a regular file (link or device)")
                    continue
                f = tar.extractfile(m)
                data = f.read() if f is not None else b""
                if rel == MANIFEST:
                    manifest_raw = data
                else:
                    if rel in seen:
                        res.problems.append(f"{rel}: stored twice")
                    seen[rel] = _sha256(data)
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        res.problems.append(f"archive is damaged or not a bundle: {_tar_problem(exc)}")
    if len(roots) > 1:
        res.problems.append(f"more than one top folder: {sorted(roots)}")
    res.root = next(iter(roots), "")
    if manifest_raw is None:
        res.problems.append(f"no {MANIFEST} in the archive")
        res.added = sorted(seen)
        return res
    res.manifest_sha256 = _sha256(manifest_raw)
    try:
        manifest = json.loads(manifest_raw)
        listed: dict[str, Any] = manifest["files"]
    except (ValueError, KeyError, TypeError) as exc:
        res.problems.append(f"{MANIFEST} is unreadable: {type(exc).__name__}: {exc}")
        return res
    res.manifest = manifest
    if not isinstance(listed, dict):
        res.problems.append(
            f"{MANIFEST}: 'files' is a {type(listed).__name__}, not a mapping of file name to "
            "{sha256, bytes}; the manifest was not written by `faultdrill bundle`"
        )
        return res
    for name, meta in listed.items():
        got = seen.get(name)
        if got is None:
            res.missing.append(name)
        elif not isinstance(meta, dict) or got != meta.get("sha256"):
            res.modified.append(name)
    res.added = sorted(set(seen) - set(listed))
    res.checked = len(seen)
    res.missing.sort()
    res.modified.sort()
    return res


def read_member(archive: Path, name: str) -> bytes:
    """One file of a bundle (``name`` relative to its top folder), without unpacking."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            for m in tar:
                parts = PurePosixPath(m.name).parts
                if m.isfile() and "/".join(parts[1:]) == name:
                    f = tar.extractfile(m)
                    return f.read() if f is not None else b""
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise BundleError(f"{archive}: cannot read the bundle: {_tar_problem(exc)}") from exc
    raise BundleError(f"{archive}: has no {name}")


def extract_bundle(archive: Path, dest: Path, *, verify: bool = True) -> Path:
    """Unpack a bundle into ``dest`` and return the run directory inside it.

    With ``verify`` (the default) a bundle that fails verification is refused, naming what
    is wrong. Member paths are checked: nothing is written outside ``dest``.
    """
    if verify:
        res = verify_bundle(archive)
        if not res.ok:
            raise BundleError(
                "bundle failed verification; refusing to use it:\n" + "\n".join(res.lines())
            )
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = [m for m in tar.getmembers() if _safe_name(m.name)]
            members = [m for m in members if m.isfile() or m.isdir()]
            roots = {PurePosixPath(m.name).parts[0] for m in members}
            if len(roots) != 1:
                raise BundleError(f"{archive}: expected one top folder, found {sorted(roots)}")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter="data")
            else:  # Python < 3.10.12: paths were checked above, links excluded
                tar.extractall(dest, members=members)
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise BundleError(f"{archive}: cannot unpack: {_tar_problem(exc)}") from exc
    return dest / next(iter(roots))
