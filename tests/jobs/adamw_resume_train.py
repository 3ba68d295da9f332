"""A small DDP job with its own checkpoint code, written independently of faultdrill's
reference workload and integrations: AdamW, a cosine LR schedule, dropout (so the RNG
state matters), a shuffled DataLoader with worker processes whose position is part of the
checkpoint. It reports the digests of every part it saves and of every part right after
its resume (``Probe.components``), for the check ``progress.restored-components``
(tests/test_restored_components.py).

Run under torchrun (gloo, CPU)::

    torchrun --nproc-per-node 2 tests/jobs/adamw_resume_train.py --ckpt-dir ck --steps 24

``--drop PART`` (or ``$ADAMW_DROP``): the resume saves PART but does not restore it,
the known-bad job: ``optimizer`` (AdamW's moments and step counts start afresh: the loss
after the resume barely moves), ``scheduler`` (the LR schedule starts over), ``rng`` (the
generators are left as seeded), ``none`` (healthy).

Data: ``ROWS`` rows; epoch ``e`` visits them in the order ``randperm(ROWS, seed + e)``;
optimizer step ``s`` of an epoch hands rank ``r`` the ``MICRO`` rows at ``(s * world + r)
* MICRO`` of that order; sample id = ``e * ROWS + row``. Checkpoints: ``ckpt-<step>/``
holds ``state.pt`` (model, optimizer, scheduler, loader position; written by rank 0),
``rng-<rank>.pt`` (every rank's generators) and ``manifest.json`` (sha256 of each file,
written last), published by rewriting ``latest``; all written with fsync.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, Sampler

from faultdrill.integrations.digest import component_digests, rng_state
from faultdrill.probe import Probe, probe_from_env

ROWS, FEATURES, CLASSES, MICRO = 256, 16, 4, 8
PARTS = ("optimizer", "scheduler", "rng", "none")


class Rows(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    def __init__(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(ROWS, FEATURES, generator=gen)
        self.y = (self.x[:, :CLASSES].argmax(dim=1) + (self.x[:, -1] > 1.0).long()) % CLASSES

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return i, self.x[i], self.y[i]


class ShardedShuffle(Sampler[list[int]]):
    """This rank's batches of one epoch from step ``start`` on; ``state_dict`` is the
    loader position a checkpoint keeps (epoch, steps done in it)."""

    def __init__(self, seed: int, rank: int, world: int) -> None:
        self.seed, self.rank, self.world = seed, rank, world
        self.epoch = self.start = 0

    @property
    def steps_per_epoch(self) -> int:
        return ROWS // (self.world * MICRO)

    def __len__(self) -> int:
        return self.steps_per_epoch - self.start

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(
            ROWS, generator=torch.Generator().manual_seed(self.seed + self.epoch)
        )
        for s in range(self.start, self.steps_per_epoch):
            lo = (s * self.world + self.rank) * MICRO
            yield order[lo : lo + MICRO].tolist()

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "start": self.start}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.start = int(state["epoch"]), int(state["start"])


def write_durably(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sha256_of(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def blob(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class Job:
    """One rank's model, optimizer, schedule, loader position and checkpoint code."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int, probe: Probe) -> None:
        self.args, self.rank, self.world, self.probe = args, rank, world, probe
        torch.manual_seed(args.seed)
        random.seed(args.seed)
        np.random.seed(args.seed)
        self.model = nn.Sequential(
            nn.Linear(FEATURES, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, CLASSES)
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, args.steps)
        self.sampler = ShardedShuffle(args.seed, rank, world)
        self.step = 0

    def parts(self) -> dict[str, str]:
        return component_digests(
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            dataloader=self.sampler,
            rng=True,
        )

    def save(self) -> None:
        started = time.monotonic()
        cid = f"ckpt-{self.step}"
        d = os.path.join(self.args.ckpt_dir, cid)
        os.makedirs(d, exist_ok=True)
        parts = self.parts()  # what this rank's share of the checkpoint holds, now
        write_durably(os.path.join(d, f"rng-{self.rank}.pt"), blob(rng_state()))
        if self.rank == 0:
            state = {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "loader": self.sampler.state_dict(),
                "step": self.step,
            }
            write_durably(os.path.join(d, "state.pt"), blob(state))
        dist.barrier()  # every rank's file is durable
        if self.rank != 0:
            self.probe.components(ckpt_id=cid, step=self.step, phase="saved", components=parts)
            return
        files = {
            n: sha256_of(os.path.join(d, n)) for n in sorted(os.listdir(d)) if n.endswith(".pt")
        }
        manifest = {"step": self.step, "files": files}
        write_durably(os.path.join(d, "manifest.json"), json.dumps(manifest).encode())
        write_durably(os.path.join(self.args.ckpt_dir, "latest"), cid.encode())
        self.probe.checkpoint_saved(
            ckpt_id=cid,
            step=self.step,
            path=os.path.join(d, "state.pt"),
            sha256=files["state.pt"],
            data_position=self.step * self.world * MICRO,
            duration_s=time.monotonic() - started,
            components=parts,
        )

    def resume(self, drop: str) -> None:
        """Load the checkpoint ``latest`` names after checking its files against its
        manifest; restore every part but ``drop``; report the parts as they are now."""
        root = self.args.ckpt_dir
        try:
            with open(os.path.join(root, "latest")) as f:
                cid = f.read().strip()
            with open(os.path.join(root, cid, "manifest.json")) as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            self.probe.no_checkpoint()
            return
        d = os.path.join(root, cid)
        for name, digest in manifest["files"].items():
            if sha256_of(os.path.join(d, name)) != digest:
                raise RuntimeError(f"{cid}/{name} does not match its manifest")
        state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        self.model.load_state_dict(state["model"])
        if drop != "optimizer":
            self.optimizer.load_state_dict(state["optimizer"])
        if drop != "scheduler":
            self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["loader"])
        if drop != "rng":
            rng = torch.load(os.path.join(d, f"rng-{self.rank}.pt"), weights_only=False)
            random.setstate(rng["python"])
            np.random.set_state(rng["numpy"])
            torch.random.set_rng_state(rng["cpu"])
        self.step = int(state["step"])
        self.probe.checkpoint_loaded(
            ckpt_id=cid,
            step=self.step,
            path=os.path.join(d, "state.pt"),
            verified=True,
            data_position=self.step * self.world * MICRO,
            components=self.parts(),
        )


