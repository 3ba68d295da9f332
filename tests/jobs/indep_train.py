"""A small data-parallel classifier, written apart from faultdrill's reference workload, for
the drills of the results band (tests/test_results_band.py).

Its shape, as a user reported it (issue 20): dropout on the global torch RNG; on resume it
restores model, optimizer, LR scheduler and ``torch.set_rng_state``, *then* creates its
DataLoader iterator (two persistent workers), which draws its base seed from the global
RNG, so every dropout mask after the resume is one draw later than in the baseline: a
healthy job whose resumed run is not bitwise equal to its baseline. Gradients are averaged
by hand (``all_reduce`` of each gradient, no DDP wrapper); optimizer AdamW; LR: linear
warm-up over 5 steps, then x0.9 a step (``LambdaLR``).

Options:

--nondeterministic-sum   the gradient of each step is the sum of four partial gradients
                         (one per quarter of the batch) added in an order drawn from a
                         generator seeded with the time and pid, and the loss reported is
                         the per-sample losses summed in such an order: floating-point
                         reductions whose order varies from run to run, as GPU kernels'
--own-loader-generator   the DataLoader gets its own seeded generator: the resume draws
                         nothing from the global RNG (no shift; with --nondeterministic-sum,
                         the summation order is then the only thing that varies)
--bug lr-not-restored    on resume the scheduler's state is not loaded: its warm-up starts
                         again
--bug model-reinit       on resume the model's weights are not loaded (fresh weights),
                         while the optimizer, scheduler and step count go on
--bug stale-eval         on resume the evaluation copy of the model is taken once, after
                         the load, and never refreshed: later evaluations are of the model
                         as loaded

Data: row ``p % ROWS`` of a fixed synthetic set (labels from a noisy linear teacher);
optimizer step ``s`` (from 1) consumes positions ``[(s-1)*G, s*G)``, ``G = world * micro``,
rank ``r`` taking ``micro`` of them from ``(s-1)*G + r*micro``. Checkpoints: rank 0 writes
``step-<s>.pt`` (torch.save of model, optimizer, scheduler, RNG state, step), its sha256 in
``step-<s>.pt.sha256``, then ``CURRENT`` naming it, each through a temporary file, fsync
and rename; a resume loads what ``CURRENT`` names only if its bytes match the sha256.
Rank 0 evaluates on a held-out set at every checkpoint.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from faultdrill.probe import Probe, probe_from_env

ROWS, HELD_OUT, FEATURES, CLASSES = 4096, 512, 16, 4
WARMUP, DECAY = 5, 0.9


def synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows and labels from a fixed noisy linear teacher (teacher seed 1234)."""
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(1234))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=gen)
    noise = torch.randn(n, CLASSES, generator=gen)
    return x, (x @ teacher + 1.5 * noise).argmax(dim=1)


class Rows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        self.x, self.y = synthetic(ROWS, 99)

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, p: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[p % ROWS], self.y[p % ROWS]


class Positions(Sampler[list[int]]):
    """This rank's batch of positions for each step from ``first`` to ``last``."""

    def __init__(self, rank: int, world: int, micro: int, first: int, last: int) -> None:
        self.rank, self.world, self.micro = rank, world, micro
        self.first, self.last = first, last

    def __len__(self) -> int:
        return max(0, self.last - self.first + 1)

    def __iter__(self) -> Iterator[list[int]]:
        for s in range(self.first, self.last + 1):
            lo = (s - 1) * self.world * self.micro + self.rank * self.micro
            yield list(range(lo, lo + self.micro))


def classifier() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 64),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(64, CLASSES),
    )


