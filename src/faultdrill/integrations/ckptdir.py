"""Checkpoint completeness for jobs whose framework writes checkpoints without a commit
protocol: a manifest written last, verified before a load, and a ``latest`` pointer.

Standard library only; framework-neutral (the Trainer, Lightning and DCP helpers use it).

Contract
--------
* **A checkpoint** is a directory (Hugging Face ``checkpoint-N``, a DCP directory) or a
  single file (a Lightning ``.ckpt``). Its manifest is ``<dir>/manifest.json`` or
  ``<file>.manifest.json``: ``file`` (the main file, relative to the directory; the one
  ``checkpoint_saved`` reports), ``bytes`` and ``sha256`` of it, ``step``,
  ``data_position``, and ``files``: ``{relative path: {bytes, sha256}}`` of every file of
  the checkpoint. ``file``/``bytes``/``sha256`` are what faultdrill's checkpoint inventory
  verifies a directory by.
* :func:`write_manifest` is called once every file of the checkpoint is written (by every
  rank): it fsyncs each file and the directory, hashes them, and writes the manifest
  durably (temporary file, fsync, rename, fsync of the directory). A checkpoint without a
  manifest is therefore one whose save never completed.
* :func:`verify` checks a checkpoint against its manifest: present, every listed file
  there with its size and sha256. :func:`newest_verified` walks the checkpoints of a
  directory newest first (by the number at the end of the name) and returns the first
  that verifies, with ``{"id", "reason"}`` for each one refused before it: what a resume
  should load, and the news ``checkpoint_loaded(rejected=...)`` carries.
* :func:`publish` moves the pointer file (default ``latest``) to a checkpoint durably;
  its first token is the checkpoint id (its name), as ``docs/probe.md`` requires.
* Every function raises ``OSError`` only for a failure to write; reading problems are
  answers (``verify`` returns the reason).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MANIFEST",
    "Manifest",
    "durable_write",
    "manifest_path",
    "newest_first",
    "newest_verified",
    "publish",
    "sha256_file",
    "trailing_number",
    "verify",
    "write_manifest",
]

#: The name of a checkpoint directory's manifest (the one faultdrill's inventory reads).
MANIFEST = "manifest.json"
_SIDE = ".manifest.json"  # a single-file checkpoint's manifest: <file>.manifest.json
_TRAILING_NUMBER = re.compile(r"(\d+)(?:\.[A-Za-z0-9]+)?$")


@dataclass(frozen=True)
class Manifest:
    """A checkpoint's manifest; ``root`` is the directory its relative paths start from."""

    target: Path
    root: Path
    file: str
    sha256: str
    bytes: int
    step: int
    data_position: int
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.target.name

    @property
    def path(self) -> Path:
        """The main file: what ``checkpoint_saved``/``checkpoint_loaded`` report."""
        return self.root / self.file


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest_path(target: Path) -> Path:
    """Where the manifest of checkpoint ``target`` (a directory or a file) lives."""
    return target / MANIFEST if target.is_dir() else target.with_name(target.name + _SIDE)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temporary file, fsync, rename, fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync(path.parent)


def _members(target: Path) -> tuple[Path, list[Path]]:
    """(root, the checkpoint's files): a directory's files (recursively, manifest and
    temporaries left out), or the single file."""
    if not target.is_dir():
        return target.parent, [target]
    files = [
        p
        for p in sorted(target.rglob("*"))
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".tmp")
    ]
    return target, files


def write_manifest(
    target: Path,
    *,
    main: str,
    step: int,
    data_position: int,
    extra: dict[str, Any] | None = None,
) -> Manifest:
    """Seal checkpoint ``target`` once all of it is written (see the module docstring).

    ``main``: the main file's path relative to the directory (for a single-file checkpoint,
    its name). Raises ``FileNotFoundError`` if the main file is missing, ``OSError`` if a
    write fails."""
    root, members = _members(target)
    files: dict[str, dict[str, Any]] = {}
    for path in members:
        _fsync(path)
        files[str(path.relative_to(root))] = {
            "bytes": path.stat().st_size,
            "sha256": sha256_file(path),
        }
    if main not in files:
        raise FileNotFoundError(f"{target}: main file {main!r} is not part of the checkpoint")
    if target.is_dir():
        _fsync(target)
    body = {
        "file": main,
        "bytes": files[main]["bytes"],
        "sha256": files[main]["sha256"],
        "step": int(step),
        "data_position": int(data_position),
        "files": files,
        "written_by": "faultdrill.integrations",
        **(extra or {}),
    }
    durable_write(manifest_path(target), (json.dumps(body, indent=1) + "\n").encode())
    return _manifest_of(target, body)


