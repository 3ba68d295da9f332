"""The reference workload: a small, real, deterministic DDP language-model training job.

Run by torchrun as a module, with one script option (torchrun takes abbreviations of its
own options even after the module name, so the option's name is unambiguous)::

    torchrun --nproc-per-node=2 --standalone -m faultdrill.workloads.lm \\
        --workload-config=/path/config.json

Without torchrun's environment (no ``RANK``) it runs as a single process of world size 1.

Contract
--------
* **Config**: a JSON object whose keys are :class:`LMConfig`'s fields, loaded strictly by
  :func:`load_config` (unknown key, wrong type or broken rule: :class:`ConfigError` naming
  the file, the field, the rule and the value; defined in the torch-free
  :mod:`faultdrill.workloads.lm_config`, so plans are checked against it at load time).
  ``global_batch`` must be divisible by the world size, checked once the process group
  exists. A config error exits with status 2 and one line on stderr. ``config_digest``
  (in ``run_start``) is the sha256 of the canonical JSON (sorted keys, no spaces) of the
  fields in :data:`DIGEST_FIELDS`: those that decide the numbers a correct run computes.
  ``ckpt_dir``, ``ckpt_every``, ``ckpt_keep``, ``gloo_timeout_s``, ``step_sleep_s``,
  ``save_error``, ``export_path``, ``data_files``, ``data_dir``, ``data_retry_s`` and
  ``bad_mode`` are left out, so a drill and its baseline
  share a digest.
* **Data**: a synthetic corpus of ``dataset_size`` token sequences drawn from a sparse
  random Markov chain (each token has two possible successors), so the loss falls from
  ln(vocab) towards ln 2. Sample ``i`` depends only on ``(seed, i)``. Global stream
  position ``p`` is dataset index ``perm_e[p % dataset_size]`` with ``e = p //
  dataset_size`` and ``perm_e`` drawn from a ``torch.Generator`` seeded with ``(seed, e)``.
  Step ``s`` (1-based) consumes positions ``[(s-1)*B, s*B)``, ``B = global_batch``; rank
  ``r`` of ``W`` takes the contiguous ``B/W`` positions starting at ``(s-1)*B + r*B/W``.
  Those positions are the sample ids of the ``step`` events; ``data_position`` is the
  number of positions consumed (``step * B`` in a correct run). The *held-out split* is
  ``eval_size`` more sequences of the same chain, sequence ``j`` drawn from ``(seed,
  "heldout", j)``: never trained on. ``data_digest`` (in ``run_start``) is the sha256 of
  both splits' tokens.
* **Determinism**: a fault-free run and a run killed and resumed at the same world size
  give bitwise-identical per-rank losses and final model digest. Each rank's RNG streams
  (python, numpy, torch) are saved in every checkpoint and restored at the same world
  size; at another world size they are reseeded from ``(seed, rank, step)``.
* **Events** (``faultdrill.probe``): ``run_start`` once the process group is up;
  ``ckpt_load`` or ``ckpt_none`` on every rank; ``step`` per rank per optimizer step with
  the rank's local loss; ``ckpt_save`` on rank 0 once the checkpoint is durable and
  ``latest`` moved, ``ckpt_save_failed`` on rank 0 when a save raised ``OSError``; saves
  and loads carry ``duration_s``; ``evaluation`` on every rank after every checkpoint
  (also one that failed to save) with the held-out ``loss`` (mean next-token cross-entropy)
  and ``accuracy`` (top-1) of the model as trained; with ``export_path`` set, rank 0 writes
  the final model's state_dict there (``torch.save``, then fsync, rename, fsync) and emits
  ``artifact`` with the file's sha256; ``run_end`` on every rank after the process group is
  destroyed, with
  the sha256 of the model's state_dict (key, then raw bytes, in key order). The ``path``
  of ``ckpt_save`` and ``ckpt_load`` is the checkpoint's ``state.pt``, the file whose
  sha256 and size ``ckpt_save`` records.
* **Checkpoints** (see ``_ckpt``): every ``ckpt_every`` steps and at the last step. All
  ranks gather their RNG states to rank 0, rank 0 saves, and all ranks meet at a barrier
  after the save, so no rank runs ahead of a save that fails. A save that fails with
  ``OSError`` is logged and skipped (``save_error="skip"``) or raised (``"crash"``).

* **Data files** (``data_files: true``; faultdrill sets ``data_dir`` to the item's own
  ``data`` directory): rank 0 writes the training sequences into shard files there at the
  start (kept by a restart) and the job reads every sample from its file through a
  DataLoader (see ``_loader``): the same ids, batches and losses as without. A failed read
  is retried for ``data_retry_s`` s (``data_read_failed`` / ``data_read_recovered``
  events), then the job crashes.

Known-bad modes (``bad_mode``), negative controls that break recovery on restart:

=============================  ==============================================================
resume-ignored                 never loads (``ckpt_none``), restarts at step 1; still saves
data-position-not-restored     restores model, optimizer, step; data stream restarts at 0
skip-ahead                     restores all, but the stream resumes one global batch late
optimizer-not-restored         restores model, step, data; fresh optimizer and LR schedule
load-unverified                follows ``latest`` and unpickles it unchecked (verified=False)
stale-replica                  first incarnation's highest rank leaves an old replica behind
publish-before-durable         moves ``latest`` before ``state.pt`` is written and fsynced
stale-eval-model               after a restore, evaluates a copy of the model as loaded, not
                               the model being trained (training and export stay correct)
handover-stale                 Ray Train only (``lm_ray``): Ray is handed the previous checkpoint
skip-unreadable-shard          ``data_files`` only: a sample whose read fails is replaced by the
                               next readable one of the stream (``data_read_skipped``)
=============================  ==============================================================

``stale-replica`` starts its replica at most once per ``ckpt_dir`` (it claims the marker
file ``.stale-replica-started`` there). The bad modes report in ``ckpt_load`` what the
checkpoint says (its ``data_position``), as a buggy script would; only their ``step``
events show what they really consumed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import hashlib
import io
import math
import multiprocessing
import os
import random
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from faultdrill.probe import ENV_EVENTS_DIR, Probe, probe_from_env
from faultdrill.workloads import _ckpt
from faultdrill.workloads._loader import StepBatches, make_loader, write_shards
from faultdrill.workloads.lm_config import (  # the config part needs no torch: plans use it
    BAD_MODES,
    DIGEST_FIELDS,
    RAY_BAD_MODES,
    ConfigError,
    LMConfig,
    config_digest,
    config_from_dict,
    load_config,
)
from faultdrill.workloads.memory_request import MemoryRequest

__all__ = [
    "BAD_MODES",
    "DIGEST_FIELDS",
    "CheckpointBackend",
    "ConfigError",
    "Corpus",
    "LMConfig",
    "TinyLM",
    "Trained",
    "check_world_size",
    "config_digest",
    "config_from_dict",
    "load_config",
    "main",
    "model_digest",
    "run",
    "train_on_group",
]

PROG = "faultdrill.workloads.lm"
STALE_MARKER = ".stale-replica-started"
_CLAIM_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def _derive_seed(*parts: object) -> int:
    """A 63-bit seed that depends only on ``parts`` (no global RNG involved)."""
    text = ":".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & (2**63 - 1)


# --- data ----------------------------------------------------------------------------


class Corpus:
    """The synthetic corpus and its global sample stream (see the module docstring)."""

    def __init__(self, cfg: LMConfig) -> None:
        self.size = cfg.dataset_size
        self.seed = cfg.seed
        table_gen = torch.Generator().manual_seed(_derive_seed(cfg.seed, "table"))
        successors = torch.randint(cfg.vocab, (cfg.vocab, 2), generator=table_gen)
        self.samples = _sequences(cfg, successors, "sample", self.size)
        self.heldout = _sequences(cfg, successors, "heldout", cfg.eval_size)
        self._perms: dict[int, torch.Tensor] = {}

    def digest(self) -> str:
        """sha256 of the tokens of both splits: the data snapshot this job reads."""
        h = hashlib.sha256()
        for split in (self.samples, self.heldout):
            h.update(split.contiguous().numpy().tobytes())
        return h.hexdigest()

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._perms:
            gen = torch.Generator().manual_seed(_derive_seed(self.seed, "epoch", epoch))
            self._perms = {epoch: torch.randperm(self.size, generator=gen)}
        return self._perms[epoch]

    def indices(self, positions: range) -> list[int]:
        return [int(self._perm(p // self.size)[p % self.size]) for p in positions]

    def batch(self, positions: range) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets for a range of global stream positions."""
        rows = self.samples[self.indices(positions)]
        return rows[:, :-1], rows[:, 1:]


