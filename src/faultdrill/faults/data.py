"""Data faults: the job's data source becomes unreadable for a while.

``data-outage`` acts on the item's own data directory (``rundir.data_dir``: the shard
files the reference workload's file-backed dataset reads, ``data_files: true``), never on
the plan's ``data.path`` (a host path the dossier only hashes). Mechanism: the same FUSE
mirror as ``storage-outage`` mode ``unreachable`` (:mod:`faultdrill.host.fuse_mirror`
through the platform's ``StorageActions``), put in front of the data directory before the
job starts (``prepare``: the job writes and reads its shards through it from the start, as
through a network filesystem), and for ``for_s`` seconds

* ``error``: every request is answered ``EIO`` (a soft mount whose server is gone): a
  loader that retries waits, one that does not crashes, a bad one skips data;
* ``hang``: every request blocks (a hard mount whose server is down): reads stall.

Why the mirror rather than a read-only bind or an unmount: a read-only bind does not stop
reads, and unmounting a directory the job has open (or in its working set) changes what
the path names instead of making it fail; only a server that fails or stops answering
gives the two behaviours a real data outage has, with files and offsets left as they were.

Every change is recorded in the ledger before it is made; the outage is undone on revert,
on a signal, or by ``faultdrill cleanup``; the mirror stays until the end of the item.
Whether a sample was skipped or read twice is the sample ledger's
(``progress.sample-ledger``); how the job lived through the outage is ``progress.data-outage``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faultdrill.errors import FaultError
from faultdrill.faults.api import Fault, FaultContext, FaultSpec, cannot, command_of, register
from faultdrill.plan.faults import DataOutageSpec
from faultdrill.platforms.api import Ability, StorageActions

__all__ = ["DataOutage", "DataOutageSpec"]


@register
class DataOutage(Fault):
    """The job's data directory fails (EIO) or hangs for ``for_s`` seconds."""

    kind = "data-outage"
    spec_model = DataOutageSpec
    requires = frozenset({Ability.DATA_OUTAGE})

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._data_dir: Path | None = None

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        task = getattr(plan, "task", None)
        workload = getattr(task, "workload", {}) or {}
        if workload.get("data_files") is not True:
            return (
                "data-outage needs a job that reads its data from the item's data directory: "
                "set task.workload.data_files: true (the reference workload's file-backed "
                "dataset)"
            )
        return None

    def _storage(self, ctx: FaultContext) -> StorageActions:
        if not isinstance(ctx.platform, StorageActions):
            raise cannot(ctx, Ability.DATA_OUTAGE)
        return ctx.platform

    def _data(self, ctx: FaultContext) -> Path:
        """The data directory, resolved and contained (made if the job has not yet), checked
        again right before acting."""
        if ctx.data_dir is None:
            raise FaultError("data-outage: the drill did not say where the job's data is")
        ctx.checked_data_dir().mkdir(parents=True, exist_ok=True)
        self._data_dir = ctx.checked_data_dir()
        return self._data_dir

    def prepare(self, ctx: FaultContext) -> dict[str, Any]:
        storage = self._storage(ctx)
        data = self._data(ctx)
        changes = storage.storage_prepare("unreachable", data, size_mb=0)
        facts: dict[str, Any] = {"path": str(data)}
        for result in self.apply_changes(ctx, changes, revert=False):
            facts.update(result)
        return {**facts, "command": command_of(changes)}

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, DataOutageSpec)
        data = self._data(ctx)
        changes = self._storage(ctx).storage_unreachable(data, server=spec.mode)
        facts: dict[str, Any] = {"mode": spec.mode, "path": str(data)}
        for result in self.apply_changes(ctx, changes):
            facts.update(result)
        return {**facts, "command": command_of(changes)}

    def revert(self, ctx: FaultContext) -> None:
        data = self._data_dir
        try:
            super().revert(ctx)
        finally:
            if data is not None and isinstance(ctx.platform, StorageActions):
                ctx.platform.storage_release(data)
