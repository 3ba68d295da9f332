"""The probe's evidence from a PyTorch Lightning ``Trainer``: one ``Callback``.

::

    loader = StatefulDataLoader(ObservedDataset(ds), batch_size=4,
                                collate_fn=ObservedCollator(default_collate))
    fd = FaultdrillCallback()
    trainer = pl.Trainer(callbacks=[fd, ModelCheckpoint(dirpath=ckpt, ...)], ...)
    trainer.fit(module, loader, ckpt_path=fd.verified_checkpoint(ckpt))

Contract
--------
* ``setup`` (stage ``fit``; the process group exists): ``run_start`` on every rank, and the
  strategy's ``CheckpointIO`` is wrapped (:class:`ReportingCheckpointIO`) so that the
  callback learns which file Lightning really loads and when a save is on disk.
* ``on_train_start`` (model, optimizer, loops and loader restored): ``ckpt_load`` with the
  file Lightning loaded, the ``global_step`` the checkpoint holds, ``verified`` only if the
  file matches the manifest written when it was saved (``<file>.manifest.json``), and the
  checkpoints :meth:`FaultdrillCallback.verified_checkpoint` refused; or ``ckpt_none``.
  With the load, ``ckpt_components`` (``restored``): digests of the module's state dict,
  the optimizers' and the LR schedulers' states as the strategy would save them now.
* ``on_train_batch_start`` pops the batch's dataset indices (the training step never sees
  them; the dataset must be an :class:`~faultdrill.integrations.observe.ObservedDataset`
  and the batch a mapping); ``on_train_batch_end`` records the micro-batch with the
  training step's loss and, when ``global_step`` advanced (an optimizer step happened),
  writes the ``step`` event: ids ``current_epoch * len(dataset) + index``, the mean
  micro-batch loss of this rank.
* ``on_save_checkpoint`` (every rank, before the file is written) puts the data position
  into the checkpoint (``checkpoint["faultdrill"]``): the one resumed from plus the
  samples all ranks observed since, summed over the process group. Once the wrapped
  ``CheckpointIO`` has written the file (rank 0), it fsyncs and hashes it, writes its
  manifest durably, moves the ``latest`` pointer in the checkpoint's directory
  (``<file name> <sha256>``) and emits ``ckpt_save`` with ``ckpt_components`` (``saved``:
  digests of the checkpoint's ``state_dict``, ``optimizer_states`` and ``lr_schedulers``,
  rank 0's; Lightning saves no RNG state); a failure is ``ckpt_save_failed`` and raised.
  Removing a checkpoint removes its manifest.
* Not run under faultdrill (the probe is off) the callback wraps nothing and writes
  nothing; :meth:`FaultdrillCallback.verified_checkpoint` then returns the newest
  checkpoint, unverified.
* ``on_train_end``: ``run_end`` with the sha256 of the module's state_dict.

A checkpoint is the ``.ckpt`` file (its manifest ``<file>.manifest.json``, its id the
file's name), or with ``checkpoint_dirs=True`` the directory that holds it
(``ModelCheckpoint(filename="step-{step:06d}/model")``: manifest ``manifest.json`` inside,
id the directory's name): the layout faultdrill's checkpoint faults and inventory expect.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO

from faultdrill.integrations import ckptdir
from faultdrill.integrations.digest import component_digests, model_digest
from faultdrill.integrations.observe import ObservedDataset, StepRecorder, take_indices
from faultdrill.probe import Probe, probe_from_env

__all__ = ["FaultdrillCallback", "ReportingCheckpointIO"]

_STASH = "faultdrill"  # the key of the callback's data in a Lightning checkpoint


class ReportingCheckpointIO(CheckpointIO):
    """Wraps the strategy's ``CheckpointIO``: saves are sealed and reported once written,
    loads are remembered, removals take the manifest along."""

    def __init__(self, inner: CheckpointIO, callback: FaultdrillCallback) -> None:
        self.inner = inner
        self.callback = callback

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        began = time.monotonic()
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        self.callback.saved(Path(os.fspath(path)), checkpoint, began)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.callback.loaded_path = Path(os.fspath(path))
        loaded: dict[str, Any] = self.inner.load_checkpoint(path, *args, **kwargs)
        return loaded

    def remove_checkpoint(self, path: Any) -> None:
        file = Path(os.fspath(path))
        target = self.callback.target(file)
        side = ckptdir.manifest_path(target)
        self.inner.remove_checkpoint(path)
        side.unlink(missing_ok=True)
        if target != file:
            with contextlib.suppress(OSError):  # only if nothing else is left in it
                target.rmdir()

    def teardown(self) -> None:
        self.inner.teardown()


class FaultdrillCallback(pl.Callback):
    """Writes a Lightning job's evidence through the probe (see the module docstring)."""

    def __init__(
        self,
        probe: Probe | None = None,
        *,
        latest_file: str = "latest",
        checkpoint_dirs: bool = False,
    ) -> None:
        self.probe = probe if probe is not None else probe_from_env()
        self.latest_file = latest_file
        self.checkpoint_dirs = checkpoint_dirs
        self.loaded_path: Path | None = None
        self.loaded: dict[str, Any] | None = None  # what on_load_checkpoint was handed
        self.rejected: list[dict[str, str]] = []
        self.recorder: StepRecorder | None = None
        self.resumed_position = 0
        self._indices: list[int] | None = None
        self._last_step = 0
        self._setup_mono = 0.0
        self._saved_parts: dict[str, str] = {}  # digests of the checkpoint being written

    def target(self, file: Path) -> Path:
        """The checkpoint a ``.ckpt`` file belongs to: itself, or with ``checkpoint_dirs``
        its directory."""
        return file.parent if self.checkpoint_dirs else file

    def verified_checkpoint(self, dirpath: str | os.PathLike[str]) -> str | None:
        """The ``.ckpt`` file of the newest checkpoint in ``dirpath`` that matches its
        manifest (None: start from scratch); the ones refused on the way are reported
        with the load. Run without faultdrill (the probe is off, no manifests are
        written): the newest checkpoint, unverified."""
        suffix = "" if self.checkpoint_dirs else ".ckpt"
        if not self.probe.enabled:
            found = ckptdir.newest_first(Path(dirpath), suffix=suffix)
            if not found:
                return None
            return str(found[0] / "model.ckpt") if self.checkpoint_dirs else str(found[0])
        manifest, self.rejected = ckptdir.newest_verified(Path(dirpath), suffix=suffix)
        return str(manifest.path) if manifest is not None else None

    # --- start and resume -------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or not self.probe.enabled:
            return  # not run under faultdrill: nothing wrapped, nothing written
        self._setup_mono = time.monotonic()
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, ReportingCheckpointIO):
            trainer.strategy.checkpoint_io = ReportingCheckpointIO(io, self)
        self.probe.run_start(world_size=trainer.world_size, local_rank=trainer.local_rank)

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.loaded = checkpoint

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = trainer.train_dataloader
        dataset = getattr(loader, "dataset", None)
        size = len(dataset) if isinstance(dataset, ObservedDataset) else None
        self.recorder = StepRecorder(self.probe, size=size, combine="mean")
        if size is None:
            self.recorder.why_unobserved = "the training dataset is not an ObservedDataset"
            print(f"faultdrill: sample ids not observable: {self.recorder.why_unobserved}")
        self._last_step = trainer.global_step
        self._report_resume(trainer)

    def _report_resume(self, trainer: pl.Trainer) -> None:
        if self.loaded is None or self.loaded_path is None:
            self.probe.no_checkpoint(self.rejected)
            return
        ckpt = self.target(self.loaded_path)
        step = int(self.loaded.get("global_step", 0))
        manifest, why = ckptdir.verify(ckpt)
        verified = manifest is not None and manifest.step == step
        if manifest is not None and not verified:
            why = f"{ckpt.name}: the manifest says step {manifest.step}, the checkpoint {step}"
        if why:
            print(f"faultdrill: resumed from an unverified checkpoint: {why}", flush=True)
        stash = self.loaded.get(_STASH)
        position = stash.get("data_position") if isinstance(stash, Mapping) else None
        self.resumed_position = int(position) if isinstance(position, int) else -1
        self.probe.checkpoint_loaded(
            ckpt_id=ckpt.name,
            step=step,
            path=str(self.loaded_path),
            verified=verified,
            data_position=self.resumed_position,
            rejected=self.rejected,
            duration_s=time.monotonic() - self._setup_mono,
            components=_live_parts(trainer),
        )

    # --- steps ------------------------------------------------------------------------

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._indices = take_indices(batch)  # the training step never sees them

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.recorder is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else None
        self.recorder.micro_batch(trainer.current_epoch, self._indices, value)
        self._indices = None
        if trainer.global_step > self._last_step:  # this micro-batch ended an optimizer step
            self._last_step = trainer.global_step
            self.recorder.step(trainer.global_step)

    # --- saves --------------------------------------------------------------------------

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if not self.probe.enabled:
            return
        self._saved_parts = _saved_parts(checkpoint)
        consumed = self.recorder.consumed if self.recorder is not None else 0
        if dist.is_available() and dist.is_initialized():
            total = torch.tensor([consumed], dtype=torch.int64, device=pl_module.device)
            dist.all_reduce(total)
            consumed = int(total.item())
        checkpoint[_STASH] = {"data_position": max(self.resumed_position, 0) + consumed}

    def saved(self, path: Path, checkpoint: dict[str, Any], began: float) -> None:
        """Called by :class:`ReportingCheckpointIO` once ``path`` is written (rank 0)."""
        step = int(checkpoint.get("global_step", 0))
        stash = checkpoint.get(_STASH)
        position = int(stash["data_position"]) if isinstance(stash, Mapping) else -1
        target = self.target(path)
        try:
            manifest = ckptdir.write_manifest(
                target, main=path.name, step=step, data_position=position
            )
            ckptdir.publish(
                target.parent, target.name, latest_file=self.latest_file, sha256=manifest.sha256
            )
        except OSError as exc:
            self.probe.checkpoint_failed(
                step=step,
                error=f"{type(exc).__name__}: {exc}",
                errno=exc.errno,
                duration_s=time.monotonic() - began,
            )
            raise
        self.probe.checkpoint_saved(
            ckpt_id=target.name,
            step=step,
            path=str(path),
            sha256=manifest.sha256,
            data_position=position,
            size_bytes=manifest.bytes,
            duration_s=time.monotonic() - began,
            components=self._saved_parts,
        )

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.probe.run_end(final_step=trainer.global_step, model_digest=model_digest(pl_module))


def _saved_parts(checkpoint: Mapping[str, Any]) -> dict[str, str]:
    """Digests of what a Lightning checkpoint holds: the module's state dict and, unless
    saved weights-only, the optimizers' and LR schedulers' states, as Lightning put them."""
    return component_digests(
        model=checkpoint.get("state_dict"),
        optimizer=checkpoint.get("optimizer_states") or None,
        scheduler=checkpoint.get("lr_schedulers") or None,
    )


def _live_parts(trainer: pl.Trainer) -> dict[str, str]:
    """The same parts as :func:`_saved_parts`, as the trainer holds them now (as Lightning
    would write them: through the strategy)."""
    strategy = trainer.strategy
    return component_digests(
        model=strategy.lightning_module_state_dict(),
        optimizer=[strategy.optimizer_state(o) for o in trainer.optimizers] or None,
        scheduler=[c.scheduler.state_dict() for c in trainer.lr_scheduler_configs] or None,
    )