def train(job: Job, data: Rows, args: argparse.Namespace) -> None:
    ddp = DistributedDataParallel(job.model)
    loader = DataLoader(
        data,
        batch_sampler=job.sampler,
        num_workers=args.loader_workers,
        persistent_workers=False,
        generator=torch.Generator(),
    )
    while job.step < args.steps:
        for positions, x, y in loader:
            job.optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            job.optimizer.step()
            job.scheduler.step()
            job.step += 1
            job.sampler.start += 1
            ids = [job.sampler.epoch * ROWS + int(i) for i in positions]
            time.sleep(args.step_sleep)
            job.probe.step(job.step, loss.item(), ids)
            if job.step % args.ckpt_every == 0 or job.step == args.steps:
                job.save()
            if job.step >= args.steps:
                return
        job.sampler.epoch += 1
        job.sampler.start = 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--ckpt-every", type=int, default=8)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--loader-workers", type=int, default=2)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--drop", choices=PARTS, default=os.environ.get("ADAMW_DROP") or "none")
    args = ap.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    probe = probe_from_env(rank)
    probe.run_start(world_size=world, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    os.makedirs(args.ckpt_dir, exist_ok=True)
    job = Job(args, rank, world, probe)
    job.resume(args.drop)
    train(job, Rows(args.seed), args)
    dist.barrier()
    digest = hashlib.sha256()
    for key, tensor in job.model.state_dict().items():
        digest.update(key.encode() + tensor.numpy().tobytes())
    dist.destroy_process_group()
    probe.run_end(final_step=job.step, model_digest=digest.hexdigest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
