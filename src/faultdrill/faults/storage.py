"""Storage faults (round 3): the checkpoint directory stops taking writes for a while.

``storage-outage`` makes the scenario's checkpoint directory, through the platform
(``StorageActions``; the local platform mounts over the directory of this host):

* ``read-only``: writes fail with ``EROFS``;
* ``full``: the directory's filesystem (a small one from the start of the item, sized
  ``fs_size_mb``) is filled until ``leave_free_kb`` remain: a checkpoint save fails with
  ``ENOSPC``, a small write such as a pointer file still succeeds;
* ``unreachable``: the directory is served by a server for the whole item, and the outage
  takes that server away, as chosen by ``server``: ``hang`` (every request blocks, as on an
  NFS hard mount whose server is down; a save blocks its rank until the server returns) or
  ``error`` (every request fails with ``EIO``, as on a soft mount);

for ``for_s`` seconds, timed (by the scenario's trigger) to overlap a checkpoint save; with
``until_save_failed`` the engine ends it as soon as a save has failed in it (``for_s`` then
bounds it), so it overlaps the save it aims at however fast the job steps, and no later one.

``storage-slow`` serves the directory through the same FUSE mirror as ``unreachable``, and
for ``for_s`` seconds its server answers each request (``ops``: those that change the
directory, or all) ``latency_ms`` late: nothing fails, saves take longer. Besides the looks
at its start and end it watches the pointer all along (``storage_observed`` ``during``, each
time ``latest`` changes): a job that publishes a checkpoint before its files are written is
caught in the act, while the slow server stretches that moment.

The
fault looks at the checkpoint pointer when it starts and just before it ends
(``storage_observed`` events), where the platform says the harness can read the files
(``checkpoint_view``, which still answers while the server hangs): what ``latest`` named,
and whether that checkpoint verifies (its ``manifest.json``, if it has one, against its
state file). Checks use that to prove that a failed save never became ``latest``.

Every change is recorded in the ledger before it is made, and undone on revert, on a
signal, or by ``faultdrill cleanup``; what ``prepare`` put in place stays until the end of
the item.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from faultdrill.errors import FaultError
from faultdrill.faults.api import (
    Fault,
    FaultContext,
    FaultSpec,
    cannot,
    command_of,
    is_single_name,
    register,
)
from faultdrill.plan.faults import StorageOutageSpec, StorageSlowSpec
from faultdrill.platforms.api import Ability, ReachesCheckpoints, StorageActions
from faultdrill.readings.inventory import read_pointer, verify_dir

__all__ = [
    "StorageOutage",
    "StorageOutageSpec",
    "StorageSlow",
    "StorageSlowSpec",
    "observe_pointer",
]

_MODE_ABILITY = {
    "read-only": Ability.STORAGE_READ_ONLY,
    "full": Ability.STORAGE_FULL,
    "unreachable": Ability.STORAGE_UNREACHABLE,
}


# --- observing the pointer -----------------------------------------------------------------


def observe_pointer(ckpt_dir: Path, latest_file: str) -> dict[str, Any]:
    """What the pointer names now, and whether that checkpoint verifies by its manifest."""
    out: dict[str, Any] = {"latest": None, "latest_verifies": None, "latest_problem": None}
    if not latest_file:
        out["latest_problem"] = "the plan names no pointer file"
        return out
    try:
        out["latest"] = read_pointer(ckpt_dir / latest_file)
    except FileNotFoundError:
        return out
    except OSError as exc:
        out["latest_problem"] = f"cannot read {latest_file}: {exc.strerror}"
        return out
    if out["latest"] and not is_single_name(out["latest"]):
        out["latest_verifies"] = False
        out["latest_problem"] = (
            f"{latest_file} names {out['latest']!r}, which is not a checkpoint id (one plain "
            "name inside the checkpoint directory)"
        )
    elif out["latest"]:
        ok, why = verify_dir(ckpt_dir / out["latest"])
        out["latest_verifies"] = ok
        out["latest_problem"] = why or None
    return out


# --- the fault ---------------------------------------------------------------------------


class _CheckpointStorageFault(Fault):
    """What the storage faults share: the checkpoint directory, contained; the platform's
    storage actions; looks at the pointer (``storage_observed``) through the view that
    still answers while the storage does not; the view released at the end."""

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._observed_end = False
        self._ckpt_dir: Path | None = None

    def _storage(self, ctx: FaultContext, ability: Ability) -> StorageActions:
        platform = ctx.platform
        if not isinstance(platform, StorageActions):
            raise cannot(ctx, ability)
        return platform

    def _view(self, ctx: FaultContext, ckpt: Path) -> Path:
        platform = ctx.platform
        if not isinstance(platform, ReachesCheckpoints):
            raise cannot(ctx, Ability.CHECKPOINT_FILES)
        return platform.checkpoint_view(ckpt)

    def _ckpt(self, ctx: FaultContext) -> Path:
        """The checkpoint directory, resolved and contained (made if it is not there yet:
        it is the run's own), checked again right before acting."""
        if ctx.ckpt_dir is None:
            raise FaultError(f"{self.kind}: the drill did not say where the checkpoints are")
        ctx.checked_ckpt_dir().mkdir(parents=True, exist_ok=True)
        self._ckpt_dir = ctx.checked_ckpt_dir()  # again: resolved now that it exists
        return self._ckpt_dir

    def _look(self, ctx: FaultContext, ckpt: Path, when: str) -> dict[str, Any]:
        """Look at the pointer now and put it on the timeline; returns what was seen."""
        seen = observe_pointer(self._view(ctx, ckpt), ctx.latest_file)
        ctx.sink.emit("fault", "storage_observed", when=when, fault=self.kind, **seen)
        return seen

    def _look_at_end(self, ctx: FaultContext) -> None:
        """The last look, once, before the revert acts (only if the fault acted)."""
        ckpt = self._ckpt_dir
        if self.entry_ids and not self._observed_end and ckpt is not None:
            self._observed_end = True
            with contextlib.suppress(OSError, FaultError):
                self._look(ctx, ckpt, "end")

    def revert(self, ctx: FaultContext) -> None:
        self._look_at_end(ctx)
        try:
            super().revert(ctx)
        finally:
            ckpt = self._ckpt_dir
            if ckpt is not None and isinstance(ctx.platform, StorageActions):
                ctx.platform.storage_release(ckpt)


@register
class StorageOutage(_CheckpointStorageFault):
    """The checkpoint directory goes read-only, full or unreachable for ``for_s`` seconds
    (or until a save failed in it: ``until_save_failed``)."""

    kind = "storage-outage"
    spec_model = StorageOutageSpec

    @classmethod
    def requires_for(cls, spec: FaultSpec) -> frozenset[Ability]:
        assert isinstance(spec, StorageOutageSpec)
        return frozenset({_MODE_ABILITY[spec.mode], Ability.CHECKPOINT_FILES})

    def prepare(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, StorageOutageSpec)
        if spec.mode == "read-only":
            return {}
        storage = self._storage(ctx, _MODE_ABILITY[spec.mode])
        ckpt = self._ckpt(ctx)
        changes = storage.storage_prepare(spec.mode, ckpt, size_mb=spec.fs_size_mb)
        facts: dict[str, Any] = {"mode": spec.mode}
        if spec.mode == "unreachable":
            facts["server"] = spec.server_behaviour
        facts["path"] = str(ckpt)
        for result in self.apply_changes(ctx, changes, revert=False):
            facts.update(result)
        return {**facts, "command": command_of(changes)}

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, StorageOutageSpec)
        storage = self._storage(ctx, _MODE_ABILITY[spec.mode])
        ckpt = self._ckpt(ctx)
        if spec.mode == "read-only":
            changes = storage.storage_read_only(ckpt)
        elif spec.mode == "full":
            changes = storage.storage_full(ckpt, leave_free_kb=spec.leave_free_kb)
        else:
            changes = storage.storage_unreachable(ckpt, server=spec.server_behaviour)
        before = self._look(ctx, ckpt, "start")
        facts: dict[str, Any] = {"mode": spec.mode}
        if spec.mode == "unreachable":
            facts["server"] = spec.server_behaviour
        facts["path"] = str(ckpt)
        for result in self.apply_changes(ctx, changes):
            facts.update(result)
        return {**facts, "latest_before": before["latest"], "command": command_of(changes)}


