"""A job that prints only epoch lines, in the style of the PyTorch DDP tutorial
(``multigpu_torchrun.py``: a Trainer with ``_run_epoch``, ``_save_snapshot`` and
``_load_snapshot``, one ``snapshot.pt``), on CPU over gloo; run it under torchrun. It never
imports faultdrill and prints nothing at a fresh start or at the end, only::

    [GPU1] Epoch 6 | Batchsize: 32 | Steps: 16            at the start of epoch 6
    Epoch 6 | Training snapshot saved at snapshot.pt       after epoch 6 (rank 0)
    Resuming training from snapshot at Epoch 6             on resume

As published, ``_save_snapshot`` records ``EPOCHS_RUN = epoch`` after finishing that epoch,
and a resume starts at it: a restart runs a completed epoch again. ``--fixed`` records
``epoch + 1``. ``--snapshot_path``: where the snapshot is (the tutorial's ``main`` takes
it; default ``snapshot.pt`` in the working directory); ``--step_sleep``: seconds each batch
sleeps, so that an epoch lasts long enough to be interrupted.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F  # noqa: N812  (as the tutorial writes it)
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        gen = torch.Generator().manual_seed(1234)
        self.size = size
        self.data = [
            (torch.rand(20, generator=gen), torch.rand(1, generator=gen)) for _ in range(size)
        ]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index]


def say(text: str) -> None:
    # one write per line: the launcher's output file is shared with the agent
    os.write(1, f"{text}\n".encode())


def ddp_setup() -> None:
    init_process_group(backend="gloo")


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        train_data: DataLoader[tuple[torch.Tensor, torch.Tensor]],
        optimizer: torch.optim.Optimizer,
        save_every: int,
        snapshot_path: str,
        fixed: bool,
        step_sleep: float,
    ) -> None:
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        self.fixed = fixed
        self.step_sleep = step_sleep
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path: str) -> None:
        snapshot = torch.load(snapshot_path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        say(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        time.sleep(self.step_sleep)

    def _run_epoch(self, epoch: int) -> None:
        b_sz = len(next(iter(self.train_data))[0])
        say(
            f"[GPU{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}"
        )
        self.train_data.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch: int) -> None:
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),  # type: ignore[union-attr]
            # the tutorial's bug: the epoch just finished counts as not run
            "EPOCHS_RUN": epoch + 1 if self.fixed else epoch,
        }
        torch.save(snapshot, self.snapshot_path)
        say(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs() -> tuple[
    Dataset[tuple[torch.Tensor, torch.Tensor]], torch.nn.Module, torch.optim.Optimizer
]:
    train_set = MyTrainDataset(1024)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor]], batch_size: int
) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset)
    )


def main(
    save_every: int,
    total_epochs: int,
    batch_size: int,
    snapshot_path: str = "snapshot.pt",
    fixed: bool = False,
    step_sleep: float = 0.0,
) -> None:
    torch.manual_seed(1234)
    ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path, fixed, step_sleep)
    trainer.train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument(
        "--batch_size", default=32, type=int, help="Input batch size on each device"
    )
    parser.add_argument("--snapshot_path", default="snapshot.pt")
    parser.add_argument("--fixed", action="store_true", help="save epochs run = epoch + 1")
    parser.add_argument("--step_sleep", default=0.02, type=float)
    args = parser.parse_args()
    main(
        args.save_every,
        args.total_epochs,
        args.batch_size,
        args.snapshot_path,
        args.fixed,
        args.step_sleep,
    )
