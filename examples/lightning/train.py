"""A PyTorch Lightning job, instrumented for faultdrill with one callback.

A tiny next-token model learns a synthetic corpus; the data comes from a torchdata
``StatefulDataLoader``, whose position Lightning saves in every checkpoint and restores on
resume. Run by torchrun (``faultdrill run examples/lightning/plan.yaml`` does that), or
alone: ``python examples/lightning/train.py --workload-config cfg.json``.

The config (JSON, all optional): ``steps`` (24), ``step_sleep_s`` (0), ``loader``:
``stateful`` (a ``StatefulDataLoader`` over a ``DistributedSampler`` seeded with the run's
seed), ``plain`` (the same sampler in a torch ``DataLoader``, whose position Lightning
cannot restore mid-epoch: a resume starts the epoch's data again), ``stateful-shuffle``
(``StatefulDataLoader(shuffle=True)``, which Lightning wraps in a distributed sampler: the
order is drawn from the global RNG, which a resume does not restore); ``resume`` (``verified``: the newest
checkpoint that matches its manifest; ``newest``: the newest ``step-N`` directory, unchecked),
``ckpt_dir`` (else ``$FAULTDRILL_CKPT_DIR``).
Checkpoint cadence from ``$FAULTDRILL_CKPT_EVERY``, the seed from ``$FAULTDRILL_SEED``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, DistributedSampler, default_collate
from torchdata.stateful_dataloader import StatefulDataLoader

from faultdrill.integrations.lightning import FaultdrillCallback
from faultdrill.integrations.observe import ObservedCollator, ObservedDataset

VOCAB, SEQ, SIZE = 64, 16, 256


class Corpus(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``SIZE`` random walks over a fixed successor table; walk ``i`` depends only on
    ``(seed, i)``."""

    def __init__(self, seed: int) -> None:
        table = torch.randint(VOCAB, (VOCAB, 2), generator=torch.Generator().manual_seed(seed))
        rows = []
        for i in range(SIZE):
            gen = torch.Generator().manual_seed(seed * 100_003 + i)
            tok = int(torch.randint(VOCAB, (1,), generator=gen))
            seq = [tok]
            for choice in torch.randint(2, (SEQ - 1,), generator=gen).tolist():
                tok = int(table[tok, choice])
                seq.append(tok)
            rows.append(seq)
        self.tokens = torch.tensor(rows)

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"tokens": self.tokens[i]}


class NextToken(pl.LightningModule):
    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.sleep_s = sleep_s
        self.embed = torch.nn.Embedding(VOCAB, 32)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, VOCAB)
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        tokens = batch["tokens"]
        logits = self.mlp(self.embed(tokens[:, :-1]))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)
        )
        if self.sleep_s:
            time.sleep(self.sleep_s / 2)  # two micro-batches per optimizer step
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload-config", default="")
    opts = parser.parse_args()
    cfg: dict[str, Any] = {}
    if opts.workload_config:
        with open(opts.workload_config) as f:
            cfg = json.load(f)
    ckpt = cfg.get("ckpt_dir") or os.environ.get("FAULTDRILL_CKPT_DIR", "pl-ckpt")
    seed = int(os.environ.get("FAULTDRILL_SEED", "0"))
    torch.set_num_threads(1)
    pl.seed_everything(seed, verbose=False)
    data = ObservedDataset(Corpus(seed))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    kind = cfg.get("loader", "stateful")
    collate = ObservedCollator(default_collate)
    if kind == "stateful-shuffle":  # Lightning wraps the loader's own RandomSampler
        loader: DataLoader[Any] = StatefulDataLoader(
            data, batch_size=4, shuffle=True, collate_fn=collate
        )
    else:  # the order is a function of (seed, epoch) alone; Lightning calls set_epoch
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed)
        loader_cls = DataLoader if kind == "plain" else StatefulDataLoader
        loader = loader_cls(data, batch_size=4, sampler=sampler, collate_fn=collate)
    fd = FaultdrillCallback(checkpoint_dirs=True)  # step-000008/model.ckpt: one dir each
    saver = ModelCheckpoint(
        dirpath=ckpt,
        filename="step-{step:06d}/model",
        auto_insert_metric_name=False,
        every_n_train_steps=int(os.environ.get("FAULTDRILL_CKPT_EVERY", "8")),
        save_top_k=-1,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=local,
        num_nodes=world // local,
        strategy=DDPStrategy(process_group_backend="gloo") if world > 1 else "auto",
        max_steps=int(cfg.get("steps", 24)),
        accumulate_grad_batches=2,
        callbacks=[fd, saver],
        use_distributed_sampler=kind == "stateful-shuffle",
        deterministic=True,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    if cfg.get("resume", "verified") == "newest":  # the newest directory, unchecked
        found = sorted(Path(ckpt).glob("step-*/model.ckpt")) if os.path.isdir(ckpt) else []
        resume = str(found[-1]) if found else None
    else:
        resume = fd.verified_checkpoint(ckpt)
    trainer.fit(NextToken(float(cfg.get("step_sleep_s", 0))), loader, ckpt_path=resume)


if __name__ == "__main__":
    main()
