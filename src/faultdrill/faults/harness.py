"""Harness-side negative controls: defects the harness plants without the job's help.

A negative control proves that a check can fail on *this* workload. A job we cannot change
has no known-bad switch, so the harness makes the defect itself, right before a restart
it causes (a worker killed, like ``kill-worker``), and the named check must catch what
follows:

================  ========================================  ==============================
kind              what the harness does                     caught by
================  ========================================  ==============================
rollback-latest   rewrites the ``latest`` pointer to name   ``progress.resume-point``
                  an older checkpoint (``back`` saves
                  back), then kills a worker: a job that
                  follows its pointer resumes too far back
hide-checkpoints  moves everything in the checkpoint        ``progress.no-restart-from-
                  directory aside, then kills a worker:     zero``
                  the restart finds nothing and starts
                  from step 0; the entries come back at
                  the end of the item where their names
                  are free (the others stay under
                  ``faults/``, as evidence)
stale-copy        starts a copy of a rank's replica on its  ``resources.no-stale-replica``
                  node (its command line, environment and
                  working directory: ability
                  ``replica-copy``), then kills the
                  original: the platform restarts the job
                  while the copy runs on; the undo stops
                  the copy
================  ========================================  ==============================

The checkpoint files are reached where the platform says the harness can reach them
(``checkpoint-files``); the restart is a signal through the platform (``signal-rank``).
The injection event names no ``ckpt_id`` (the checks would then treat that checkpoint as
damaged, and a resume from an older one as right): it names ``pointer_from`` /
``pointer_to`` or ``hidden``.

A plan asks for these controls in one line (``controls: {harness: all}``; see
:class:`HarnessControls`).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from faultdrill.errors import FaultError
from faultdrill.faults.api import (
    FaultContext,
    FaultSpec,
    WorkerFault,
    cannot,
    is_single_name,
    register,
)
from faultdrill.faults.process import KillWorker, KillWorkerSpec, WorkerTarget
from faultdrill.ledger import PATH, NotOursError, undoer
from faultdrill.plan.faults import (  # noqa: F401
    EXPECTED_CHECK,
    HARNESS_CONTROLS,
    TITLE_MESSAGE,
    HarnessControls,
    HarnessKind,
    HideCheckpointsSpec,
    RollbackLatestSpec,
    StaleCopySpec,
    _restart_target,
    expand_controls,
)
from faultdrill.platforms.api import (
    Ability,
    Change,
    CopiesReplicas,
    ReachesCheckpoints,
    SignalsRanks,
)

__all__ = [
    "EXPECTED_CHECK",
    "HARNESS_CONTROLS",
    "TITLE_MESSAGE",
    "HarnessControls",
    "HideCheckpointsSpec",
    "RollbackLatestSpec",
    "StaleCopySpec",
    "expand_controls",
]


# --- the changes to the job's checkpoint files (the harness's own acts) ------------------


def _durable_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (temp file, fsync, rename), as a job publishes."""
    tmp = path.with_name(f".faultdrill-{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@undoer("ckpt-pointer", owns={"path": PATH})
def _undo_pointer(data: dict[str, Any]) -> None:
    """Put the pointer's earlier text back, only if it still holds what the harness wrote
    (the job may have published a newer checkpoint since: that is left alone)."""
    path = Path(str(data["path"]))
    if path.is_symlink():
        raise NotOursError(f"{path} is a symbolic link now; left alone")
    try:
        now = path.read_text()
    except FileNotFoundError:
        return
    if now == data.get("after"):
        _durable_text(path, str(data["before"]))


def pointer_change(pointer: Path, before: str, after: str, label: str) -> Change:
    """Rewrite the pointer file ``pointer`` from ``before`` to ``after`` (ledger kind
    ``ckpt-pointer``; the undo puts ``before`` back if nothing moved it since)."""

    def apply(note: Any) -> dict[str, Any]:
        if pointer.read_text() != before:
            raise FaultError(f"{pointer} changed while the harness rewrote it; not rewritten")
        _durable_text(pointer, after)
        return {}

    data = {"path": str(pointer), "before": before, "after": after}
    return Change("ckpt-pointer", data, label, f"echo {after.strip()!r} > {pointer}", apply)


_HIDDEN = re.compile(r"hidden-.+")


@undoer("ckpt-hide", owns={"ckpt_dir": PATH, "hidden": PATH})
def _undo_hide(data: dict[str, Any]) -> None:
    """Move each hidden entry back where its name is free; the others stay hidden (the
    job wrote new ones under those names). Refuses paths that are not the recorded
    pair (a ``hidden-*`` directory under ``faults/`` beside the checkpoint directory)."""
    ckpt, hidden = Path(str(data["ckpt_dir"])), Path(str(data["hidden"]))
    if not hidden.exists():
        return
    if (
        hidden.is_symlink()
        or ckpt.is_symlink()
        or hidden.parent != ckpt.parent / "faults"
        or not _HIDDEN.fullmatch(hidden.name)
    ):
        raise NotOursError(f"{hidden} is not where the harness hid {ckpt}; left alone")
    ckpt.mkdir(exist_ok=True)
    for entry in sorted(hidden.iterdir()):
        if not os.path.lexists(ckpt / entry.name):
            os.rename(entry, ckpt / entry.name)
    with contextlib.suppress(OSError):
        hidden.rmdir()  # only when every entry went back


def hide_change(ckpt: Path, hidden: Path) -> Change:
    """Move every entry of ``ckpt`` into ``hidden`` (ledger kind ``ckpt-hide``)."""

    def apply(note: Any) -> dict[str, Any]:
        hidden.mkdir(parents=True)
        moved = []
        for entry in sorted(ckpt.iterdir()):
            os.rename(entry, hidden / entry.name)
            moved.append(entry.name)
        return {"hidden": moved, "hidden_to": str(hidden)}

    data = {"ckpt_dir": str(ckpt), "hidden": str(hidden)}
    label = f"hide the contents of {ckpt} in {hidden}"
    return Change("ckpt-hide", data, label, f"mv {ckpt}/* {hidden}/", apply)


def _trailing_number(name: str) -> int | None:
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits else None


def older_checkpoint(view: Path, latest_file: str, current: str, back: int) -> str | None:
    """The checkpoint ``back`` saves older than ``current`` in ``view``, by the step number
    at the end of their names (``step-000020`` -> 20); None when there is none."""
    now = _trailing_number(current)
    if now is None:
        return None
    older = sorted(
        (n, e.name)
        for e in view.iterdir()
        if e.name != latest_file
        and not e.name.startswith(".")
        and (n := _trailing_number(e.name)) is not None
        and n < now
    )
    return older[-back][1] if len(older) >= back else None


# --- the faults ----------------------------------------------------------------------------


def _restart(ctx: FaultContext, target: WorkerTarget) -> dict[str, Any]:
    killed = KillWorker(KillWorkerSpec(target=target)).inject(ctx)
    return {f"restart_{k}": v for k, v in killed.items()}


def _view(ctx: FaultContext) -> tuple[Path, Path]:
    """(the checkpoint directory, where the harness reaches it now)."""
    ckpt_dir = ctx.checked_ckpt_dir()
    files = ctx.platform
    if not isinstance(files, ReachesCheckpoints):
        raise cannot(ctx, Ability.CHECKPOINT_FILES)
    return ckpt_dir, files.checkpoint_view(ckpt_dir)


@register
class RollbackLatest(WorkerFault):
    """Rewrite ``latest`` to an older checkpoint, then restart the job (module docstring)."""

    kind = "rollback-latest"
    spec_model = RollbackLatestSpec
    requires = frozenset({Ability.CHECKPOINT_FILES, Ability.SIGNAL_RANK})
    worker_field = "restart"

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        if not plan.checkpoint.latest_file:
            return "rollback-latest needs checkpoint.latest_file (the pointer it rolls back)"
        return super().validate_against(spec, plan)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, RollbackLatestSpec)
        _, view = _view(ctx)
        pointer = view / ctx.latest_file
        try:
            before = pointer.read_text(errors="replace")
        except OSError as exc:
            raise FaultError(f"no {ctx.latest_file} pointer to roll back: {exc.strerror}") from exc
        parts = before.split()
        if not parts or not is_single_name(parts[0]):
            raise FaultError(f"{ctx.latest_file} names no checkpoint ({before[:80]!r})")
        older = older_checkpoint(view, ctx.latest_file, parts[0], spec.back)
        if older is None:
            raise FaultError(
                f"no checkpoint {spec.back} save(s) older than {parts[0]} to roll back to "
                "(trigger the control after more checkpoints, e.g. after_checkpoint: 2)"
            )
        # the job's own format, the id swapped (a digest beside it is the job's business)
        after = before.replace(parts[0], older, 1)
        label = f"{ctx.latest_file}: {parts[0]} -> {older}"
        change = pointer_change(pointer, before, after, label)
        self.apply_change(ctx, change)
        facts = {"pointer_from": parts[0], "pointer_to": older, "command": change.command}
        return {**facts, **_restart(ctx, spec.restart)}


