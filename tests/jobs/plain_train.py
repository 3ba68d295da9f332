"""A training job that knows nothing of faultdrill: it only prints its progress.

DDP over gloo on CPU (run it under torchrun), a small MLP on a synthetic regression set,
SGD with momentum; checkpoints ``<ckpt>/step-NNNNNN/state.pt`` with its sha256 beside it,
published through ``<ckpt>/latest`` (the id, alone) after the data is durable; on start it
follows ``latest``, checks the sha256 and resumes. It never imports faultdrill: a drill
reads its progress from these lines (``[rank R]`` prefix, then)::

    start world=W
    resumed from step-000010 at step 10 position 80 (verified)
    no checkpoint; starting at step 0
    step 12 loss 0.8123 samples 88:92 t=1234.567890
    saved checkpoint step-000020 at step 20 position 160
    done at step 30 model 5f3a...

``samples A:B`` are the global stream positions this rank consumed (half-open); ``t`` is
the job's own ``time.monotonic()`` when it printed the line (a test measures how late the
harness read it). Known-bad mode: ``PLAIN_TRAIN_RESUME=ignore`` makes a restarted process
(``TORCHELASTIC_RESTART_COUNT`` > 0) ignore its checkpoint and train from scratch.
``PLAIN_TRAIN_QUIET=1``: print nothing at a fresh start or at the end (no ``start``, ``no
checkpoint`` or ``done`` line): only the step, save and resume lines.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

DATASET = 4096  # synthetic samples; position p reads sample p % DATASET


def say(rank: int, text: str) -> None:
    # one write per line: the ranks share the launcher's output file, and print() writes
    # the text and its newline separately, so two ranks' lines could interleave
    os.write(1, f"[rank {rank}] {text}\n".encode())


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def durable(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save(ckpt: str, step: int, position: int, state: dict[str, object], keep: int) -> str:
    cid = f"step-{step:06d}"
    tmp = os.path.join(ckpt, f".tmp-{cid}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    durable(os.path.join(tmp, "state.pt"), data)
    durable(os.path.join(tmp, "state.sha256"), hashlib.sha256(data).hexdigest().encode())
    final = os.path.join(ckpt, cid)
    if os.path.exists(final):  # a step redone after a resume overwrites its old save
        shutil.rmtree(final)
    os.rename(tmp, final)
    durable(os.path.join(ckpt, ".latest.tmp"), cid.encode())
    os.rename(os.path.join(ckpt, ".latest.tmp"), os.path.join(ckpt, "latest"))
    saved = sorted(n for n in os.listdir(ckpt) if n.startswith("step-"))
    for old in saved[:-keep]:
        if old != cid:
            shutil.rmtree(os.path.join(ckpt, old), ignore_errors=True)
    return cid


def load(ckpt: str) -> tuple[str, dict[str, object]] | None:
    """What ``latest`` names, verified against its sha256; None when there is none."""
    try:
        with open(os.path.join(ckpt, "latest")) as f:
            cid = f.read().split()[0]
        with open(os.path.join(ckpt, cid, "state.pt"), "rb") as f:
            data = f.read()
        with open(os.path.join(ckpt, cid, "state.sha256")) as f:
            want = f.read().strip()
    except (OSError, IndexError):
        return None
    if hashlib.sha256(data).hexdigest() != want:
        raise SystemExit(f"checkpoint {cid} does not match its sha256")
    return cid, torch.load(io.BytesIO(data), weights_only=False)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--keep", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    quiet = os.environ.get("PLAIN_TRAIN_QUIET") == "1"
    if not quiet:
        say(rank, f"start world={world}")

    gen = torch.Generator().manual_seed(args.seed)
    xs = torch.randn(DATASET, 16, generator=gen)
    ys = xs @ torch.randn(16, 1, generator=gen) + 0.1 * torch.randn(DATASET, 1, generator=gen)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    step, position = 0, 0
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    found = None
    if not (restarted and os.environ.get("PLAIN_TRAIN_RESUME") == "ignore"):
        found = load(args.ckpt)
    if found is None:
        if not quiet:
            say(rank, "no checkpoint; starting at step 0")
    else:
        cid, state = found
        model.load_state_dict(state["model"])  # type: ignore[arg-type]
        opt.load_state_dict(state["optim"])  # type: ignore[arg-type]
        step, position = int(state["step"]), int(state["position"])  # type: ignore[call-overload]
        say(rank, f"resumed from {cid} at step {step} position {position} (verified)")

    per_rank = args.batch // world
    while step < args.steps:
        lo = position + rank * per_rank
        idx = torch.arange(lo, lo + per_rank) % DATASET
        loss = nn.functional.mse_loss(ddp(xs[idx]), ys[idx])
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        step, position = step + 1, position + args.batch
        say(
            rank,
            f"step {step} loss {loss.item()!r} samples {lo}:{lo + per_rank} "
            f"t={time.monotonic():.6f}",
        )
        if step % args.every == 0 and rank == 0:
            state = {
                "model": model.state_dict(),
                "optim": opt.state_dict(),
                "step": step,
                "position": position,
            }
            cid = save(args.ckpt, step, position, state, args.keep)
            say(rank, f"saved checkpoint {cid} at step {step} position {position}")
        time.sleep(args.step_sleep)
    dist.barrier()
    if not quiet:
        say(rank, f"done at step {step} model {digest(model)}")
    os._exit(0)  # nothing is left to flush; the interpreter's teardown of torch takes seconds


if __name__ == "__main__":
    main()
