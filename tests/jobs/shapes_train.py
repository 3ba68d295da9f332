"""A small DDP training job shaped like real ones, written independently of faultdrill's
reference workload: the healthy-shape sweep runs drills on it (tests/test_job_shapes.py).

Run under torchrun (gloo, CPU). What each option adds to the job's shape:

--loader-workers N     batches come from a DataLoader with N worker processes
--loader-start M       fork | spawn | forkserver (the workers' start method)
--no-persistent        the workers are started again every epoch
--helper               every rank runs a long-lived helper process (a "logger service",
                       ends when its parent's pipe closes) and runs a short tool with
                       ``subprocess.run`` at every checkpoint
--async-ckpt           rank 0 writes checkpoints from a background thread while training
                       goes on (the next save, and the end, wait for the previous one)
--grad-accum K         K micro-batches per optimizer step (DDP no_sync for the first K-1)
--log-every N          the loss is computed and reported only every N steps (others: None)
--step-sleep S         S more seconds per step (a step of a real model takes time)

Known-bad shapes (``--bad``), which faultdrill must catch:

detached-stepper   rank 1 starts a detached child (own session) with its own probe that,
                   once rank 1 is gone, keeps writing step events for rank 1 for 60 s
leaky-children     rank 1 starts two worker-like children (own session) that ignore the
                   death of their parent and live on for 60 s

Data: item ``p`` of an endless stream is dataset row ``p % rows``; optimizer step ``s``
(from 1) consumes positions ``[(s-1)*G, s*G)`` with ``G = world * accum * micro``, rank
``r`` micro-batch ``m`` taking ``micro`` contiguous positions; the sample ids reported are
the positions the loader handed out. Checkpoints: ``ckpt-<step>/state.pt`` + ``manifest.json``
(sha256), published by rewriting ``latest`` atomically, all written with fsync. Rank 0 alone
evaluates on a held-out set at every checkpoint and exports the final model
(``model-final.pt`` in the checkpoint directory).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, Sampler

from faultdrill.probe import Probe, probe_from_env

ROWS, FEATURES, CLASSES = 96, 16, 4


class Stream(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    def __init__(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(ROWS, FEATURES, generator=gen)
        self.y = torch.randint(CLASSES, (ROWS,), generator=gen)

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, p: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return p, self.x[p % ROWS], self.y[p % ROWS]


class MicroBatches(Sampler[list[int]]):
    """This rank's micro-batches for optimizer steps ``first..last``."""

    def __init__(self, rank: int, world: int, micro: int, accum: int) -> None:
        self.rank, self.world, self.micro, self.accum = rank, world, micro, accum
        self.first = self.last = 0

    def __len__(self) -> int:
        return max(0, self.last - self.first + 1) * self.accum

    def __iter__(self) -> Iterator[list[int]]:
        g = self.world * self.accum * self.micro
        for s in range(self.first, self.last + 1):
            for m in range(self.accum):
                lo = (s - 1) * g + (m * self.world + self.rank) * self.micro
                yield list(range(lo, lo + self.micro))


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def write_durably(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Checkpoints:
    def __init__(self, root: str, probe: Probe) -> None:
        self.root, self.probe = root, probe
        os.makedirs(root, exist_ok=True)
        self.pending: threading.Thread | None = None

    def save(self, state: dict[str, Any], step: int, position: int, background: bool) -> None:
        self.wait()
        blob = io.BytesIO()
        torch.save(state, blob)  # a snapshot now: training may change the tensors after
        data = blob.getvalue()
        if background:
            self.pending = threading.Thread(
                target=self._write, args=(data, step, position), daemon=True
            )
            self.pending.start()
        else:
            self._write(data, step, position)

    def wait(self) -> None:
        if self.pending is not None:
            self.pending.join()
            self.pending = None

    def _write(self, data: bytes, step: int, position: int) -> None:
        started = time.monotonic()
        cid = f"ckpt-{step}"
        d = os.path.join(self.root, cid)
        os.makedirs(d, exist_ok=True)
        state_path = os.path.join(d, "state.pt")
        write_durably(state_path, data)
        digest = hashlib.sha256(data).hexdigest()
        manifest = {"step": step, "position": position, "sha256": digest}
        write_durably(os.path.join(d, "manifest.json"), json.dumps(manifest).encode())
        write_durably(os.path.join(self.root, "latest"), cid.encode())
        self.probe.checkpoint_saved(
            ckpt_id=cid,
            step=step,
            path=state_path,
            sha256=digest,
            data_position=position,
            size_bytes=len(data),
            duration_s=time.monotonic() - started,
        )

    def newest(self) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        try:
            with open(os.path.join(self.root, "latest")) as f:
                cid = f.read().strip()
            with open(os.path.join(self.root, cid, "manifest.json")) as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            return None
        path = os.path.join(self.root, cid, "state.pt")
        if sha256_file(path) != manifest["sha256"]:
            return None
        return cid, manifest, torch.load(path, weights_only=True)


def start_helper() -> subprocess.Popen[bytes]:
    """A long-lived helper that ends when this process's end closes its stdin."""
    code = "import sys\nfor _ in sys.stdin.buffer: pass\n"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


def start_leaky_children(n: int) -> None:
    code = "import os, time\nos.setsid()\ntime.sleep(60)\n"
    for _ in range(n):
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def start_detached_stepper(rank: int, micro: int, world: int, accum: int) -> None:
    """Fork a child in its own session that, once this process is gone, writes steps for
    ``rank`` with its own probe, continuing where the parent got to (read from a file)."""
    parent = os.getpid()
    if os.fork():
        return
    os.setsid()
    for fd in (0, 1, 2):
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    probe = probe_from_env(rank)
    g = world * accum * micro
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.1)
    step = int(os.environ.get("SHAPES_STEPPER_FROM", "0"))
    try:
        with open(os.environ["SHAPES_PROGRESS_FILE"]) as f:
            step = int(f.read().strip() or 0)
    except (KeyError, OSError, ValueError):
        pass
    while time.monotonic() < deadline:
        step += 1
        lo = (step - 1) * g + rank * micro
        probe.step(step, 1.0, range(lo, lo + micro))
        time.sleep(0.2)
    os._exit(0)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--loader-workers", type=int, default=0)
    ap.add_argument("--loader-start", default="fork")
    ap.add_argument("--no-persistent", action="store_true")
    ap.add_argument("--helper", action="store_true")
    ap.add_argument("--async-ckpt", action="store_true")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=1)
    ap.add_argument(
        "--step-sleep", type=float, default=0.0, help="seconds per step, besides compute"
    )
    ap.add_argument("--bad", choices=["detached-stepper", "leaky-children"], default=None)
    return ap.parse_args(argv)


