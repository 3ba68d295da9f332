"""Checkpoint faults (round 3): the newest published checkpoint is damaged before a restart.

``corrupt-checkpoint`` damages the checkpoint the pointer file (``latest``) names, then
(by default) kills one worker so that the job must restart and load:

=================  ======================================================================
flip-bytes         flip the lowest bit of ``flip_count`` bytes inside the largest tensor of
                   the state file (for a torch zip archive; else the middle of the file):
                   the file still unpickles, only a digest check notices
truncate           cut the state file to half its size
remove-manifest    delete the checkpoint's ``manifest.json``
latest-to-missing  move the checkpoint's directory out of the checkpoint dir, so that the
                   pointer names a missing directory (kept under ``faults/`` as evidence)
=================  ======================================================================

The files are reached where the platform says the harness can reach them (ability
``checkpoint-files``); the restart is the platform's signal to a rank (``signal-rank``).
The injection event names the damaged checkpoint (``ckpt_id``), which the progress checks
treat as invalid from then on. Damage is not reverted: the damaged checkpoint is the
evidence; its ledger entry (kind ``ckpt-damage``, registered here: it is the harness's
own act on the job's files, not a platform's) only records what was done.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

from faultdrill.errors import FaultError
from faultdrill.faults.api import (
    Fault,
    FaultContext,
    FaultSpec,
    cannot,
    is_single_name,
    register,
)
from faultdrill.faults.process import KillWorker, KillWorkerSpec
from faultdrill.ledger import PATH, undoer
from faultdrill.plan.faults import CorruptCheckpointSpec, Damage
from faultdrill.platforms.api import Ability, ReachesCheckpoints
from faultdrill.readings.inventory import read_pointer

__all__ = ["CorruptCheckpointSpec", "damage_checkpoint"]


@undoer("ckpt-damage", owns={"ckpt_dir": PATH, "moved_to": PATH})
def _undo_damage(data: dict[str, Any]) -> None:
    """Damage is not taken back: the damaged checkpoint is evidence. Recorded so the ledger
    shows what was done, and where the moved directory went."""


def _sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _state_file(ckpt: Path) -> Path:
    """The checkpoint's state file: the one its manifest names, else the largest file."""
    try:
        manifest = json.loads((ckpt / "manifest.json").read_text())
        name = manifest.get("file") if isinstance(manifest, dict) else None
        # The manifest is the job's data: only a plain file of this very directory.
        if isinstance(name, str) and is_single_name(name) and _plain_file(ckpt / name):
            return ckpt / name
    except (OSError, ValueError):
        pass
    files = [p for p in ckpt.iterdir() if _plain_file(p) and p.name != "manifest.json"]
    if not files:
        raise FaultError(f"{ckpt} holds no state file to damage")
    return max(files, key=lambda p: p.stat().st_size)


def _tensor_region(path: Path) -> tuple[int, int, str]:
    """(offset, length, member) of the largest stored tensor in a torch zip archive, or the
    middle half of the file when it is not one."""
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as z:
            members = [
                i
                for i in z.infolist()
                if "/data/" in i.filename and i.compress_type == zipfile.ZIP_STORED
            ]
        if members:
            big = max(members, key=lambda i: i.file_size)
            with open(path, "rb") as f:
                f.seek(big.header_offset)
                header = f.read(30)
            name_len = int.from_bytes(header[26:28], "little")
            extra_len = int.from_bytes(header[28:30], "little")
            return big.header_offset + 30 + name_len + extra_len, big.file_size, big.filename
    except (zipfile.BadZipFile, OSError):
        pass
    return size // 4, max(1, size // 2), "(whole file)"


