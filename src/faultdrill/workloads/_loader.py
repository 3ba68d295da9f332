"""The reference workload's data through ``torch.utils.data.DataLoader`` worker processes.

With ``loader_workers > 0`` the batches of :mod:`faultdrill.workloads.lm` are fetched by
DataLoader workers (started with ``fork``, ``spawn`` or ``forkserver``, persistent across
epochs or not), as most real training jobs do, so a drill's evidence comes from a job with
child processes. The values are the same as without workers: item ``p`` of the dataset is
global stream position ``p`` (see the corpus in ``lm``), and the batch sampler hands each
rank, step by step, exactly the positions ``lm`` would read itself. The positions come back
with the batch, so the job reports the sample ids it was *given*, not ones it derived.

With ``data_files`` the dataset is :class:`ShardFiles`: the corpus's training sequences
written once into shard files of the item's data directory (``data_dir``), and every item
read back from its file (``pread`` of one row) when it is fetched. The rows are the same
int64 tokens, so ids, batches and losses are bitwise those of the in-memory corpus. A read
that fails (``OSError``: EIO from a server that is gone) is retried every
:data:`RETRY_EVERY_S` for ``data_retry_s``, then raised (the job crashes and its platform
restarts it); a read that blocks (a server that hangs) blocks the step. Known-bad mode
``skip-unreadable-shard`` instead serves the next position whose row reads: the unreadable
sample is never trained on, and the sample ledger shows it.

A module of its own so that ``spawn`` workers unpickle these classes by their import path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

if TYPE_CHECKING:
    from faultdrill.workloads.lm_config import LMConfig

__all__ = [
    "ROWS_PER_SHARD",
    "ShardFiles",
    "StepBatches",
    "StreamCorpus",
    "StreamPositions",
    "dataset_of",
    "make_loader",
    "write_shards",
]

#: Training sequences per shard file.
ROWS_PER_SHARD = 64
#: Pause between two attempts to read a row that failed.
RETRY_EVERY_S = 0.25
_ROW_DTYPE = torch.int64


def shard_name(shard: int) -> str:
    return f"shard-{shard:05d}.bin"


def write_shards(samples: torch.Tensor, data_dir: str) -> int:
    """Write the rows of ``samples`` into :data:`ROWS_PER_SHARD`-row shard files of
    ``data_dir`` (each through a temporary file, fsynced, renamed), keeping a shard already
    there with the right size; returns how many were written. Raises OSError."""
    rows = samples.to(_ROW_DTYPE).contiguous()
    written = 0
    for first in range(0, rows.shape[0], ROWS_PER_SHARD):
        data = rows[first : first + ROWS_PER_SHARD].numpy().tobytes()
        path = Path(data_dir, shard_name(first // ROWS_PER_SHARD))
        if path.exists() and path.stat().st_size == len(data):
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        written += 1
    return written


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


class ShardFiles(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Item ``p``: as :class:`StreamPositions`, the row read from its shard file (see the
    module docstring for retries and ``skip``). ``on_read`` (in-process only: None in
    DataLoader workers) hears ``(what, facts)`` of a failed read and of the read that ended
    a run of failures: ``data_read_failed`` / ``data_read_recovered`` / ``data_read_skipped``.
    """

    def __init__(
        self,
        corpus: StreamCorpus,
        data_dir: str,
        seq_len: int,
        retry_s: float,
        skip: bool,
        on_read: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.corpus = corpus
        self.data_dir = data_dir
        self.row_bytes = (seq_len + 1) * _ROW_DTYPE.itemsize
        self.retry_s = retry_s
        self.skip = skip
        self.on_read = on_read

    def __len__(self) -> int:
        return 1 << 62

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "on_read": None}  # a probe does not cross into a worker

    def _row(self, position: int) -> torch.Tensor:
        index = self.corpus.indices(range(position, position + 1))[0]
        shard, row = divmod(index, ROWS_PER_SHARD)
        fd = os.open(os.path.join(self.data_dir, shard_name(shard)), os.O_RDONLY)
        try:
            data = os.pread(fd, self.row_bytes, row * self.row_bytes)
        finally:
            os.close(fd)
        if len(data) != self.row_bytes:
            raise OSError(f"{shard_name(shard)}: short read of row {row}")
        return torch.frombuffer(bytearray(data), dtype=_ROW_DTYPE)

    def _say(self, what: str, **facts: Any) -> None:
        if self.on_read is not None:
            self.on_read(what, facts)

    def __getitem__(self, position: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        started, attempts, served = time.monotonic(), 0, position
        while True:
            try:
                row = self._row(served)
                break
            except OSError as exc:
                attempts += 1
                if attempts == 1:
                    self._say("data_read_failed", position=position, error=str(exc))
                if self.skip:
                    served += 1  # known-bad: move on to the next sample of the stream
                elif time.monotonic() - started >= self.retry_s:
                    raise
                time.sleep(RETRY_EVERY_S)
        if served != position:
            self._say("data_read_skipped", position=position, served=served)
        elif attempts:
            waited = time.monotonic() - started
            self._say("data_read_recovered", position=position, attempts=attempts, waited_s=waited)
        return served, row[:-1], row[1:]


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


def dataset_of(
    cfg: LMConfig,
    corpus: StreamCorpus,
    on_read: Callable[[str, dict[str, Any]], None] | None = None,
) -> Dataset[tuple[int, torch.Tensor, torch.Tensor]]:
    """The dataset the config asks for: the shard files, or the corpus in memory."""
    if not cfg.data_files:
        return StreamPositions(corpus)
    skip = cfg.bad_mode == "skip-unreadable-shard"
    return ShardFiles(corpus, cfg.data_dir, cfg.seq_len, cfg.data_retry_s, skip, on_read)


def make_loader(
    cfg: LMConfig,
    corpus: StreamCorpus,
    batches: StepBatches,
    on_read: Callable[[str, dict[str, Any]], None] | None = None,
) -> DataLoader[tuple[int, torch.Tensor, torch.Tensor]]:
    """The DataLoader the config asks for. Its generator is private: building the loader's
    worker seeds must not draw from the global RNG (resumed runs would diverge)."""
    return DataLoader(
        dataset_of(cfg, corpus, on_read),
        batch_sampler=batches,
        num_workers=cfg.loader_workers,
        multiprocessing_context=cfg.loader_start if cfg.loader_workers else None,
        persistent_workers=cfg.loader_persistent and cfg.loader_workers > 0,
        generator=torch.Generator(),
    )