def _sequences(cfg: LMConfig, successors: torch.Tensor, tag: str, n: int) -> torch.Tensor:
    """``n`` token sequences of the chain, sequence ``i`` drawn from ``(seed, tag, i)``;
    shape ``(n, seq_len + 1)``."""
    starts = torch.empty(n, dtype=torch.long)
    choices = torch.empty(n, cfg.seq_len, dtype=torch.long)
    for i in range(n):
        gen = torch.Generator().manual_seed(_derive_seed(cfg.seed, tag, i))
        starts[i] = torch.randint(cfg.vocab, (1,), generator=gen)
        choices[i] = torch.randint(2, (cfg.seq_len,), generator=gen)
    tokens = [starts]
    for t in range(cfg.seq_len):
        tokens.append(successors[tokens[-1], choices[:, t]])
    return torch.stack(tokens, dim=1)


# --- model ---------------------------------------------------------------------------


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        attended, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + attended
        mixed: torch.Tensor = self.mlp(self.ln2(x))
        return x + mixed


class TinyLM(nn.Module):
    """A decoder-only transformer: token and position embeddings, causal blocks, a head."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            _Block(cfg.d_model, cfg.n_heads, cfg.dropout) for _ in range(cfg.n_layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)
        # A constant, not a buffer: DDP would broadcast a buffer before every forward.
        self.causal_mask = torch.triu(
            torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool), diagonal=1
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.drop(self.tok(tokens) + self.pos(torch.arange(n)))
        mask = self.causal_mask[:n, :n]
        for block in self.blocks:
            x = block(x, mask)
        logits: torch.Tensor = self.head(self.ln_f(x))
        return logits


def model_digest(model: nn.Module) -> str:
    """sha256 over the state_dict: each key, then its tensor's raw bytes, in key order."""
    h = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        h.update(key.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _lr_factor(cfg: LMConfig, done: int) -> float:
    """Linear warmup over ``warmup_steps``, then cosine decay to 10% at the last step."""
    if done < cfg.warmup_steps:
        return (done + 1) / (cfg.warmup_steps + 1)
    progress = min(1.0, (done - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * progress))


# --- RNG state -----------------------------------------------------------------------


def _seed_streams(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    """This process's RNG streams, as objects ``torch.load(weights_only=True)`` accepts."""
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    num = state["numpy"]
    keys = num["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, num["pos"], num["has_gauss"], num["cached_gaussian"]))
    torch.set_rng_state(state["torch"])


# --- checkpoint backends -------------------------------------------------------------


class CheckpointBackend:
    """Where the job's checkpoints live, how one is published and which one a resume tries.

    The default is the workload's own directory (``cfg.ckpt_dir``, ``latest`` names the
    published checkpoint). A platform that hands checkpoints over itself (Ray Train:
    ``ray.train.report`` / ``ray.train.get_checkpoint``) subclasses this; the training loop
    is the same. ``load`` runs on every rank, ``save`` on rank 0 only, ``after_save`` on
    every rank once rank 0's save finished or failed (``saved`` is None on other ranks and
    after a failure).
    """

    def __init__(self, ckpt_dir: str) -> None:
        self.dir = ckpt_dir

    def load(self, verified: bool) -> tuple[_ckpt.LoadResult, dict[str, Any]]:
        """The checkpoint to resume from (and what was refused), plus extra fields for the
        ``ckpt_load``/``ckpt_none`` event. ``verified=False`` is the known-bad loader."""
        if verified:
            return _ckpt.load(self.dir), {}
        return _ckpt.load_unverified(self.dir), {}

    def save(self, *, publish_before_durable: bool, **fields: Any) -> _ckpt.Saved:
        """Make a checkpoint durable and publish it; raises ``OSError`` (rank 0 only)."""
        return _ckpt.save(self.dir, publish_before_durable=publish_before_durable, **fields)

    def after_save(self, rank: int, step: int, saved: _ckpt.Saved | None) -> None:
        """Called on every rank after the save attempt at ``step`` (nothing to do for a
        directory); raises ``OSError`` when publishing failed."""


# --- the job -------------------------------------------------------------------------


class _Job:
    """One incarnation of one rank: init, resume, train, checkpoint, finish."""

    def __init__(
        self,
        cfg: LMConfig,
        probe: Probe,
        backend: CheckpointBackend,
        rank: int,
        world: int,
        restart_count: int,
    ) -> None:
        self.cfg = cfg
        self.probe = probe
        self.backend = backend
        self.rank = rank
        self.world = world
        self.restart_count = restart_count
        self.digest = config_digest(cfg)
        self.per_rank = cfg.global_batch // world
        self.corpus = Corpus(cfg)
        _seed_streams(cfg.seed)
        self.model = TinyLM(cfg)
        _seed_streams(_derive_seed(cfg.seed, "rank", rank))
        self.optimizer, self.scheduler = self._fresh_optimizer()
        self.step = 0
        self.position = 0
        self.stale_pipe: int | None = None
        # the oom-worker fault's request to allocate (one stat per step while there is none)
        self.memory_request = MemoryRequest(os.environ.get(ENV_EVENTS_DIR), probe.emit)
        # ``stale-eval-model``: the copy evaluated instead of the model being trained.
        self.eval_model: nn.Module | None = None

    def _fresh_optimizer(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        cfg = self.cfg
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: _lr_factor(cfg, done))
        return optimizer, scheduler

    def resume(self) -> None:
        """Restore from the newest good checkpoint (or not, per ``bad_mode``) and say so."""
        cfg, mode = self.cfg, self.cfg.bad_mode
        if mode == "resume-ignored":
            self.probe.no_checkpoint([])
            return
        started = time.monotonic()
        result, extra = self.backend.load(verified=mode != "load-unverified")
        chosen: list[str | None] = [None] * self.world
        loaded = result.loaded
        dist.all_gather_object(chosen, loaded.id if loaded else None)
        if len(set(chosen)) != 1:
            raise RuntimeError(f"ranks chose different checkpoints: {chosen}")
        if loaded is None:
            self.probe.no_checkpoint(result.rejected, **extra)
            return
        state = loaded.state
        self.model.load_state_dict(state["model"])
        if mode == "stale-eval-model":
            self.eval_model = copy.deepcopy(self.model)
        if mode != "optimizer-not-restored":
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        self.step = loaded.step
        self.position = int(state["data_position"])
        if mode == "data-position-not-restored":
            self.position = 0
        elif mode == "skip-ahead":
            self.position += cfg.global_batch
        rng = state["rng"]
        if len(rng) == self.world:
            _set_rng_state(rng[self.rank])
        else:
            _seed_streams(_derive_seed(cfg.seed, "rank", self.rank, "step", self.step))
        self.probe.checkpoint_loaded(
            ckpt_id=loaded.id,
            step=loaded.step,
            path=loaded.path,
            verified=loaded.verified,
            data_position=loaded.data_position,
            rejected=result.rejected,
            duration_s=time.monotonic() - started,
            **extra,
        )

    def start_stale_replica(self) -> None:
        """``stale-replica``: leave an old replica of this rank behind (see ``_stale``).

        Only the first caller per ``ckpt_dir`` starts one: ``TORCHELASTIC_RESTART_COUNT``
        is per agent, and an agent restarted only because of a peer keeps count 0.
        """
        os.makedirs(self.backend.dir, exist_ok=True)
        try:
            claim = os.open(os.path.join(self.backend.dir, STALE_MARKER), _CLAIM_FLAGS)
        except FileExistsError:
            return
        os.write(claim, f"{os.getpid()}\n".encode())
        os.close(claim)
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        cfg = self.cfg
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faultdrill.workloads._stale",
                f"--rank={self.rank}",
                f"--world-size={self.world}",
                f"--global-batch={cfg.global_batch}",
                f"--start-step={self.step}",
                f"--vocab={cfg.vocab}",
                f"--config-digest={self.digest}",
                f"--parent-fd={read_fd}",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(read_fd,),
            start_new_session=True,
        )
        os.close(read_fd)
        os.set_blocking(write_fd, False)
        self.stale_pipe = write_fd

    def batches(self) -> Iterator[tuple[int, list[int], torch.Tensor, torch.Tensor]]:
        """(step, the sample ids it consumes, inputs, targets) from the step after the
        resume point to the last: read here, or fetched by DataLoader workers (a loader
        iterated once per data epoch, as real jobs do)."""
        cfg = self.cfg
        if cfg.loader_workers == 0 and not cfg.data_files:
            for step in range(self.step + 1, cfg.steps + 1):
                lo = self.position + self.rank * self.per_rank  # train() advances position
                ids = range(lo, lo + self.per_rank)
                yield (step, list(ids), *self.corpus.batch(ids))
            return
        plan = StepBatches(cfg.global_batch, self.rank, self.per_rank)
        # in-process reads report their failures; a worker's would write from another process
        on_read = self._data_read if cfg.loader_workers == 0 else None
        loader = make_loader(cfg, self.corpus, plan, on_read)
        epoch_steps = max(1, cfg.dataset_size // cfg.global_batch)
        step, position = self.step + 1, self.position
        while step <= cfg.steps:
            last = min(cfg.steps, (step - 1) // epoch_steps * epoch_steps + epoch_steps)
            plan.set_epoch(step, last, position)
            for positions, inputs, targets in loader:
                yield step, positions.tolist(), inputs, targets
                step += 1
            position += (last - plan.first + 1) * cfg.global_batch

    def _data_read(self, what: str, facts: dict[str, Any]) -> None:
        self.probe.emit(what, step=self.step + 1, **facts)
        print(f"{PROG}: {what}: {facts}", file=sys.stderr, flush=True)

    def write_data_files(self) -> None:
        """``data_files``: rank 0 writes the shard files the job will read (once per data
        directory: a restarted job keeps them); every rank waits for them."""
        if self.rank == 0:
            os.makedirs(self.cfg.data_dir, exist_ok=True)
            written = write_shards(self.corpus.samples, self.cfg.data_dir)
            self.probe.emit("data_files", path=self.cfg.data_dir, shards_written=written)
        dist.barrier()

    def train(self, ddp: nn.Module) -> None:
        cfg = self.cfg
        ddp.train()
        for step, ids, inputs, targets in self.batches():
            self.optimizer.zero_grad(set_to_none=True)
            logits = ddp(inputs)
            loss = nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
            loss.backward()  # type: ignore[no-untyped-call]
            self.optimizer.step()
            self.scheduler.step()
            self.step = step
            self.position += cfg.global_batch
            self.probe.step(step, loss.item(), ids)
            self.memory_request.after_step(step)
            if self.stale_pipe is not None:  # tell the lurking old replica where we are
                try:
                    os.write(self.stale_pipe, f"s{step}\n".encode())
                except OSError:
                    self.stale_pipe = None
            if cfg.step_sleep_s:
                time.sleep(cfg.step_sleep_s)
            if step % cfg.ckpt_every == 0 or step == cfg.steps:
                self.checkpoint()
                self.evaluate()

    def checkpoint(self) -> None:
        """Gather RNG states, save on rank 0, let the backend publish on every rank, then
        hold every rank at a barrier."""
        cfg = self.cfg
        rng: list[dict[str, Any] | None] = [None] * self.world
        dist.all_gather_object(rng, _rng_state())
        saved: _ckpt.Saved | None = None
        failed: OSError | None = None
        started = time.monotonic()
        if self.rank == 0:
            try:
                saved = self._save(rng)
            except OSError as exc:
                failed = exc
        try:
            self.backend.after_save(self.rank, self.step, saved)
        except OSError as exc:
            saved, failed = None, failed or exc
        if failed is not None:
            self.probe.checkpoint_failed(
                step=self.step,
                error=f"{type(failed).__name__}: {failed}",
                errno=failed.errno,
                duration_s=time.monotonic() - started,
            )
            if cfg.save_error == "crash":
                raise failed
            print(
                f"{PROG}: checkpoint at step {self.step} not saved: {failed}",
                file=sys.stderr,
                flush=True,
            )
        elif saved is not None:
            self.probe.checkpoint_saved(
                ckpt_id=saved.id,
                step=saved.step,
                path=saved.path,
                sha256=saved.sha256,
                data_position=saved.data_position,
                size_bytes=saved.size,
                duration_s=time.monotonic() - started,
            )
        dist.barrier()

    def _save(self, rng: list[dict[str, Any] | None]) -> _ckpt.Saved:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng,
            "step": self.step,
            "data_position": self.position,
            "config_digest": self.digest,
        }
        return self.backend.save(
            step=self.step,
            state=state,
            data_position=self.position,
            world_size=self.world,
            written_by={
                "rank": self.rank,
                "pid": os.getpid(),
                "restart_count": self.restart_count,
            },
            keep=self.cfg.ckpt_keep,
            publish_before_durable=self.cfg.bad_mode == "publish-before-durable",
        )

    def evaluate(self) -> None:
        """Held-out loss and accuracy of the model after this step (no gradient, no RNG
        drawn: training goes on exactly as without it)."""
        model = self.eval_model if self.eval_model is not None else self.model
        inputs, targets = self.corpus.heldout[:, :-1], self.corpus.heldout[:, 1:]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(inputs)
                loss = nn.functional.cross_entropy(
                    logits.reshape(-1, self.cfg.vocab), targets.reshape(-1)
                )
                accuracy = (logits.argmax(dim=-1) == targets).double().mean()
        finally:
            model.train(was_training)
        self.probe.evaluation(self.step, {"loss": loss.item(), "accuracy": accuracy.item()})

    def export(self) -> None:
        """Rank 0 writes the final model to ``export_path`` durably and reports its sha256."""
        buf = io.BytesIO()
        torch.save(self.model.state_dict(), buf)
        data = buf.getvalue()
        _ckpt.durable_write(self.cfg.export_path, data)
        self.probe.artifact(
            path=self.cfg.export_path,
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            name="final-model",
            step=self.step,
        )

    def end_stale_replica(self) -> None:
        if self.stale_pipe is not None:
            with contextlib.suppress(OSError):  # it is gone already (its lifetime ran out)
                os.write(self.stale_pipe, b"end\n")
            os.close(self.stale_pipe)
            self.stale_pipe = None


def _init_process_group(cfg: LMConfig) -> None:
    timeout = timedelta(seconds=cfg.gloo_timeout_s)
    if "RANK" in os.environ:
        dist.init_process_group("gloo", timeout=timeout)
    else:
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timeout)


def check_world_size(cfg: LMConfig, world: int) -> None:
    """Raise :class:`ConfigError` unless ``world`` ranks can split the global batch evenly."""
    if cfg.global_batch % world:
        raise ConfigError(
            f"field 'global_batch': {cfg.global_batch} is not divisible by world size {world}"
        )


@dataclass(frozen=True)
class Trained:
    """A rank's finished training, awaiting ``run_end`` (after its group is destroyed)."""

    final_step: int
    model_digest: str
    probe: Probe
    release_stale_replica: Callable[[], None]

    def finish(self) -> None:
        """Record ``run_end``, release the ``stale-replica`` mode's replica, close the probe."""
        self.probe.run_end(final_step=self.final_step, model_digest=self.model_digest)
        self.release_stale_replica()
        self.probe.close()


def train_on_group(
    cfg: LMConfig,
    probe: Probe,
    backend: CheckpointBackend,
    *,
    restart_count: int = 0,
    **run_start_extra: Any,
) -> Trained:
    """Train per ``cfg`` as this process's rank of the process group that is already
    initialised (by torchrun's env, by Ray Train...); returns once training is done. The
    caller destroys the group, then calls :meth:`Trained.finish` (``run_end``).

    Emits ``run_start`` (with ``run_start_extra``), the load decision, every step and
    checkpoint. Blocks in collectives with the other ranks (up to the group's timeout).
    Raises :class:`ConfigError` for a world size that does not divide ``global_batch``,
    and whatever stopped training otherwise. The DDP wrapper is collected before it
    returns or raises (destroying the group under a live DDP may abort the process).
    """
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    ddp: nn.Module | None = None
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        check_world_size(cfg, world)
        job = _Job(cfg, probe, backend, rank, world, restart_count)
        probe.run_start(
            world_size=world,
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            restart_count=restart_count,
            config_digest=job.digest,
            data_digest=job.corpus.digest(),
            **run_start_extra,
        )
        if cfg.data_files:
            job.write_data_files()
        job.resume()
        if cfg.bad_mode == "stale-replica" and restart_count == 0 and rank == world - 1:
            job.start_stale_replica()  # once per checkpoint dir, see there
        ddp = DistributedDataParallel(job.model, bucket_cap_mb_list=[0])
        job.train(ddp)
        if cfg.export_path and rank == 0:
            job.export()  # local I/O only: no collective, so before the group goes
        result = Trained(job.step, model_digest(job.model), probe, job.end_stale_replica)
    except BaseException as exc:
        # The traceback's frames hold the DDP model too; see below.
        traceback.clear_frames(exc.__traceback__)
        ddp = None
        gc.collect()
        raise
    ddp = None
    gc.collect()
    return result


def run(cfg: LMConfig) -> None:
    """Train per ``cfg`` as this process's rank (torchrun's environment, or world size 1);
    returns once ``run_end`` is recorded.

    Raises :class:`ConfigError` for a world size that does not divide ``global_batch``, and
    whatever stopped training otherwise (no ``run_end`` then). The process group is
    destroyed before it returns or raises.
    """
    if cfg.bad_mode in RAY_BAD_MODES:
        raise ConfigError(
            f"field 'bad_mode': {cfg.bad_mode!r} needs a platform that hands checkpoints "
            "over (Ray Train: faultdrill.workloads.lm_ray)"
        )
    _init_process_group(cfg)
    probe: Probe | None = None
    try:
        rank = dist.get_rank()
        probe = probe_from_env(rank)
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
        trained = train_on_group(cfg, probe, CheckpointBackend(cfg.ckpt_dir), restart_count=restart)
    except BaseException as exc:
        if probe is not None and isinstance(exc, Exception):
            with contextlib.suppress(Exception):
                probe.worker_error(exc)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        raise
    dist.destroy_process_group()
    trained.finish()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False, description=__doc__.split("\n")[0]
    )
    parser.add_argument("--workload-config", required=True, help="path of the JSON config")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.workload_config)
        run(cfg)
    except ConfigError as exc:
        print(f"{PROG}: config error: {exc}", file=sys.stderr)
        return 2
    return 0


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` without the interpreter's teardown of torch and its compiler
    modules (1-4 s of a replica's end on 2 busy cores, measured; see bench/README.md). Only
    once everything is recorded and durable: probe lines are written unbuffered,
    checkpoints fsynced, the process group destroyed. DataLoader workers are joined first,
    so none is ever orphaned by the fast exit."""
    for child in multiprocessing.active_children():
        child.join(timeout=5.0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
