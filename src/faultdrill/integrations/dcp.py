"""``torch.distributed.checkpoint`` (DCP) directories and ``StatefulDataLoader`` positions.

::

    dcp.save(state, checkpoint_id=str(path))        # every rank
    report_saved(probe, path, step=step, data_position=data_position(loader.state_dict(),
                 epoch=epoch, epoch_len=len(ds), world_size=world),
                 components=state_components(state))   # every rank
    ...
    manifest, rejected = newest_loadable(root)      # the resume
    dcp.load(state, checkpoint_id=str(manifest.target))
    probe.checkpoint_loaded(ckpt_id=manifest.id, step=manifest.step, path=str(manifest.path),
                            verified=True, data_position=manifest.data_position,
                            rejected=rejected, components=state_components(state))

Contract
--------
* A DCP checkpoint is a directory: one or more data files (``__<rank>_<n>.distcp``) and
  ``.metadata``, which DCP writes last, on the coordinator rank, once every rank's data
  is written. :func:`is_complete` says a directory is complete when ``.metadata`` reads
  back and every byte range it lists lies inside a data file that is there.
* :func:`report_saved` is called by every rank after ``dcp.save`` returned: the ranks meet
  at a barrier (when a process group exists), then rank 0 checks completeness, seals the
  directory with a manifest (:mod:`~faultdrill.integrations.ckptdir`: every file's size and
  sha256, ``.metadata`` as the main file, written last and durably), moves the ``latest``
  pointer, and emits ``ckpt_save``. An incomplete directory is never reported as saved:
  rank 0 emits ``ckpt_save_failed`` and raises :class:`IncompleteCheckpointError`. With
  ``components`` (:func:`state_components` of the state dict it saved), every rank also
  reports the digests of its part (``ckpt_components``, ``saved``); after ``dcp.load``,
  the same digests of the state dict loaded into go with ``checkpoint_loaded``. Without
  faultdrill (the probe is off) it writes nothing and returns None.
* :func:`verify_for_load` = complete and matching its manifest (without faultdrill, when
  no manifests are written: complete); :func:`newest_loadable` walks a directory of DCP
  checkpoints newest first (number at the end of the name).
* :func:`loader_position` reads how many samples this rank's ``StatefulDataLoader`` has
  handed out in the current epoch from the loader's own ``state_dict()`` (the sampler's
  ``samples_yielded`` when it records one, else batches yielded times ``batch_size``);
  :func:`data_position` turns it into the ``data_position`` of ``docs/probe.md``: the
  samples of the finished epochs plus those the ``world_size`` ranks handed out in this
  one (every rank the same count, as a distributed sampler gives them).
* Imports torch only inside the functions that need it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faultdrill.integrations import ckptdir
from faultdrill.integrations.digest import state_digest
from faultdrill.probe import ENV_EVENTS_DIR, Probe

__all__ = [
    "METADATA",
    "IncompleteCheckpointError",
    "data_position",
    "is_complete",
    "loader_position",
    "newest_loadable",
    "report_saved",
    "state_components",
    "verify_for_load",
]

#: DCP's metadata file, written last by the coordinator rank.
METADATA = ".metadata"


class IncompleteCheckpointError(OSError):
    """A DCP directory was to be reported as saved but is not complete."""


def is_complete(path: Path) -> tuple[bool, str]:
    """(True, "") if DCP directory ``path`` has its ``.metadata`` and every data file and
    byte range it lists; else (False, why)."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    if not (path / METADATA).is_file():
        return False, f"{path.name}: no {METADATA}: the save never completed"
    try:
        metadata = FileSystemReader(str(path)).read_metadata()
    except Exception as exc:  # a torn or foreign file: any unpickling error means unreadable
        return False, f"{path.name}: unreadable {METADATA} ({type(exc).__name__}: {exc})"
    ends: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        rel = str(getattr(info, "relative_path", ""))
        end = int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0))
        ends[rel] = max(ends.get(rel, 0), end)
    for rel, end in sorted(ends.items()):
        file = path / rel
        if not file.is_file():
            return False, f"{path.name}: {rel} listed in {METADATA} is missing"
        if file.stat().st_size < end:
            return False, f"{path.name}: {rel} is shorter than {METADATA} says ({end} bytes)"
    return True, ""


