"""A Hugging Face Trainer job, instrumented for faultdrill with one call (``instrument``).

A 2-layer GPT-2 built from a config (nothing is downloaded) learns a synthetic corpus.
Run by torchrun (``faultdrill run examples/hf_trainer/plan.yaml`` does that), or alone::

    python examples/hf_trainer/train.py --workload-config cfg.json

The config (JSON, all optional): ``steps`` (30), ``step_sleep_s`` (0), ``resume``
(``verified``: the newest checkpoint that matches its manifest; ``auto``: the Trainer's
own pick, the newest ``checkpoint-N`` whatever its state), ``ignore_data_skip`` (false),
``ckpt_dir`` (else ``$FAULTDRILL_CKPT_DIR``), ``workers`` (0: the data loader's worker
processes). Checkpoint cadence and retention come from
``$FAULTDRILL_CKPT_EVERY`` and ``$FAULTDRILL_CKPT_KEEP``, the seed from ``$FAULTDRILL_SEED``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from faultdrill.integrations.transformers import instrument

VOCAB, SEQ, SIZE = 64, 16, 256


class Corpus(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``SIZE`` token sequences; sequence ``i`` depends only on ``(seed, i)``: a random
    walk over a fixed successor table (two successors per token), so there is something
    to learn."""

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
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


class Pace(TrainerCallback):
    """Slows each step down so that a drill's fault lands mid-run."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        time.sleep(self.sleep_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload-config", default="")
    opts = parser.parse_args()
    cfg: dict[str, Any] = {}
    if opts.workload_config:
        with open(opts.workload_config) as f:
            cfg = json.load(f)
    out = cfg.get("ckpt_dir") or os.environ.get("FAULTDRILL_CKPT_DIR", "hf-ckpt")
    seed = int(os.environ.get("FAULTDRILL_SEED", "0"))
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    set_seed(seed)
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=out,
        max_steps=int(cfg.get("steps", 30)),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        save_strategy="steps",
        save_steps=int(os.environ.get("FAULTDRILL_CKPT_EVERY", "10")),
        save_total_limit=int(os.environ.get("FAULTDRILL_CKPT_KEEP", "3")),
        logging_steps=1000,
        report_to="none",
        seed=seed,
        use_cpu=True,
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None,
        dataloader_num_workers=int(cfg.get("workers", 0)),
        ignore_data_skip=bool(cfg.get("ignore_data_skip", False)),
        disable_tqdm=True,
        ddp_find_unused_parameters=False,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Corpus(seed))
    fd = instrument(trainer)
    if cfg.get("step_sleep_s"):
        trainer.add_callback(Pace(float(cfg["step_sleep_s"])))
    if cfg.get("resume", "verified") == "auto":
        resume = get_last_checkpoint(out) if os.path.isdir(out) else None  # the common idiom
    else:
        resume = fd.verified_checkpoint()
    trainer.train(resume_from_checkpoint=resume)


if __name__ == "__main__":
    main()
