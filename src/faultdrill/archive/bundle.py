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

``faultdrill bundle verify ARCHIVE`` recomputes every hash: a modified, missing or added file,
a member stored twice (a second ``manifest.json`` appended, say), a member that is a link or
a device or whose name climbs out (``..``, absolute), or an archive too damaged to read fails
verification. Members are streamed (bounded memory whatever their size; a member whose size
differs from the manifest's, or that the manifest does not list, is not even read).

Hashes prove integrity, not origin: anyone who rebuilds the archive can rebuild a matching
manifest. ``faultdrill bundle RUN_DIR --sign KEY`` adds ``manifest.sig``, an Ed25519
signature over the manifest (:mod:`faultdrill.archive.signing`), and records the signer's key
id in the manifest and the bundled responsibility dossier; ``bundle verify ARCHIVE --key
PUB`` then also proves that the holder of that key signed this very manifest. Without
``--key`` the verdict says that origin was not checked.

An archive is written under a fresh temporary name beside its target and renamed into
place (:func:`faultdrill.safepath.replacing`); run files are read without following links.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import tarfile
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from faultdrill import __version__, boundedjson, rundir
from faultdrill.archive.signing import (
    SIGNATURE,
    check_signature,
    key_id,
    load_private_key,
    load_public_key,
    read_signature,
    sign_manifest,
)
from faultdrill.environment import environment_facts
from faultdrill.errors import RunDirError
from faultdrill.events import read_jsonl
from faultdrill.i18n import LANGS, check_lang
from faultdrill.report.model import Report, read_report
from faultdrill.safepath import UnsafePathError, open_file, open_named, read_bytes, replacing

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
_DOSSIER = f"{rundir.BASELINE}/{rundir.DOSSIER}"  # a member name: always "/"
#: Members read whole (manifest, signature, one member asked for): at most this big.
_SMALL = 64 << 20
#: More members than this is no bundle faultdrill made (each header costs memory).
_MAX_MEMBERS = 200_000
_CHUNK = 1 << 20


class BundleError(RunDirError):
    """A bundle cannot be made, read or trusted."""


#: Extended headers (a GNU long name, a pax record set) larger than this are refused before
#: tarfile reads them whole: a name is at most a few KiB, and tarfile allocates the size the
#: header claims (a 1 GiB long name costs 1 GiB of memory, from a few MB of gzip).
_MAX_EXT_HEADER = 1 << 20
#: Extended headers chained before one member (tarfile reads each chain by recursion).
_MAX_EXT_CHAIN = 8


#: tarfile's header errors (not in its stubs): a block that is not a header, a short one,
#: none at all where a header should be.
_BAD_HEADER: tuple[type[Exception], ...] = (
    vars(tarfile)["InvalidHeaderError"],
    vars(tarfile)["TruncatedHeaderError"],
)
_NO_HEADER: type[Exception] = vars(tarfile)["EmptyHeaderError"]


class _ArchiveDamage(tarfile.TarError):
    """A header past the first is not a tar header, or claims an absurd size: tarfile would
    end the archive there silently, or read the claimed size whole."""


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that bounds what tarfile reads for one header (see :data:`_MAX_EXT_HEADER`)
    and calls a damaged or truncated header past the start damage, not the end of the
    archive (tarfile stops there without a word)."""

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> Any:
        depth = vars(tar).get("_ext_chain", 0)
        if depth > _MAX_EXT_CHAIN:
            raise _ArchiveDamage(f"more than {_MAX_EXT_CHAIN} extended headers in a row")
        vars(tar)["_ext_chain"] = depth + 1
        try:
            return super().fromtarfile(tar)
        except _BAD_HEADER as exc:
            if tar.offset == 0 and depth == 0:
                raise  # not a tar of this kind: tarfile.open tries the next one
            raise _ArchiveDamage(f"damaged tar header at byte {tar.offset}: {exc}") from None
        except _NO_HEADER:
            if tar.offset == 0 and depth == 0:
                raise
            raise _ArchiveDamage(
                f"the archive ends at byte {tar.offset} without its end-of-archive "
                "blocks (truncated)"
            ) from None
        finally:
            vars(tar)["_ext_chain"] = depth

    def _check_ext_size(self) -> None:
        if self.size > _MAX_EXT_HEADER:
            raise _ArchiveDamage(
                f"an extended header (long name or pax) of {self.size} bytes, over "
                f"{_MAX_EXT_HEADER >> 20} MiB: not read"
            )

    def _proc_gnulong(self, tar: tarfile.TarFile) -> Any:
        self._check_ext_size()
        return super()._proc_gnulong(tar)  # type: ignore[misc]

    def _proc_pax(self, tar: tarfile.TarFile) -> Any:
        self._check_ext_size()
        return super()._proc_pax(tar)  # type: ignore[misc]


def _open_tar(f: IO[bytes]) -> tarfile.TarFile:
    """The archive in ``f`` (any compression tarfile knows), read with bounded headers."""
    return tarfile.open(fileobj=f, mode="r:*", tarinfo=_BoundedTarInfo)


def _rest_is_empty(tar: tarfile.TarFile) -> str | None:
    """After the end-of-archive block: read the stream to its end (a gzip stream checks its
    CRC and length trailer only there) and require nothing but zero padding. Why not, or
    None."""
    fileobj: Any = tar.fileobj
    while block := fileobj.read(_CHUNK):
        if block.count(0) != len(block):
            return "data after the end of the archive (appended to it, or damaged)"
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _item_dirs(run_dir: Path) -> Iterator[tuple[str, str, bool | None, Path]]:
    """(kind, id, control flag, directory) of every recorded item."""
    for kind, item_id, d in rundir.items(run_dir):
        yield kind, item_id, None if kind == "baseline" else kind == "control", d


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
        harness = rundir.events_dir(d) / "harness.jsonl"
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
    for path in sorted(rundir.events_dir(d).glob("*.jsonl")):
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


def _add_file(tar: tarfile.TarFile, name: str, f: IO[bytes]) -> None:
    st = os.fstat(f.fileno())
    info = tarfile.TarInfo(name)
    info.size = st.st_size
    info.mtime = int(st.st_mtime)
    info.mode = 0o644
    tar.addfile(info, f)


def _stream_sha256(f: IO[bytes]) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    while block := f.read(_CHUNK):
        h.update(block)
        n += len(block)
    return h.hexdigest(), n


def _read_run_report(run_dir: Path) -> Report:
    if not (run_dir / rundir.REPORT_JSON).exists():
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
        "ledgers": role(suffix=(rundir.LEDGER,)),
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
    out: Path,
    root: str,
    head: list[tuple[str, bytes]],
    members: list[tuple[str, Path | bytes]],
    run_dir: Path,
    now: float,
) -> None:
    """The archive (``head``: manifest and signature first), written under a new temporary
    name beside ``out`` and renamed into place once complete."""
    try:
        with replacing(out, within=None) as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            for name, data in head:
                _add_bytes(tar, f"{root}/{name}", data, now)
            for name, src in members:
                if isinstance(src, bytes):
                    _add_bytes(tar, f"{root}/{name}", src, now)
                else:
                    with open_file(src, within=run_dir) as member:
                        _add_file(tar, f"{root}/{name}", member)
    except UnsafePathError:
        raise
    except OSError as exc:
        raise BundleError(f"{out}: cannot write the bundle: {exc}") from exc


def _signed_dossier(run_dir: Path, report: Report, kid: str, now: dt.datetime) -> bytes | None:
    """The baseline dossier with the signer recorded in its responsibility section (the
    bundled copy only: the run directory is not written), or None without a dossier."""
    try:
        dossier = json.loads(read_bytes(run_dir / _DOSSIER, within=run_dir, limit=_SMALL))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise BundleError(
            f"{run_dir / _DOSSIER}: not JSON ({exc}); cannot record the signer"
        ) from exc
    if not isinstance(dossier, dict):
        raise BundleError(f"{run_dir / _DOSSIER}: not a dossier; cannot record the signer")
    resp = dict(dossier.get("responsibility") or {})
    resp["bundle_signature"] = {
        "algorithm": "ed25519",
        "key_id": kid,
        "signer": report.plan.responsibility.signer,
        "signed_at": now.isoformat(timespec="seconds"),
    }
    dossier["responsibility"] = resp
    return (json.dumps(dossier, indent=2) + "\n").encode()


def _hash_members(
    members: list[tuple[str, Path | bytes]], run_dir: Path
) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {}
    for name, src in members:
        if isinstance(src, bytes):
            files[name] = {"sha256": _sha256(src), "size": len(src)}
        else:
            with open_file(src, within=run_dir) as f:
                digest, size = _stream_sha256(f)
            files[name] = {"sha256": digest, "size": size}
    return files


def make_bundle(
    run_dir: Path,
    out: Path | None = None,
    *,
    lang: str = "en",
    with_checkpoints: bool = False,
    sign: Path | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Pack ``run_dir`` into ``out`` (default ``RUN_DIR.bundle.tar.gz`` beside it); with
    ``sign`` (a private key file), add ``manifest.sig`` and record the signer.

    Returns (archive path, manifest). Raises BundleError when the run has no report.json
    (run ``faultdrill check RUN_DIR`` first) or the archive cannot be written, RunDirError
    for a link at the archive's name or inside the run, SigningKeyError for a bad key.
    """
    check_lang(lang)
    key = load_private_key(sign) if sign is not None else None
    run_dir = run_dir.resolve()
    report = _read_run_report(run_dir)
    # The archive's own name is not resolved: a link there is refused, never followed.
    out = Path(os.path.abspath(out or run_dir.parent / f"{run_dir.name}.bundle.tar.gz"))
    where = out.parent.resolve()
    if run_dir == where or run_dir in where.parents:
        raise BundleError(f"{out}: write the bundle outside the run directory it packs")
    now = dt.datetime.now(tz=dt.timezone.utc)
    generated = _generated(report, run_dir, lang)
    kid = key_id(key.public_key()) if key is not None else None
    if kid is not None:
        dossier = _signed_dossier(run_dir, report, kid, now)
        if dossier is not None:
            generated[_DOSSIER] = dossier
    members: list[tuple[str, Path | bytes]] = []
    for rel in _run_files(run_dir, report.plan.checkpoint.dir, with_checkpoints):
        name = rel.as_posix()
        if name in generated or name in (MANIFEST, SIGNATURE):
            continue
        members.append((name, run_dir / rel))
    members += sorted(generated.items())
    files = _hash_members(members, run_dir)
    manifest = _manifest(
        report, run_dir, files, lang=lang, with_checkpoints=with_checkpoints, now=now
    )
    if kid is not None:
        manifest["signature"] = {"algorithm": "ed25519", "key_id": kid, "member": SIGNATURE}
    manifest_bytes = (json.dumps(manifest, indent=2, default=str) + "\n").encode()
    head = [(MANIFEST, manifest_bytes)]
    if key is not None:
        head.append((SIGNATURE, sign_manifest(manifest_bytes, key)))
    _write_archive(out, run_dir.name, head, members, run_dir, now.timestamp())
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
    #: ``manifest.sig`` as read, when the bundle carries one.
    signature: dict[str, Any] | None = None
    #: The key the signature was verified against (``--key``), once it held.
    key_id: str | None = None
    #: ``manifest.sig`` is present but not a well-formed signature (a failure, in problems).
    signature_malformed: bool = False

    @property
    def ok(self) -> bool:
        return not (self.modified or self.missing or self.added or self.problems)

    @property
    def origin_checked(self) -> bool:
        return self.key_id is not None

    def origin(self) -> str:
        """What the verification says of who made the bundle, in words."""
        if self.origin_checked:
            return f"origin: signed by key {self.key_id} (signature over the manifest verified)"
        if self.signature_malformed:
            return f"origin NOT checked: {SIGNATURE} is malformed (see the problem above)"
        if self.signature is not None:
            return (
                f"origin NOT checked: the bundle says it is signed by key "
                f"{self.signature.get('key_id')}; verify with --key PUB to check that"
            )
        return (
            "origin NOT checked: integrity only (every file matches the manifest, but anyone "
            "who rebuilds the archive can rebuild a matching manifest); sign with "
            "`bundle RUN_DIR --sign KEY`, verify with --key PUB"
        )

    def lines(self) -> list[str]:
        out = [
            f"{self.archive}: {'OK' if self.ok else 'FAILED'} — {self.checked} file(s) checked "
            f"against the manifest (manifest sha256 {self.manifest_sha256 or 'n/a'})"
        ]
        out += [f"  modified: {n}" for n in self.modified]
        out += [f"  missing:  {n}" for n in self.missing]
        out += [f"  added:    {n}" for n in self.added]
        out += [f"  problem:  {p}" for p in self.problems]
        out.append(f"  {self.origin()}")
        return out


def _member_problem(m: tarfile.TarInfo) -> str | None:
    """Why member ``m`` cannot be part of a bundle: a name that is empty, absolute or climbs
    out (``..``), anything but a regular file or a directory (links, devices, fifos), or
    what tarfile's own ``data`` extraction filter refuses."""
    p = PurePosixPath(m.name)
    if not m.name or p.is_absolute() or ".." in p.parts or "\0" in m.name:
        return f"unsafe member path {m.name!r}"
    if not (m.isfile() or m.isdir()):
        return f"{m.name}: not a regular file (link or device)"
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is not None:
        try:
            data_filter(m, "/nonexistent-bundle-root")
        except tarfile.FilterError as exc:
            return f"{m.name}: refused by tarfile's data filter: {exc}"
    return None


def _tar_problem(exc: BaseException) -> str:
    """One line for an archive tarfile cannot read (its own message lists every method)."""
    if isinstance(exc, _ArchiveDamage):
        return str(exc)
    if isinstance(exc, tarfile.ReadError) and "could not be opened" in str(exc):
        return "not a tar archive (gzip, bzip2, xz or plain); make one with `faultdrill bundle`"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _members(tar: tarfile.TarFile, problems: list[str]) -> Iterator[tarfile.TarInfo]:
    """The archive's members in order, one header in memory at a time (tarfile would keep
    every header), at most :data:`_MAX_MEMBERS`; unsafe ones said in ``problems``."""
    for count in range(_MAX_MEMBERS + 1):
        m = tar.next()
        if m is None:
            why = _rest_is_empty(tar)
            if why is not None:
                problems.append(why)
            return
        kept = vars(tar).get("members")  # every header read so far (tarfile's own list)
        if isinstance(kept, list):
            kept.clear()
        if count == _MAX_MEMBERS:
            problems.append(f"more than {_MAX_MEMBERS} members: not a bundle faultdrill made")
            return
        why = _member_problem(m)
        if why is not None:
            problems.append(why)
            continue
        yield m


def _read_small(tar: tarfile.TarFile, m: tarfile.TarInfo) -> bytes | None:
    if m.size > _SMALL:
        return None
    f = tar.extractfile(m)
    return f.read() if f is not None else b""


@dataclass
class _Scan:
    roots: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    #: directory members below the top folder (each must hold a listed file).
    dirs: set[str] = field(default_factory=set)
    #: sha256 of each member read; None: not read (unlisted, or its size already differs).
    hashes: dict[str, str | None] = field(default_factory=dict)
    manifest: bytes | None = None
    signature: bytes | None = None
    listed: dict[str, Any] | None = None


def _listing(raw: bytes) -> dict[str, Any] | None:
    try:
        files = boundedjson.loads(raw).get("files")
    except (ValueError, AttributeError):
        return None
    return files if isinstance(files, dict) else None


def _scan_member(tar: tarfile.TarFile, m: tarfile.TarInfo, scan: _Scan, res: VerifyResult) -> None:
    parts = PurePosixPath(m.name).parts  # "./run/x" is ("run", "x"); "./" is ()
    if not parts:
        if not m.isdir():
            res.problems.append(f"{m.name!r}: a file with no name")
        return  # "./": the root `tar czf X -C DIR .` stores first
    scan.roots.add(parts[0])
    rel = "/".join(parts[1:])
    if m.isdir():
        if rel:
            scan.dirs.add(rel)
        return
    if not rel:
        res.problems.append(f"{m.name}: a file outside the bundle's top folder")
        return
    if rel in scan.names:
        res.problems.append(f"{rel}: stored twice (unpacking would replace the first copy)")
        return
    scan.names.add(rel)
    if rel in (MANIFEST, SIGNATURE):
        data = _read_small(tar, m)
        if data is None:
            res.problems.append(f"{rel}: {m.size} bytes, over {_SMALL >> 20} MiB; not read")
        elif rel == MANIFEST:
            scan.manifest, scan.listed = data, _listing(data)
        else:
            scan.signature = data
        return
    meta = scan.listed.get(rel) if scan.listed is not None else None
    if scan.listed is not None and (
        not isinstance(meta, dict) or meta.get("size", m.size) != m.size
    ):
        scan.hashes[rel] = None  # not listed, or of another size: no need to read it
        return
    f = tar.extractfile(m)
    scan.hashes[rel] = _stream_sha256(f)[0] if f is not None else _sha256(b"")


def _compare(scan: _Scan, res: VerifyResult) -> None:
    """Manifest against members: modified, missing, added."""
    assert scan.manifest is not None
    res.manifest_sha256 = _sha256(scan.manifest)
    try:
        manifest = boundedjson.loads(scan.manifest)
        listed: Any = manifest["files"]
    except (ValueError, KeyError, TypeError) as exc:
        res.problems.append(f"{MANIFEST} is unreadable: {type(exc).__name__}: {exc}")
        return
    res.manifest = manifest if isinstance(manifest, dict) else {}
    if not isinstance(listed, dict):
        res.problems.append(
            f"{MANIFEST}: 'files' is a {type(listed).__name__}, not a mapping of file name to "
            "{sha256, bytes}; the manifest was not written by `faultdrill bundle`"
        )
        return
    for name, meta in listed.items():
        if name not in scan.hashes:
            res.missing.append(name)
        elif not isinstance(meta, dict) or scan.hashes[name] != meta.get("sha256"):
            res.modified.append(name)
    parents = {str(p) for name in listed for p in PurePosixPath(name).parents}
    res.added = sorted(set(scan.hashes) - set(listed))
    res.added += sorted(f"{d}/ (a directory)" for d in scan.dirs - parents)
    res.checked = len(scan.hashes)
    res.missing.sort()
    res.modified.sort()


def _check_origin(scan: _Scan, res: VerifyResult, key: Path | None) -> None:
    """The signature: a malformed one (or one the manifest declares and the archive lacks)
    is a failure with or without ``key``; with ``key`` it must verify."""
    if scan.signature is not None:
        sig = read_signature(scan.signature)
        if isinstance(sig, str):
            res.problems.append(sig)
            res.signature_malformed = True
        else:
            res.signature = sig
    elif isinstance(res.manifest.get("signature"), dict):
        res.problems.append(
            f"{MANIFEST} says the bundle is signed, but it has no {SIGNATURE} (removed?)"
        )
    if key is None:
        return
    public = load_public_key(key)
    if scan.signature is None:
        res.problems.append(f"not signed (no {SIGNATURE}): origin cannot be checked with --key")
    elif scan.manifest is not None:
        why = check_signature(scan.manifest, scan.signature, public)
        if why is not None:
            res.problems.append(why)
        else:
            res.key_id = key_id(public)


def verify_bundle(archive: Path, key: Path | None = None) -> VerifyResult:
    """Recompute every member's sha256 (streamed) and compare with the manifest; with
    ``key`` (a public key file) also check the manifest's signature. Never raises on a
    damaged archive: damage is a verification failure (``problems``). Raises
    SigningKeyError for a key file that cannot be used."""
    res = VerifyResult(archive)
    if key is not None:
        load_public_key(key)  # a bad key is bad input, said before reading the archive
    if archive.is_dir():
        res.problems.append(
            "is a directory; `bundle verify` expects an archive made by `faultdrill bundle` "
            f"(to pack this run: faultdrill bundle {archive})"
        )
        return res
    scan = _Scan()
    try:
        with open_named(archive) as f, _open_tar(f) as tar:
            for m in _members(tar, res.problems):
                _scan_member(tar, m, scan, res)
    except UnsafePathError as exc:
        res.problems.append(str(exc))
        return res
    except FileNotFoundError:
        res.problems.append("no such file")
        return res
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        res.problems.append(f"archive is damaged or not a bundle: {_tar_problem(exc)}")
    if len(scan.roots) > 1:
        res.problems.append(f"more than one top folder: {sorted(scan.roots)}")
    res.root = next(iter(scan.roots), "")
    if scan.manifest is None:
        res.problems.append(f"no {MANIFEST} in the archive")
        res.added = sorted(scan.hashes)
        return res
    _compare(scan, res)
    _check_origin(scan, res, key)
    return res


def _member_rel(m: tarfile.TarInfo) -> str:
    """A member's name below the top folder (``./run/x`` and ``run/x`` are both ``x``)."""
    return "/".join(PurePosixPath(m.name).parts[1:])


def read_member(archive: Path, name: str) -> bytes:
    """One file of a bundle (``name`` relative to its top folder, at most 64 MiB), without
    unpacking. Raises BundleError."""
    problems: list[str] = []
    try:
        with open_named(archive) as f, _open_tar(f) as tar:
            for m in _members(tar, problems):
                if m.isfile() and _member_rel(m) == name:
                    data = _read_small(tar, m)
                    if data is None:
                        raise BundleError(f"{archive}: {name} is {m.size} bytes; not read")
                    return data
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise BundleError(f"{archive}: cannot read the bundle: {_tar_problem(exc)}") from exc
    raise BundleError(f"{archive}: has no {name}")


def _in_root(m: tarfile.TarInfo) -> bool:
    """Not the archive's own root (``./``, which `tar -C DIR .` stores): nothing to unpack."""
    return bool(PurePosixPath(m.name).parts)


def _extract_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """Only regular files and directories with safe names, as tarfile's ``data`` filter
    passes them (modes sanitised); anything else is left out."""
    if _member_problem(member) is not None:
        return None
    data_filter = getattr(tarfile, "data_filter", None)
    return data_filter(member, path) if data_filter is not None else member


def extract_bundle(
    archive: Path, dest: Path, *, verify: bool = True, key: Path | None = None
) -> Path:
    """Unpack a bundle into ``dest`` and return the run directory inside it.

    With ``verify`` (the default) a bundle that fails verification (with ``key``: also its
    signature) is refused, naming what is wrong. Member paths are checked: nothing is
    written outside ``dest``, no link or device is made, and a member stored twice is
    refused even without verification.
    """
    if verify:
        res = verify_bundle(archive, key)
        if not res.ok:
            raise BundleError(
                "bundle failed verification; refusing to use it:\n" + "\n".join(res.lines())
            )
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with open_named(archive) as f, _open_tar(f) as tar:
            members = [m for m in _members(tar, []) if (m.isfile() or m.isdir()) and _in_root(m)]
            counts = Counter(PurePosixPath(m.name).as_posix() for m in members if m.isfile())
            twice = sorted(n for n, c in counts.items() if c > 1)
            if twice:
                raise BundleError(f"{archive}: members stored twice: {', '.join(twice[:5])}")
            roots = {PurePosixPath(m.name).parts[0] for m in members}
            if len(roots) != 1:
                raise BundleError(f"{archive}: expected one top folder, found {sorted(roots)}")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter=_extract_filter)
            else:  # Python < 3.10.12: paths were checked above, links excluded
                tar.extractall(dest, members=members)
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise BundleError(f"{archive}: cannot unpack: {_tar_problem(exc)}") from exc
    return dest / next(iter(roots))