@register
class HideCheckpoints(WorkerFault):
    """Hide everything in the checkpoint directory, then restart the job (module docstring)."""

    kind = "hide-checkpoints"
    spec_model = HideCheckpointsSpec
    requires = frozenset({Ability.CHECKPOINT_FILES, Ability.SIGNAL_RANK})

    worker_field = "restart"

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, HideCheckpointsSpec)
        ckpt, view = _view(ctx)
        if view != ckpt:
            raise FaultError(
                f"{ckpt} is served through {view} now; hide-checkpoints moves plain files only"
            )
        if not any(ckpt.iterdir()):
            raise FaultError(f"{ckpt} is empty: nothing to hide (trigger after a checkpoint)")
        base = ckpt.parent / "faults" / f"hidden-{ckpt.name}"
        hidden, n = base, 1
        while hidden.exists():
            n += 1
            hidden = base.with_name(f"{base.name}-{n}")
        change = hide_change(ckpt, hidden)
        facts = self.apply_change(ctx, change)
        return {**facts, "command": change.command, **_restart(ctx, spec.restart)}


@register
class StaleCopy(WorkerFault):
    """Start a copy of a rank's replica, then kill the original (module docstring)."""

    kind = "stale-copy"
    spec_model = StaleCopySpec
    requires = frozenset({Ability.REPLICA_COPY, Ability.SIGNAL_RANK})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, StaleCopySpec)
        copier, signals = ctx.platform, ctx.platform
        if not isinstance(copier, CopiesReplicas):
            raise cannot(ctx, Ability.REPLICA_COPY)
        if not isinstance(signals, SignalsRanks):
            raise cannot(ctx, Ability.SIGNAL_RANK)
        original = signals.rank_replica(rank=spec.target.rank, node=spec.target.node)
        change = copier.replica_copy(original)
        (facts,) = self.apply_to_worker(ctx, original, [change], "was copied")
        facts["command"] = change.command
        if spec.kill_original:
            kill = signals.signal_replica(original, "SIGKILL")
            self.apply_change(ctx, kill)
            facts.update(restart_pid=original.pid, restart_signal="SIGKILL")
        return facts


# --- the plan's one line ------------------------------------------------------------------