def _timed_probe_write(ckpt: Path) -> float:
    """Seconds a small durable write into ``ckpt`` takes (create, write, fsync, unlink): the
    proof, on the timeline, that the slowdown is in force. Made after the change is applied,
    so that the injection's stamp is when the delay began."""
    probe = ckpt / ".faultdrill-probe"
    began = time.monotonic()
    with open(probe, "wb") as f:
        f.write(b"slow")
        f.flush()
        os.fsync(f.fileno())
    probe.unlink()
    return round(time.monotonic() - began, 3)


#: How often ``storage-slow`` reads the pointer (a tiny file, through the view underneath).
WATCH_S = 0.05


@register
class StorageSlow(_CheckpointStorageFault):
    """The checkpoint directory's server answers each request ``latency_ms`` late for
    ``for_s`` seconds; the pointer is watched all along (``storage_observed`` ``during``)."""

    kind = "storage-slow"
    spec_model = StorageSlowSpec
    requires = frozenset({Ability.STORAGE_SLOW, Ability.CHECKPOINT_FILES})

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def prepare(self, ctx: FaultContext) -> dict[str, Any]:
        storage = self._storage(ctx, Ability.STORAGE_SLOW)
        ckpt = self._ckpt(ctx)
        changes = storage.storage_prepare("slow", ckpt, size_mb=0)
        facts: dict[str, Any] = {"mode": "slow", "path": str(ckpt)}
        for result in self.apply_changes(ctx, changes, revert=False):
            facts.update(result)
        return {**facts, "command": command_of(changes)}

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, StorageSlowSpec)
        storage = self._storage(ctx, Ability.STORAGE_SLOW)
        ckpt = self._ckpt(ctx)
        changes = storage.storage_slow(ckpt, latency_ms=spec.latency_ms, ops=spec.ops)
        before = self._look(ctx, ckpt, "start")
        facts: dict[str, Any] = {"latency_ms": spec.latency_ms, "ops": spec.ops}
        facts["path"] = str(ckpt)
        for result in self.apply_changes(ctx, changes):
            facts.update(result)
        try:
            facts["probe_write_s"] = _timed_probe_write(self._ckpt(ctx))
        except OSError as exc:  # said, not fatal: the delay itself is in force
            facts["probe_write_error"] = f"{type(exc).__name__}: {exc}"
        self._thread = threading.Thread(
            target=self._watch, args=(ctx, ckpt, before["latest"]), name="storage-slow", daemon=True
        )
        self._thread.start()
        return {**facts, "latest_before": before["latest"], "command": command_of(changes)}

    def _watch(self, ctx: FaultContext, ckpt: Path, latest: str | None) -> None:
        """Until the revert: each time the pointer names another checkpoint, look at it
        (whether that checkpoint verifies at the moment it was published)."""
        pointer = ctx.latest_file
        while pointer and not self._stop.wait(WATCH_S):
            try:
                now = read_pointer(self._view(ctx, ckpt) / pointer)
            except (OSError, FaultError):
                continue  # not there yet, or being replaced: the next read sees it
            if now is not None and now != latest:  # empty: a pointer rewritten in place
                with contextlib.suppress(OSError, FaultError):
                    latest = self._look(ctx, ckpt, "during")["latest"]

    def revert(self, ctx: FaultContext) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        super().revert(ctx)