def lr_factor(step: int) -> float:
    """Warm-up to 1 over WARMUP steps, then DECAY per step."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    return float(DECAY ** (step - WARMUP + 1))


def _write(path: str, data: bytes) -> None:
    with open(path + ".part", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".part", path)


def save(root: str, state: dict[str, Any], step: int) -> tuple[str, str, str, int]:
    """Write ``step-<step>.pt`` and its ``.sha256``, then point ``CURRENT`` at it:
    (id, path, sha256, bytes)."""
    name = f"step-{step}.pt"
    path = os.path.join(root, name)
    blob = io.BytesIO()
    torch.save(state, blob)
    data = blob.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    _write(path, data)
    _write(path + ".sha256", digest.encode())
    _write(os.path.join(root, "CURRENT"), name.encode())
    return name, path, digest, len(data)


def load(root: str) -> tuple[str, str, dict[str, Any]] | None:
    """The checkpoint ``CURRENT`` names, if its bytes match its ``.sha256``."""
    try:
        with open(os.path.join(root, "CURRENT")) as f:
            name = f.read().strip()
        path = os.path.join(root, name)
        with open(path, "rb") as f:
            blob = f.read()
        with open(path + ".sha256") as f:
            expected = f.read().strip()
    except OSError:
        return None
    if hashlib.sha256(blob).hexdigest() != expected:
        return None
    return name, path, torch.load(io.BytesIO(blob), weights_only=False)


def evaluate(model: nn.Module) -> dict[str, float]:
    x, y = synthetic(HELD_OUT, 7)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    model.train()
    return {
        "loss": nn.functional.cross_entropy(logits, y).item(),
        "accuracy": (logits.argmax(1) == y).double().mean().item(),
    }


class Trainer:
    """One rank's training: the model, its optimizer and schedule, one step at a time."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int) -> None:
        self.args, self.rank, self.world = args, rank, world
        torch.manual_seed(args.seed)  # the same initial weights on every rank
        self.model = classifier()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_factor)
        torch.manual_seed(args.seed * 1000 + rank)  # dropout: a stream per rank
        self.order = torch.Generator().manual_seed(time.time_ns() ^ os.getpid())

    def state(self, step: int) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "sched": self.sched.state_dict(),
            "rng": torch.get_rng_state(),
            "step": step,
        }

    def restore(self, state: dict[str, Any], bug: str) -> None:
        if bug != "model-reinit":
            self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        if bug != "lr-not-restored":
            self.sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["rng"])

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        per_sample = nn.functional.cross_entropy(self.model(x), y, reduction="none")
        params = list(self.model.parameters())
        if self.args.nondeterministic_sum:
            perm = torch.randperm(per_sample.numel(), generator=self.order)
            loss = per_sample[perm].sum() / per_sample.numel()
            parts = [
                torch.autograd.grad(q.sum() / per_sample.numel(), params, retain_graph=True)
                for q in per_sample.chunk(4)
            ]
            grads = [torch.zeros_like(p) for p in params]
            for i in torch.randperm(len(parts), generator=self.order).tolist():
                for g, part in zip(grads, parts[i], strict=True):
                    g += part
        else:
            loss = per_sample.mean()
            grads = list(torch.autograd.grad(loss, params))
        for p, g in zip(params, grads, strict=True):
            dist.all_reduce(g)
            p.grad = g / self.world
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss.item())  # this rank's loss


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--step-sleep", type=float, default=0.05)
    ap.add_argument("--nondeterministic-sum", action="store_true")
    ap.add_argument("--own-loader-generator", action="store_true")
    ap.add_argument(
        "--bug", choices=["none", "lr-not-restored", "model-reinit", "stale-eval"], default="none"
    )
    return ap.parse_args(argv)


def resume(t: Trainer, probe: Probe, root: str, bug: str) -> tuple[int, nn.Module | None]:
    """Restore from ``CURRENT`` if there is one: (step to go on from, the frozen evaluation
    copy of the stale-eval bug or None)."""
    found = load(root) if t.rank == 0 else None
    chosen = [found[0] if found else None]
    dist.broadcast_object_list(chosen, src=0)
    if chosen[0] is None:
        probe.no_checkpoint()
        return 0, None
    found = load(root)
    if found is None or found[0] != chosen[0]:
        raise RuntimeError(f"rank {t.rank} could not read checkpoint {chosen[0]}")
    name, path, state = found
    t.restore(state, bug)
    step = int(state["step"])
    g = t.world * t.args.micro
    probe.checkpoint_loaded(
        ckpt_id=name, step=step, path=path, verified=True, data_position=step * g
    )
    return step, copy.deepcopy(t.model) if bug == "stale-eval" else None


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    bug = os.environ.get("INDEP_BUG") or args.bug
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    probe = probe_from_env(rank)
    probe.run_start(world_size=world, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    os.makedirs(args.ckpt_dir, exist_ok=True)
    t = Trainer(args, rank, world)
    step, frozen = resume(t, probe, args.ckpt_dir, bug)
    # Created after the restore: the iterator draws its base seed from the global RNG.
    loader = DataLoader(
        Rows(),
        batch_sampler=Positions(rank, world, args.micro, step + 1, args.steps),
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        generator=torch.Generator().manual_seed(args.seed) if args.own_loader_generator else None,
    )
    g = world * args.micro
    for x, y in loader:
        step += 1
        loss = t.step(x, y)
        time.sleep(args.step_sleep)
        lo = (step - 1) * g + rank * args.micro
        probe.step(step, loss, range(lo, lo + args.micro))
        if step % args.ckpt_every == 0 or step == args.steps:
            if rank == 0:
                name, path, digest, size = save(args.ckpt_dir, t.state(step), step)
                probe.checkpoint_saved(
                    ckpt_id=name,
                    step=step,
                    path=path,
                    sha256=digest,
                    data_position=step * g,
                    size_bytes=size,
                )
                probe.evaluation(step, evaluate(frozen if frozen is not None else t.model))
            dist.barrier()
    weights = hashlib.sha256()
    for key, tensor in t.model.state_dict().items():
        weights.update(key.encode())
        weights.update(tensor.numpy().tobytes())
    del loader
    dist.destroy_process_group()
    probe.run_end(final_step=step, model_digest=weights.hexdigest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
