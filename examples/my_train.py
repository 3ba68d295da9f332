"""A plain PyTorch training loop instrumented with the faultdrill probe (see docs/probe.md).

``python examples/my_train.py CKPT_DIR``: without FAULTDRILL_EVENTS_DIR the probe does nothing.
"""

import hashlib
import io
import os
import sys
from pathlib import Path

import torch

from faultdrill.probe import probe_from_env

CKPT, STEPS, BATCH = Path(sys.argv[1] if len(sys.argv) > 1 else "ckpt"), 30, 16
torch.manual_seed(0)
data_x = torch.randn(1000, 8)
data_y = data_x @ torch.arange(8.0) + 1.0
held_x = torch.randn(200, 8, generator=torch.Generator().manual_seed(1))  # never trained on
held_y = held_x @ torch.arange(8.0) + 1.0
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
probe = probe_from_env()
probe.run_start(world_size=1)  # in a distributed job: after init_process_group


def durable_write(path: Path, data: bytes) -> None:  # (fsync the directory too, in earnest)
    with open(f"{path}.tmp", "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    os.replace(f"{path}.tmp", path)


def heldout_loss() -> float:
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(held_x).squeeze(1), held_y).item()


CKPT.mkdir(parents=True, exist_ok=True)
step = position = 0  # optimizer steps done; samples of the stream consumed
if not (CKPT / "latest").exists():
    probe.no_checkpoint()
else:
    name, sha = (CKPT / "latest").read_text().split()
    blob = (CKPT / name).read_bytes()
    if hashlib.sha256(blob).hexdigest() != sha:
        probe.no_checkpoint(rejected=[{"id": name, "reason": "sha256 mismatch"}])
    else:
        state = torch.load(io.BytesIO(blob), weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, position = state["step"], state["position"]
        probe.checkpoint_loaded(ckpt_id=name, step=step, path=str(CKPT / name), verified=True,
                                data_position=position)  # fmt: skip

while step < STEPS:
    ids = range(position, position + BATCH)  # global stream positions: each consumed once
    rows = torch.tensor([i % len(data_x) for i in ids])
    loss = torch.nn.functional.mse_loss(model(data_x[rows]).squeeze(1), data_y[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
    step, position = step + 1, position + BATCH
    probe.step(step, loss.item(), ids)
    if step % 10 == 0:
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "position": position}, buf)  # fmt: skip
        name, blob = f"step-{step:06d}.pt", buf.getvalue()
        sha = hashlib.sha256(blob).hexdigest()
        durable_write(CKPT / name, blob)  # the data first, then the pointer to it
        durable_write(CKPT / "latest", f"{name} {sha}".encode())
        probe.checkpoint_saved(ckpt_id=name, step=step, path=str(CKPT / name), sha256=sha,
                               data_position=position, size_bytes=len(blob))  # fmt: skip
        probe.evaluation(step, {"loss": heldout_loss()})  # the model as trained, held-out data

buf = io.BytesIO()
torch.save(model.state_dict(), buf)  # the exported model, as a user would ship it
final = buf.getvalue()
durable_write(CKPT / "model-final.pt", final)
probe.artifact(path=str(CKPT / "model-final.pt"), sha256=hashlib.sha256(final).hexdigest(),
               size_bytes=len(final), step=step)  # fmt: skip
digest = hashlib.sha256(b"".join(t.numpy().tobytes() for t in model.state_dict().values()))
probe.run_end(final_step=step, model_digest=digest.hexdigest())
