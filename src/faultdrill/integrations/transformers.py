"""The probe's evidence from a Hugging Face ``Trainer``: one call, ``instrument(trainer)``.

::

    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=collate)
    fd = instrument(trainer)                        # before trainer.train()
    trainer.train(resume_from_checkpoint=fd.verified_checkpoint())

Contract
--------
:func:`instrument` adds a :class:`FaultdrillCallback` and wires what a callback cannot see:

* ``trainer.train_dataset`` is wrapped in :class:`~faultdrill.integrations.observe.ObservedDataset`
  and ``trainer.data_collator`` in :class:`~faultdrill.integrations.observe.ObservedCollator`,
  so each batch carries the dataset indices of the items in it;
* ``trainer.training_step`` is wrapped: per micro-batch it pops the indices off the inputs
  (the model never sees them) and keeps the loss ``training_step`` returned, the one the
  Trainer accumulates (already scaled for gradient accumulation, so a step's loss is their
  sum);
* ``trainer.train`` is wrapped: it announces the replica (``run_start``: the process group
  exists once the Trainer's arguments are set up) and records which checkpoint this call
  resumes from, resolved as the Trainer resolves it (``True`` through the Trainer's own
  ``get_last_checkpoint``).

Events, all through :mod:`faultdrill.probe`:

* ``run_start`` when ``train()`` is called, on every rank (its ``sample_ids`` field says
  ``observed`` or why not);
* ``ckpt_load`` / ``ckpt_none`` at ``on_train_begin``, once the Trainer has restored model,
  optimizer and state: the checkpoint directory it really resumed from, the ``global_step``
  it restored, ``verified`` only if the directory matches the manifest written when it was
  saved (an incomplete or damaged ``checkpoint-N`` has none, or does not match), and the
  checkpoints :meth:`FaultdrillCallback.verified_checkpoint` refused. ``data_position`` is
  the manifest's (-1 when there is no manifest to read it from). With it, ``ckpt_components``
  (``restored``): the digests of the model, optimizer and LR scheduler as restored; the
  RNG state's follows when the Trainer restores it (its ``_load_rng_state``, wrapped, at the
  first step);
* ``step`` at ``on_step_end``: ``global_step``, the sum of the micro-batch losses of this
  rank, the sample ids observed in them (``epoch * len(dataset) + index``, see
  :mod:`~faultdrill.integrations.observe`); none when any micro-batch carried no indices;
* ``ckpt_save`` at ``on_save`` (after the Trainer wrote ``checkpoint-N``, on every rank):
  all ranks meet at a barrier, so every rank's files are written; rank 0 fsyncs and hashes
  every file, writes ``checkpoint-N/manifest.json`` last, moves the ``latest`` pointer
  (``checkpoint-N <sha256>``), then reports the model file and its sha256; the data
  position is the one resumed from plus the samples all ranks observed since (summed over
  the process group). Every rank reports ``ckpt_components`` (``saved``): the digests of
  what its part of the checkpoint holds (model; optimizer, LR scheduler and its RNG state
  unless ``save_only_model``). A failure to write is reported as ``ckpt_save_failed`` and
  raised;
* ``run_end`` at ``on_train_end``: ``global_step`` and the sha256 of the model's
  state_dict (key, then raw bytes, in key order) on every rank.

Not run under faultdrill (the probe is off), :func:`instrument` changes nothing and the
callback writes nothing: no manifest, no ``latest`` pointer.

Requires a map-style training dataset whose items are mappings, and a sampler that hands
out each index once per epoch (the Trainer's default; no padding: a dataset length that
the global batch divides, or ``dataloader_drop_last``). Otherwise ids are not observable
and the sample ledger says so (retest).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sized
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from faultdrill.integrations import ckptdir
from faultdrill.integrations.digest import component_digests, model_digest
from faultdrill.integrations.observe import (
    ObservedCollator,
    ObservedDataset,
    StepRecorder,
    take_indices,
)
from faultdrill.probe import Probe, probe_from_env

__all__ = ["FaultdrillCallback", "instrument", "model_digest"]

_MODEL_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def _main_file(ckpt: Path) -> str:
    for name in _MODEL_FILES:
        if (ckpt / name).is_file():
            return name
    raise FileNotFoundError(f"{ckpt}: no model file ({', '.join(_MODEL_FILES)})")


class FaultdrillCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]
    """Writes the Trainer's evidence through the probe (see the module docstring).

    Made by :func:`instrument`; added alone (``trainer.add_callback``) it still reports
    starts, steps, saves and the end, but the sample ids are not observable and the
    resumed checkpoint is the one named ``checkpoint-<restored global_step>``."""

    def __init__(
        self, trainer: Trainer, probe: Probe | None = None, *, latest_file: str = "latest"
    ) -> None:
        self.trainer = trainer
        self.probe = probe if probe is not None else probe_from_env()
        self.latest_file = latest_file
        self.instrumented = False  # instrument() wired the data and train()
        self.resuming: str | None = None  # what train() was asked to resume from
        self.rejected: list[dict[str, str]] = []
        self.recorder: StepRecorder | None = None
        self.epoch = 0
        self.resumed_position = 0
        self._announced = False
        self._train_called = 0.0
        self._step_done = 0.0
        self._loaded: tuple[str, int] | None = None  # (checkpoint id, step) resumed from

    # --- what instrument() wires ----------------------------------------------------

    def verified_checkpoint(self) -> str | None:
        """The newest ``checkpoint-N`` under ``output_dir`` that matches its manifest (the
        fix for a resume that trusts the newest directory blindly); the ones refused on
        the way are reported with the load. None: start from scratch.

        Run without faultdrill (the probe is off, no manifests are written): the newest
        ``checkpoint-N``, as the Trainer's own ``get_last_checkpoint`` finds it."""
        root = Path(str(self.trainer.args.output_dir))
        if not self.probe.enabled:
            found = get_last_checkpoint(str(root)) if root.is_dir() else None  # type: ignore[no-untyped-call,unused-ignore]
            return str(found) if found else None
        manifest, self.rejected = ckptdir.newest_verified(root, prefix="checkpoint-")
        return str(manifest.target) if manifest is not None else None

    def announce(self, resume_from_checkpoint: Any) -> None:
        """Called by the wrapped ``train()``: ``run_start``, and what it will resume."""
        self._train_called = time.monotonic()
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.trainer.args.output_dir)  # type: ignore[no-untyped-call,unused-ignore]
        self.resuming = str(resume_from_checkpoint) if resume_from_checkpoint else None
        self._run_start()

    def _run_start(self) -> None:
        if self._announced:
            return
        args = self.trainer.args
        world = dist.get_world_size() if dist.is_initialized() else int(args.world_size)
        note = "observed" if self.instrumented else "not observed: the Trainer was not instrumented"
        self.probe.run_start(
            world_size=world, local_rank=int(args.local_process_index), sample_ids=note
        )
        self._announced = True

    def micro_batch(self, indices: list[int] | None, loss: float) -> None:
        if self.recorder is not None:
            self.recorder.micro_batch(self.epoch, indices, loss)

    # --- callback events --------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._run_start()
        dataset = self.trainer.train_dataset
        size = len(dataset) if isinstance(dataset, Sized) else None
        self.recorder = StepRecorder(self.probe, size=size, combine="sum")
        if not self.instrumented:
            self.recorder.why_unobserved = "the Trainer was not instrumented"
            self.resuming = self._inferred_resume(args, state)
        self._report_resume(state)

    @staticmethod
    def _inferred_resume(args: TrainingArguments, state: TrainerState) -> str | None:
        if not state.global_step:
            return None
        return str(Path(str(args.output_dir)) / f"checkpoint-{state.global_step}")

    def _report_resume(self, state: TrainerState) -> None:
        if self.resuming is None:
            self.probe.no_checkpoint(self.rejected)
            return
        ckpt = Path(self.resuming)
        manifest, why = ckptdir.verify(ckpt)
        step = int(state.global_step)  # what the Trainer restored, whatever the name says
        verified = manifest is not None and manifest.step == step
        if manifest is not None and not verified:
            why = f"{ckpt.name}: the manifest says step {manifest.step}, the state {step}"
        if why:
            print(f"faultdrill: resumed from an unverified checkpoint: {why}", flush=True)
        self.resumed_position = manifest.data_position if manifest is not None else -1
        try:
            path = str(ckpt / _main_file(ckpt))
        except FileNotFoundError:
            path = str(ckpt)
        self._loaded = (ckpt.name, step)
        self.probe.checkpoint_loaded(
            ckpt_id=ckpt.name,
            step=step,
            path=path,
            verified=verified,
            data_position=self.resumed_position,
            rejected=self.rejected,
            duration_s=time.monotonic() - self._train_called if self._train_called else None,
            components=self.parts(with_rng=False),
        )

    def parts(self, *, with_rng: bool) -> dict[str, str]:
        """Digests of what the Trainer saves in a checkpoint: the model; unless
        ``save_only_model``, the optimizer, the LR scheduler and (``with_rng``) this
        process's random generators (its ``rng_state*.pth``)."""
        trainer = self.trainer
        if trainer.args.save_only_model:
            return component_digests(model=trainer.model)
        return component_digests(
            model=trainer.model,
            optimizer=trainer.optimizer,
            scheduler=trainer.lr_scheduler,
            rng=with_rng,
        )

    def rng_restored(self) -> None:
        """Called by the wrapped ``_load_rng_state`` (the Trainer restores the generators
        at the first step after a resume, not with the model): their digest now."""
        if self._loaded is not None and not self.trainer.args.save_only_model:
            ckpt_id, step = self._loaded
            parts = component_digests(rng=True)
            self.probe.components(ckpt_id=ckpt_id, step=step, phase="restored", components=parts)

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        # The Trainer's own account: epoch e ends with state.epoch == e + 1 exactly, and a
        # resumed state holds e + (steps done) / (steps per epoch).
        self.epoch = int(state.epoch or 0)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is not None:
            self.recorder.step(int(state.global_step))
        self._step_done = time.monotonic()

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if not self.probe.enabled:
            return  # not run under faultdrill: no manifest, no pointer
        consumed = self.recorder.consumed if self.recorder is not None else 0
        parts = self.parts(with_rng=True)  # what this rank's part of checkpoint-N holds
        if dist.is_initialized():
            total = torch.tensor([consumed], dtype=torch.int64, device=args.device)
            dist.all_reduce(total)
            consumed = int(total.item())
            dist.barrier()  # every rank's part of checkpoint-N is on disk
        ckpt = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
        if not state.is_world_process_zero:
            step = int(state.global_step)
            self.probe.components(ckpt_id=ckpt.name, step=step, phase="saved", components=parts)
            return
        position = max(self.resumed_position, 0) + consumed
        self._seal(ckpt, state, position, parts)

    def _seal(self, ckpt: Path, state: TrainerState, position: int, parts: dict[str, str]) -> None:
        step = int(state.global_step)
        try:
            manifest = ckptdir.write_manifest(
                ckpt, main=_main_file(ckpt), step=step, data_position=position
            )
            ckptdir.publish(
                ckpt.parent, ckpt.name, latest_file=self.latest_file, sha256=manifest.sha256
            )
        except OSError as exc:
            self.probe.checkpoint_failed(
                step=step,
                error=f"{type(exc).__name__}: {exc}",
                errno=exc.errno,
                duration_s=time.monotonic() - self._step_done,
            )
            raise
        self.probe.checkpoint_saved(
            ckpt_id=ckpt.name,
            step=step,
            path=str(manifest.path),
            sha256=manifest.sha256,
            data_position=position,
            size_bytes=manifest.bytes,
            duration_s=time.monotonic() - self._step_done,
            components=parts,
        )

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        model = self.trainer.model
        digest = model_digest(model) if isinstance(model, torch.nn.Module) else ""
        self.probe.run_end(final_step=int(state.global_step), model_digest=digest)