def damage_checkpoint(
    ckpt_dir: Path, cid: str, damage: Damage, *, flip_count: int, evidence_dir: Path
) -> dict[str, Any]:
    """Apply ``damage`` to checkpoint ``cid``; returns facts. Raises FaultError, also when
    ``cid`` is not a single plain name (the pointer's content is the job's data: ``/etc``
    or ``../..`` must not lead the damage outside ``ckpt_dir``)."""
    if not is_single_name(cid):
        raise FaultError(
            f"the pointer names {cid!r}, which is not a checkpoint id (one plain name inside "
            f"{ckpt_dir}); refusing to damage anything"
        )
    ckpt = ckpt_dir / cid
    if ckpt.is_symlink():
        raise FaultError(f"{ckpt} is a symbolic link, not a checkpoint directory; left alone")
    if not ckpt.is_dir():
        raise FaultError(f"checkpoint directory {ckpt} does not exist")
    facts: dict[str, Any] = {"ckpt_id": cid, "damage": damage}
    if damage == "latest-to-missing":
        evidence_dir.mkdir(parents=True, exist_ok=True)
        dest = evidence_dir / f"{cid}.moved-away"
        n = 1
        while dest.exists():
            n += 1
            dest = evidence_dir / f"{cid}.moved-away-{n}"
        shutil.move(str(ckpt), str(dest))
        facts.update(moved_to=str(dest), command=f"mv {ckpt} {dest}")
        return facts
    if damage == "remove-manifest":
        manifest = ckpt / "manifest.json"
        if not manifest.is_file():
            raise FaultError(f"{ckpt} has no manifest.json to remove")
        manifest.unlink()
        facts.update(path=str(manifest), command=f"rm {manifest}")
        return facts
    state = _state_file(ckpt)
    facts.update(path=str(state), sha256_before=_sha256(state), bytes_before=state.stat().st_size)
    if damage == "truncate":
        new_size = state.stat().st_size // 2
        os.truncate(state, new_size)
        facts.update(bytes_after=new_size, command=f"truncate -s {new_size} {state}")
    else:
        offset, length, member = _tensor_region(state)
        stride = max(4, (length // flip_count) // 4 * 4)
        offsets = [offset + i * stride for i in range(flip_count) if i * stride < length]
        with open(state, "r+b") as f:
            for off in offsets:
                f.seek(off)
                byte = f.read(1)
                f.seek(off)
                f.write(bytes([byte[0] ^ 0x01]))
            f.flush()
            os.fsync(f.fileno())
        facts.update(
            member=member,
            flipped_offsets=offsets[:16],
            flipped=len(offsets),
            command=f"flip bit 0 of {len(offsets)} bytes of {member} in {state}",
        )
    facts["sha256_after"] = _sha256(state)
    return facts


@register
class CorruptCheckpoint(Fault):
    """Damage the checkpoint ``latest`` names, then restart the job by killing a worker."""

    kind = "corrupt-checkpoint"
    spec_model = CorruptCheckpointSpec
    requires = frozenset({Ability.CHECKPOINT_FILES})

    @classmethod
    def requires_for(cls, spec: FaultSpec) -> frozenset[Ability]:
        assert isinstance(spec, CorruptCheckpointSpec)
        if spec.restart is None:
            return cls.requires
        return cls.requires | {Ability.SIGNAL_RANK}

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        assert isinstance(spec, CorruptCheckpointSpec)
        world = plan.resources.world_size
        rank = spec.restart.rank if spec.restart is not None else None
        if rank is not None and rank >= world:
            return f"corrupt-checkpoint restart rank {rank} does not exist (world size {world})"
        if not plan.checkpoint.latest_file:
            return "corrupt-checkpoint needs checkpoint.latest_file (the pointer it follows)"
        return None

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, CorruptCheckpointSpec)
        if ctx.ckpt_dir is None:
            raise FaultError("corrupt-checkpoint: the drill did not say where checkpoints are")
        ckpt_dir = ctx.checked_ckpt_dir()
        files = ctx.platform
        if not isinstance(files, ReachesCheckpoints):
            raise cannot(ctx, Ability.CHECKPOINT_FILES)
        view = files.checkpoint_view(ckpt_dir)
        try:
            cid = read_pointer(view / ctx.latest_file) or ""
        except OSError as exc:
            raise FaultError(f"no {ctx.latest_file} pointer to follow: {exc.strerror}") from exc
        if not cid:
            raise FaultError(f"{ctx.latest_file} names no checkpoint yet")
        if not is_single_name(cid):
            raise FaultError(
                f"{ctx.latest_file} names {cid!r}, not a checkpoint id (one plain name); "
                "refusing to damage anything"
            )
        evidence = ckpt_dir.parent / "faults"
        eid = ctx.ledger.record(
            "ckpt-damage",
            {"ckpt_dir": str(ckpt_dir), "ckpt_id": cid, "damage": spec.damage},
            f"{spec.damage} on checkpoint {cid}",
        )
        facts = damage_checkpoint(
            view, cid, spec.damage, flip_count=spec.flip_count, evidence_dir=evidence
        )
        ctx.ledger.update(eid, **{k: v for k, v in facts.items() if k == "moved_to"})
        ctx.ledger.mark_applied(eid)
        ctx.ledger.revert(eid)  # nothing to take back; closes the entry
        if spec.restart is not None:
            killed = KillWorker(KillWorkerSpec(target=spec.restart)).inject(ctx)
            facts.update({f"restart_{k}": v for k, v in killed.items()})
        return facts