def verify_for_load(path: Path) -> tuple[ckptdir.Manifest | None, str]:
    """(manifest, "") if ``path`` is complete and matches its manifest; else (None, why).

    Not run under faultdrill (no ``FAULTDRILL_EVENTS_DIR``: :func:`report_saved` wrote no
    manifest), a complete directory is loadable: its manifest is then what ``.metadata``
    says (no file digests)."""
    ok, why = is_complete(path)
    if not ok:
        return None, why
    if not os.environ.get(ENV_EVENTS_DIR) and not ckptdir.manifest_path(path).exists():
        step = ckptdir.trailing_number(path.name) or 0
        return ckptdir.Manifest(path, path, METADATA, "", 0, step, -1), ""
    return ckptdir.verify(path)


def state_components(state: Mapping[str, Any]) -> dict[str, str]:
    """Digests of each top-level entry of a DCP state dict (``{"model": ..., "optimizer":
    ...}``; a ``Stateful`` entry by its ``state_dict()``): this rank's part of it."""
    return {str(name): state_digest(value) for name, value in state.items()}


def newest_loadable(
    root: Path, *, prefix: str = ""
) -> tuple[ckptdir.Manifest | None, list[dict[str, str]]]:
    """The newest DCP directory under ``root`` that :func:`verify_for_load` accepts, and
    ``{"id", "reason"}`` for each newer one it refused."""
    rejected: list[dict[str, str]] = []
    candidates = sorted(
        (p for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix))
        if root.is_dir()
        else [],
        key=lambda p: ckptdir.trailing_number(p.name) or -1,
        reverse=True,
    )
    for path in candidates:
        if ckptdir.trailing_number(path.name) is None:
            continue
        manifest, why = verify_for_load(path)
        if manifest is not None:
            return manifest, rejected
        rejected.append({"id": path.name, "reason": why})
    return None, rejected


def report_saved(
    probe: Probe,
    path: Path,
    *,
    step: int,
    data_position: int,
    latest_file: str = "latest",
    started_mono: float | None = None,
    components: Mapping[str, str] | None = None,
) -> ckptdir.Manifest | None:
    """Seal and report DCP directory ``path`` (see the module docstring); call on every
    rank after ``dcp.save`` returned. Returns the manifest on rank 0, None elsewhere.
    Raises :class:`IncompleteCheckpointError` (rank 0) when the directory is not complete and
    ``OSError`` when sealing fails (both also emitted as ``ckpt_save_failed``)."""
    import torch.distributed as dist

    if not probe.enabled:
        return None  # not run under faultdrill: no manifest, no pointer
    rank = 0
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        rank = dist.get_rank()
    if rank != 0:
        if components is not None:
            probe.components(ckpt_id=path.name, step=step, phase="saved", components=components)
        return None
    began = started_mono if started_mono is not None else time.monotonic()
    try:
        ok, why = is_complete(path)
        if not ok:
            raise IncompleteCheckpointError(why)
        manifest = ckptdir.write_manifest(
            path, main=METADATA, step=step, data_position=data_position
        )
        ckptdir.publish(path.parent, path.name, latest_file=latest_file, sha256=manifest.sha256)
    except OSError as exc:
        probe.checkpoint_failed(
            step=step,
            error=f"{type(exc).__name__}: {exc}",
            errno=exc.errno,
            duration_s=time.monotonic() - began,
        )
        raise
    probe.checkpoint_saved(
        ckpt_id=manifest.id,
        step=step,
        path=str(manifest.path),
        sha256=manifest.sha256,
        data_position=data_position,
        size_bytes=manifest.bytes,
        duration_s=time.monotonic() - began,
        components=components,
    )
    return manifest


def loader_position(state: Mapping[str, Any], *, batch_size: int | None = None) -> int:
    """Samples this rank's ``StatefulDataLoader`` handed out in the current epoch, from its
    ``state_dict()``. Raises ``ValueError`` when the state records neither the sampler's
    ``samples_yielded`` nor (with ``batch_size`` given) the batches yielded."""
    sampler = state.get("_sampler_iter_state")
    if isinstance(sampler, Mapping) and isinstance(sampler.get("samples_yielded"), int):
        return int(sampler["samples_yielded"])
    batches = state.get("_num_yielded")
    if isinstance(batches, int) and batch_size is not None:
        return batches * batch_size
    raise ValueError(
        "the loader's state_dict records no samples_yielded"
        + ("" if batch_size is not None else "; pass batch_size to count its batches")
    )


def data_position(
    state: Mapping[str, Any],
    *,
    epoch: int,
    epoch_len: int,
    world_size: int = 1,
    batch_size: int | None = None,
) -> int:
    """``docs/probe.md``'s ``data_position`` from one rank's loader state: ``epoch *
    epoch_len`` plus what the ``world_size`` ranks handed out in this epoch."""
    return epoch * epoch_len + world_size * loader_position(state, batch_size=batch_size)