def heldout_metrics(model: nn.Module, seed: int) -> dict[str, float]:
    """Loss and accuracy on 32 rows drawn apart from the training rows."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(32, FEATURES, generator=gen)
    y = torch.randint(CLASSES, (32,), generator=gen)
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(dim=1) == y).double().mean().item()
    return {"loss": loss, "accuracy": accuracy}


def export(model: nn.Module, path: str, probe: Probe, step: int) -> None:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    write_durably(path, buf.getvalue())
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    probe.artifact(path=path, sha256=digest, size_bytes=len(buf.getvalue()), step=step)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    probe = probe_from_env(rank)
    probe.run_start(world_size=world, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    helper = start_helper() if args.helper else None
    bad = args.bad or os.environ.get("SHAPES_BAD") or None
    progress_file = os.path.join(args.ckpt_dir, f".progress-rank{rank}")
    if bad == "detached-stepper" and rank == 1 and not os.path.exists(progress_file):
        os.environ["SHAPES_PROGRESS_FILE"] = progress_file
        start_detached_stepper(rank, args.micro, world, args.grad_accum)
    if bad == "leaky-children" and rank == 1:
        start_leaky_children(2)

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpts = Checkpoints(args.ckpt_dir, probe)
    step = 0
    found = ckpts.newest()
    chosen = [found[0] if found else None]
    dist.broadcast_object_list(chosen, src=0)
    if chosen[0] is not None and found is not None and found[0] == chosen[0]:
        cid, manifest, state = found
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(manifest["step"])
        probe.checkpoint_loaded(
            ckpt_id=cid,
            step=step,
            path=os.path.join(args.ckpt_dir, cid, "state.pt"),
            verified=True,
            data_position=int(manifest["position"]),
        )
    elif chosen[0] is not None:
        raise RuntimeError(f"rank {rank} could not read checkpoint {chosen[0]}")
    else:
        probe.no_checkpoint()

    ddp = DistributedDataParallel(model)
    sampler = MicroBatches(rank, world, args.micro, args.grad_accum)
    loader = DataLoader(
        Stream(args.seed),
        batch_sampler=sampler,
        num_workers=args.loader_workers,
        multiprocessing_context=args.loader_start if args.loader_workers else None,
        persistent_workers=bool(args.loader_workers) and not args.no_persistent,
        generator=torch.Generator(),
    )
    g = world * args.grad_accum * args.micro
    epoch_steps = 8  # a kill at step 12 lands mid-epoch, not while workers start
    batches: Iterator[Any] = iter(())
    while step < args.steps:
        sampler.first = step + 1
        sampler.last = min(args.steps, (step // epoch_steps + 1) * epoch_steps)
        batches = iter(loader)
        for _ in range(sampler.first, sampler.last + 1):
            step += 1
            seen: list[int] = []
            total = torch.zeros(())
            optimizer.zero_grad(set_to_none=True)
            for m in range(args.grad_accum):
                positions, x, y = next(batches)
                seen.extend(positions.tolist())
                last_micro = m == args.grad_accum - 1
                with contextlib.nullcontext() if last_micro else ddp.no_sync():
                    loss = nn.functional.cross_entropy(ddp(x), y) / args.grad_accum
                    loss.backward()
                total += loss.detach()
            optimizer.step()
            time.sleep(args.step_sleep)
            report = total.item() if step % args.log_every == 0 else None
            probe.step(step, report, seen)
            if bad == "detached-stepper" and rank == 1:
                write_durably(progress_file, str(step).encode())
            if step % args.ckpt_every == 0 or step == args.steps:
                if rank == 0:
                    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                    ckpts.save(state, step, step * g, background=args.async_ckpt)
                    probe.evaluation(step, heldout_metrics(model, args.seed))
                if args.helper:
                    subprocess.run([sys.executable, "-c", "pass"], check=True)
                if not args.async_ckpt:
                    dist.barrier()
    ckpts.wait()
    dist.barrier()
    digest = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        digest.update(key.encode())
        digest.update(tensor.numpy().tobytes())
    # The loader's workers (forked after the helper started) hold the helper's pipe too:
    # they must be gone before closing it can end the helper.
    del batches, ddp, loader
    gc.collect()
    dist.destroy_process_group()
    if rank == 0:
        export(model, os.path.join(args.ckpt_dir, "model-final.pt"), probe, step)
    if helper is not None:
        assert helper.stdin is not None
        helper.stdin.close()
        helper.wait()
    probe.run_end(final_step=step, model_digest=digest.hexdigest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
