"""The reference workload's data through ``torch.utils.data.DataLoader`` worker processes.

With ``loader_workers > 0`` the batches of :mod:`faultdrill.workloads.lm` are fetched by
DataLoader workers (started with ``fork``, ``spawn`` or ``forkserver``, persistent across
epochs or not), as most real training jobs do, so a drill's evidence comes from a job with
child processes. The values are the same as without workers: item ``p`` of the dataset is
global stream position ``p`` (see the corpus in ``lm``), and the batch sampler hands each
rank, step by step, exactly the positions ``lm`` would read itself. The positions come back
with the batch, so the job reports the sample ids it was *given*, not ones it derived.

A module of its own so that ``spawn`` workers unpickle these classes by their import path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

if TYPE_CHECKING:
    from faultdrill.workloads.lm_config import LMConfig

__all__ = ["StepBatches", "StreamCorpus", "StreamPositions", "make_loader"]


class StreamCorpus(Protocol):
    """What the loader reads of a corpus (``lm.Corpus`` is one): said here, not imported
    from ``lm``, because ``lm`` imports this module (the loader sits below the job)."""

    samples: torch.Tensor

    def indices(self, positions: range) -> list[int]:
        """The sample index of each global stream position."""
        ...


class StreamPositions(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Item ``p``: (``p``, inputs, next-token targets) of global stream position ``p``."""

    def __init__(self, corpus: StreamCorpus) -> None:
        self.corpus = corpus

    def __len__(self) -> int:  # the stream is endless; DataLoader asks only for batches
        return 1 << 62

    def __getitem__(self, position: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        row = self.corpus.samples[self.corpus.indices(range(position, position + 1))[0]]
        return position, row[:-1], row[1:]


class StepBatches(Sampler[list[int]]):
    """This rank's positions for steps ``first..last`` of the current epoch, one list per
    step; :meth:`set_epoch` moves it on (the loader keeps its persistent workers)."""

    def __init__(self, global_batch: int, rank: int, per_rank: int) -> None:
        self.global_batch = global_batch
        self.rank = rank
        self.per_rank = per_rank
        self.first = self.last = 0
        self.position = 0  # stream position at the start of step ``first``

    def set_epoch(self, first: int, last: int, position: int) -> None:
        self.first, self.last, self.position = first, last, position

    def __len__(self) -> int:
        return max(0, self.last - self.first + 1)

    def __iter__(self) -> Iterator[list[int]]:
        for i in range(len(self)):
            lo = self.position + i * self.global_batch + self.rank * self.per_rank
            yield list(range(lo, lo + self.per_rank))


def make_loader(
    cfg: LMConfig, corpus: StreamCorpus, batches: StepBatches
) -> DataLoader[tuple[int, torch.Tensor, torch.Tensor]]:
    """The DataLoader the config asks for. Its generator is private: building the loader's
    worker seeds must not draw from the global RNG (resumed runs would diverge)."""
    return DataLoader(
        StreamPositions(corpus),
        batch_sampler=batches,
        num_workers=cfg.loader_workers,
        multiprocessing_context=cfg.loader_start,
        persistent_workers=cfg.loader_persistent,
        generator=torch.Generator(),
    )
