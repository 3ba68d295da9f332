"""Checkpoint store of the reference workload: durable save, verified load, fallback, pruning.

Layout of a checkpoint directory::

    <ckpt_dir>/step-000020/state.pt        torch.save of the training state
    <ckpt_dir>/step-000020/manifest.json   id, step, sha256 and size of state.pt, ...
    <ckpt_dir>/latest                      one line: the id of the newest published checkpoint
    <ckpt_dir>/.tmp-*                      a save in progress, or left by a crash (pruned)

Contract
--------
* :func:`save` (rank 0 only) publishes a checkpoint only once it is durable: state and
  manifest are written and fsynced in a temporary directory, the directory is fsynced and
  renamed into place, the parent is fsynced, and only then is ``latest`` replaced (temp
  file, fsync, rename, fsync). Then all but the newest ``keep`` checkpoints are removed.
  A crash at any point leaves ``latest`` naming a complete checkpoint (or none).
  ``publish_before_durable=True`` is the known-bad order of the ``publish-before-durable``
  mode: ``latest`` moves before ``state.pt`` is written.
* :func:`load` (every rank) tries ``latest`` first, then every older ``step-*`` directory,
  newest first; with no ``latest`` file (or one that names no ``step-*`` id) it tries
  every directory. A candidate is used only
  if its manifest parses, its ``state.pt`` has the manifest's size and sha256 (checked on
  the bytes before they are unpickled) and ``torch.load(weights_only=True)`` accepts it.
  Every candidate refused is reported as ``{"id", "reason"}``. It never raises for a bad
  checkpoint, only for an unreadable directory.
* :func:`load_unverified` is the known-bad loader of the ``load-unverified`` mode: it
  follows ``latest`` and unpickles whatever is there; its errors propagate.

Checkpoints newer than ``latest`` are never loaded: they were not published, so no
``ckpt_save`` event vouches for them.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "LATEST",
    "MANIFEST",
    "STATE",
    "CheckpointError",
    "LoadResult",
    "Loaded",
    "Saved",
    "ckpt_id",
    "durable_write",
    "list_checkpoints",
    "load",
    "load_unverified",
    "prune",
    "publish_latest",
    "read_latest",
    "save",
]

MANIFEST = "manifest.json"
STATE = "state.pt"
LATEST = "latest"
_ID_RE = re.compile(r"^step-(\d{6,})$")
_MANIFEST_FIELDS = ("id", "step", "sha256", "bytes", "data_position")


class CheckpointError(Exception):
    """A checkpoint candidate failed verification; ``str(exc)`` is the reason."""


@dataclass(frozen=True)
class Saved:
    """A checkpoint that :func:`save` made durable and published; ``path`` is its state file."""

    id: str
    step: int
    path: str
    sha256: str
    size: int
    data_position: int


@dataclass(frozen=True)
class Loaded:
    """A checkpoint read back: its manifest facts, state file path and unpickled state."""

    id: str
    step: int
    path: str
    data_position: int
    verified: bool
    state: dict[str, Any]


@dataclass(frozen=True)
class LoadResult:
    """What :func:`load` chose (``None``: start from scratch) and what it refused."""

    loaded: Loaded | None
    rejected: list[dict[str, str]] = field(default_factory=list)


def ckpt_id(step: int) -> str:
    return f"step-{step:06d}"


def _step_of(cid: str) -> int | None:
    match = _ID_RE.match(cid)
    return int(match.group(1)) if match else None


def list_checkpoints(ckpt_dir: str) -> list[str]:
    """Ids of the ``step-*`` directories in ``ckpt_dir``, newest (highest step) first."""
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return []
    ids = [n for n in names if _step_of(n) is not None and os.path.isdir(os.path.join(ckpt_dir, n))]
    return sorted(ids, key=lambda n: _step_of(n) or 0, reverse=True)


def read_latest(ckpt_dir: str) -> str | None:
    """The id ``latest`` names, or ``None`` when there is no ``latest`` file."""
    try:
        with open(os.path.join(ckpt_dir, LATEST), encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


# --- save ----------------------------------------------------------------------------


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes, *, fsync: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def durable_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old file or the whole new one:
    a temporary file beside it, fsync, rename, fsync of the directory."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".tmp-{os.path.basename(path)}-{os.getpid()}")
    try:
        _write_file(tmp, data, fsync=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(parent)


def publish_latest(ckpt_dir: str, cid: str) -> None:
    """Make ``latest`` name ``cid`` (temp file, fsync, rename, fsync the directory)."""
    tmp = os.path.join(ckpt_dir, f".tmp-latest-{os.getpid()}")
    _write_file(tmp, (cid + "\n").encode(), fsync=True)
    os.replace(tmp, os.path.join(ckpt_dir, LATEST))
    _fsync_dir(ckpt_dir)


def save(
    ckpt_dir: str,
    *,
    step: int,
    state: dict[str, Any],
    data_position: int,
    world_size: int,
    written_by: dict[str, int],
    keep: int,
    publish_before_durable: bool = False,
    publish: Callable[[str], None] | None = None,
) -> Saved:
    """Write, publish and prune; returns what was published. Raises ``OSError`` on I/O failure.

    A failed save leaves ``latest`` as it was (except in ``publish_before_durable`` mode)
    and removes its temporary directory. ``publish(cid)`` replaces the default publication
    (:func:`publish_latest`), e.g. to also hand the checkpoint to a scheduler; it is called
    where ``latest`` would move.
    """
    if publish is None:

        def publish(cid: str) -> None:
            publish_latest(ckpt_dir, cid)

    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    cid = ckpt_id(step)
    final = os.path.join(ckpt_dir, cid)
    manifest = {
        "id": cid,
        "step": step,
        "file": STATE,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "data_position": data_position,
        "world_size": world_size,
        "written_by": written_by,
        "created": time.time(),
    }
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    os.makedirs(ckpt_dir, exist_ok=True)
    if publish_before_durable:
        os.makedirs(final, exist_ok=True)
        with open(os.path.join(final, STATE), "wb") as f:
            _write_file(os.path.join(final, MANIFEST), manifest_bytes, fsync=False)
            publish(cid)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    else:
        tmp = tempfile.mkdtemp(prefix=f".tmp-{cid}-", dir=ckpt_dir)
        try:
            _write_file(os.path.join(tmp, STATE), data, fsync=True)
            _write_file(os.path.join(tmp, MANIFEST), manifest_bytes, fsync=True)
            _fsync_dir(tmp)
            if os.path.exists(final):
                # Redoing a step saved before (a resume from an older checkpoint):
                # a directory cannot be renamed over a non-empty one.
                os.replace(final, f"{tmp}.old")
            os.replace(tmp, final)
            _fsync_dir(ckpt_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        publish(cid)
    prune(ckpt_dir, keep)
    state_path = os.path.join(final, STATE)
    return Saved(cid, step, state_path, str(manifest["sha256"]), len(data), data_position)


def prune(ckpt_dir: str, keep: int) -> None:
    """Remove all but the newest ``keep`` checkpoints (never the one ``latest`` names),
    and the leftovers of interrupted saves."""
    latest = read_latest(ckpt_dir)
    for n, cid in enumerate(list_checkpoints(ckpt_dir)):
        if n >= keep and cid != latest:
            shutil.rmtree(os.path.join(ckpt_dir, cid), ignore_errors=True)
    for name in os.listdir(ckpt_dir):
        if name.startswith(".tmp-"):
            path = os.path.join(ckpt_dir, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


# --- load ----------------------------------------------------------------------------


def _read_manifest(path: str, cid: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, MANIFEST), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"missing {MANIFEST}") from None
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise CheckpointError(f"unparseable {MANIFEST}: {exc}") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"unparseable {MANIFEST}: not an object")
    for key in _MANIFEST_FIELDS:
        if key not in manifest:
            raise CheckpointError(f"{MANIFEST} lacks {key!r}")
    if manifest["id"] != cid or manifest["step"] != _step_of(cid):
        raise CheckpointError(
            f"{MANIFEST} describes {manifest['id']!r} step {manifest['step']!r}, not {cid!r}"
        )
    return manifest


def _load_verified(ckpt_dir: str, cid: str) -> Loaded:
    if _step_of(cid) is None:
        raise CheckpointError(f"{LATEST} names {cid!r}, not a checkpoint id")
    path = os.path.join(ckpt_dir, cid)
    if not os.path.isdir(path):
        raise CheckpointError("missing directory")
    manifest = _read_manifest(path, cid)
    try:
        with open(os.path.join(path, STATE), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"missing {STATE}") from None
    if len(data) != manifest["bytes"]:
        raise CheckpointError(f"{STATE} has {len(data)} bytes, manifest says {manifest['bytes']}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest["sha256"]:
        raise CheckpointError(
            f"{STATE} sha256 {digest[:12]}... != manifest {str(manifest['sha256'])[:12]}..."
        )
    try:
        state = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # whatever torch.load raises, the file is not loadable
        raise CheckpointError(f"{STATE} not loadable: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or state.get("step") != manifest["step"]:
        raise CheckpointError(f"{STATE} does not hold step {manifest['step']}")
    state_path = os.path.join(path, STATE)
    return Loaded(
        cid, int(manifest["step"]), state_path, int(manifest["data_position"]), True, state
    )


def load(ckpt_dir: str, latest: str | None = None) -> LoadResult:
    """The newest published checkpoint that verifies, and the candidates refused before it.

    ``latest`` (default: what the ``latest`` file names) is the published one to try first,
    e.g. the checkpoint a scheduler handed over."""
    if latest is None:
        latest = read_latest(ckpt_dir)
    candidates = list_checkpoints(ckpt_dir)
    if latest is not None:
        latest_step = _step_of(latest)
        if latest_step is not None:
            candidates = [c for c in candidates if (_step_of(c) or 0) < latest_step]
        candidates = [latest, *candidates]
    rejected: list[dict[str, str]] = []
    for cid in candidates:
        try:
            return LoadResult(_load_verified(ckpt_dir, cid), rejected)
        except CheckpointError as exc:
            rejected.append({"id": cid, "reason": str(exc)})
    return LoadResult(None, rejected)


def load_unverified(ckpt_dir: str, latest: str | None = None) -> LoadResult:
    """Known-bad: unpickle what ``latest`` names without checking it. Errors propagate."""
    if latest is None:
        latest = read_latest(ckpt_dir)
    if latest is None:
        return LoadResult(None)
    path = os.path.join(ckpt_dir, latest, STATE)
    state = torch.load(path, weights_only=True)
    return LoadResult(
        Loaded(latest, int(state["step"]), path, int(state["data_position"]), False, state)
    )