def _wrap_training_step(trainer: Trainer, cb: FaultdrillCallback) -> None:
    inner: Callable[..., torch.Tensor] = trainer.training_step

    def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        indices = take_indices(inputs)  # before the model could see them
        loss = inner(model, inputs, *args, **kwargs)
        cb.micro_batch(indices, float(loss.detach().float().sum()))
        return loss

    trainer.training_step = training_step  # type: ignore[method-assign]


def _wrap_train(trainer: Trainer, cb: FaultdrillCallback) -> None:
    inner: Callable[..., Any] = trainer.train

    def train(resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        cb.announce(resume_from_checkpoint)
        return inner(resume_from_checkpoint, *args, **kwargs)

    trainer.train = train  # type: ignore[method-assign]


def _wrap_load_rng_state(trainer: Trainer, cb: FaultdrillCallback) -> None:
    inner: Callable[..., Any] = trainer._load_rng_state

    def load_rng_state(checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        out = inner(checkpoint, *args, **kwargs)
        if checkpoint is not None:
            cb.rng_restored()
        return out

    trainer._load_rng_state = load_rng_state  # type: ignore[method-assign]


def instrument(
    trainer: Trainer, probe: Probe | None = None, *, latest_file: str = "latest"
) -> FaultdrillCallback:
    """Wire ``trainer`` to the probe (see the module docstring); call before ``train()``.

    ``latest_file``: the pointer file written in ``output_dir`` after each complete save
    ('' for none). Returns the callback (its :meth:`~FaultdrillCallback.verified_checkpoint`
    picks a checkpoint that is safe to resume from).

    Inert when the probe is off (not run under faultdrill: no ``FAULTDRILL_EVENTS_DIR``):
    the Trainer is left as it was, and nothing is written into ``output_dir``."""
    cb = FaultdrillCallback(trainer, probe, latest_file=latest_file)
    if not cb.probe.enabled:
        return cb
    dataset = trainer.train_dataset
    if dataset is not None and not isinstance(dataset, ObservedDataset):
        if type(dataset).__module__.startswith("datasets."):
            # The Trainer drops a `datasets.Dataset`'s unused columns itself, but only on
            # the dataset it was given: do it before the wrapper hides the type.
            dataset = trainer._remove_unused_columns(dataset, description="training")
        trainer.train_dataset = ObservedDataset(dataset)
    if not isinstance(trainer.data_collator, ObservedCollator):
        trainer.data_collator = ObservedCollator(trainer.data_collator)
    _wrap_training_step(trainer, cb)
    _wrap_train(trainer, cb)
    _wrap_load_rng_state(trainer, cb)
    cb.instrumented = True
    trainer.add_callback(cb)
    trainer.args.disable_tqdm = True  # progress bars would flood the drill's job log
    return cb