def _manifest_of(target: Path, body: dict[str, Any]) -> Manifest:
    known = {"file", "bytes", "sha256", "step", "data_position", "files", "written_by"}
    return Manifest(
        target=target,
        root=target if target.is_dir() else target.parent,
        file=str(body["file"]),
        sha256=str(body["sha256"]),
        bytes=int(body["bytes"]),
        step=int(body["step"]),
        data_position=int(body.get("data_position", 0)),
        files=dict(body.get("files") or {}),
        extra={k: v for k, v in body.items() if k not in known},
    )


def verify(target: Path) -> tuple[Manifest | None, str]:
    """(manifest, "") if checkpoint ``target`` matches its manifest, else (None, why)."""
    where = manifest_path(target)
    if not target.exists():
        return None, f"{target.name}: missing"
    try:
        body = json.loads(where.read_text())
        manifest = _manifest_of(target, body)
    except FileNotFoundError:
        return None, f"{target.name}: no {where.name}: its save never completed"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{target.name}: unreadable {where.name} ({exc})"
    listed = manifest.files or {manifest.file: {"bytes": manifest.bytes, "sha256": manifest.sha256}}
    for rel, want in listed.items():
        path = manifest.root / rel
        if not path.is_file():
            return None, f"{target.name}: {rel} is missing"
        size = path.stat().st_size
        if want.get("bytes") is not None and size != int(want["bytes"]):
            return None, f"{target.name}: {rel} has {size} bytes, the manifest says {want['bytes']}"
        if want.get("sha256") and sha256_file(path) != want["sha256"]:
            return None, f"{target.name}: {rel} sha256 differs from the manifest's"
    return manifest, ""


def trailing_number(name: str) -> int | None:
    """The number at the end of a checkpoint's name (before a file extension), if any."""
    m = _TRAILING_NUMBER.search(name)
    return int(m.group(1)) if m else None


def newest_verified(
    root: Path, *, prefix: str = "", suffix: str = ""
) -> tuple[Manifest | None, list[dict[str, str]]]:
    """The newest checkpoint under ``root`` that verifies, and the ones refused before it.

    Candidates are the entries of ``root`` whose name starts with ``prefix``, ends with
    ``suffix`` and carries a number at its end (before a file extension), manifests and
    hidden entries left out, newest (highest number) first."""
    rejected: list[dict[str, str]] = []
    for entry in newest_first(root, prefix=prefix, suffix=suffix):
        manifest, why = verify(entry)
        if manifest is not None:
            return manifest, rejected
        rejected.append({"id": entry.name, "reason": why})
    return None, rejected


def newest_first(root: Path, *, prefix: str = "", suffix: str = "") -> list[Path]:
    """The checkpoints under ``root`` that :func:`newest_verified` considers, newest first,
    unverified (a job run without faultdrill has no manifests to verify them by)."""
    if not root.is_dir():
        return []
    found: list[tuple[int, Path]] = []
    for entry in root.iterdir():
        name = entry.name
        if name.startswith(".") or name.endswith(_SIDE) or name == MANIFEST:
            continue
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        number = trailing_number(name)
        if number is not None:
            found.append((number, entry))
    return [entry for _, entry in sorted(found, key=lambda x: x[0], reverse=True)]


def publish(root: Path, ckpt_id: str, *, latest_file: str = "latest", sha256: str = "") -> None:
    """Point ``root/latest_file`` at checkpoint ``ckpt_id`` (durably); '' does nothing."""
    if latest_file:
        text = f"{ckpt_id} {sha256}".strip() + "\n"
        durable_write(root / latest_file, text.encode())
