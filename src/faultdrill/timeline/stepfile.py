"""Binary step files: the probe's step records (``probe-rank<R>.steps``, written by
:meth:`faultdrill.probe.Probe.step` with binary steps on) read into step columns.

The file is a header (:func:`faultdrill.probe.step_file_header`) and then fixed-size
records (:data:`faultdrill.probe.STEP_RECORD`), decoded a block at a time with
:func:`numpy.frombuffer`, with no Python per record. A file is untrusted input like any
events file: a header that is not a step file's makes the whole file one bad record, a
record without the probe's tag (a torn record a later process completed with zeros, an
edited one), with a count of ranges other than 0 or 1, or a time that is not finite is
counted as a bad record and skipped, and a torn last record (what a killed writer
leaves) is skipped and counted as torn, like a torn last line. The columns are those of
the JSON reader for the same steps (``loss``: NaN where none was reported, +inf for a
reported NaN).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO

import numpy as np

from faultdrill.probe import (
    _STEP_HEAD,
    MAX_STEP_TASK,
    STEP_FILE_MAGIC,
    STEP_FILE_VERSION,
    STEP_RECORD,
    STEP_TAG,
)
from faultdrill.timeline.steps import I4, I8

__all__ = [
    "GLOB",
    "RECORD",
    "StepFileHeader",
    "decode",
    "first_nonfinite",
    "header_of",
    "read_step_file",
]

#: The binary step files of an events dir.
GLOB = "probe-rank*.steps"
RECORD = np.dtype(
    [
        ("mono", "<f8"),
        ("rank", "<i4"),
        ("pid", "<i4"),
        ("step", "<i8"),
        ("loss", "<f8"),
        ("count", "<i4"),
        ("flags", "<i4"),
        ("start", "<i8"),
        ("end", "<i8"),
    ]
)
assert RECORD.itemsize == STEP_RECORD.size
_BLOCK_RECORDS = 1 << 16
_MAX_HEADER = _STEP_HEAD.size + MAX_STEP_TASK + 8


@dataclass(frozen=True)
class StepFileHeader:
    rank: int
    task: str
    size: int  # bytes: records start here


def header_of(data: bytes) -> StepFileHeader | None:
    """The header at the start of ``data``; None if ``data`` is too short to hold it (a
    file being written). ValueError if it is not a step file's header this version reads."""
    if len(data) < _STEP_HEAD.size:
        if STEP_FILE_MAGIC.startswith(data[: len(STEP_FILE_MAGIC)]):
            return None
        raise ValueError("not a faultdrill step file")
    magic, version, record, rank, task_len = _STEP_HEAD.unpack_from(data)
    if magic != STEP_FILE_MAGIC:
        raise ValueError("not a faultdrill step file")
    if version != STEP_FILE_VERSION or record != STEP_RECORD.size or task_len > MAX_STEP_TASK:
        raise ValueError(f"step file version {version}, records of {record} bytes: not read")
    size = _STEP_HEAD.size + task_len + (-task_len % 8)
    if len(data) < size:
        return None
    task = data[_STEP_HEAD.size : _STEP_HEAD.size + task_len].decode("utf-8", "replace")
    return StepFileHeader(rank, task, size)


def decode(body: bytes | memoryview) -> tuple[list[np.ndarray], int]:
    """Whole records as step columns (the store's order: mono, rank, pid, step, loss,
    count, range start, range end) and the number of records refused."""
    rec = np.frombuffer(body, dtype=RECORD)
    count = rec["count"]
    ok = ((rec["flags"] & ~1) == STEP_TAG) & ((count == 0) | (count == 1))
    ok &= np.isfinite(rec["mono"])
    bad = int(rec.shape[0] - np.count_nonzero(ok))
    if bad:
        rec = rec[ok]
    loss = rec["loss"].astype(np.float64)
    loss[np.isnan(loss)] = np.inf  # a reported NaN, as the JSON reader keeps it
    loss[(rec["flags"] & 1) == 1] = np.nan  # not reported
    counts = rec["count"].astype(I4)
    one = counts == 1
    starts, ends = rec["start"], rec["end"]
    if not bool(one.all()):
        starts, ends = starts[one], ends[one]
    cols: list[np.ndarray] = [
        rec["mono"].astype(np.float64),
        rec["rank"].astype(I4),
        rec["pid"].astype(I4),
        rec["step"].astype(I8),
        loss,
        counts,
        starts.astype(I8),
        ends.astype(I8),
    ]
    return cols, bad


def first_nonfinite(body: bytes | memoryview) -> str | None:
    """How the first record with a reported non-finite loss reads, as the stop condition
    says it (None: none has one)."""
    rec = np.frombuffer(body, dtype=RECORD)
    hit = ((rec["flags"] & ~1) == STEP_TAG) & ~np.isfinite(rec["loss"]) & (rec["flags"] & 1 == 0)
    idx = np.flatnonzero(hit)
    if not idx.shape[0]:
        return None
    r = rec[int(idx[0])]
    return f"rank {int(r['rank'])} step {int(r['step'])} loss {float(r['loss'])}"


@dataclass
class StepFileRead:
    """What :func:`read_step_file` made of a step file."""

    task: str = ""
    chunks: list[list[np.ndarray]] = field(default_factory=list)  # decoded blocks
    bad: int = 0  # complete records refused, or 1 for a header that is not a step file's
    torn: int = 0  # 1: a torn last record (or a torn header) was skipped


def read_step_file(f: IO[bytes], start: int, size: int) -> StepFileRead:
    """Read the records of the first ``size`` bytes of ``f`` from byte ``start`` (where a
    step store's coverage ends; 0 or less: after the header). Never raises on content."""
    out = StepFileRead()
    f.seek(0)
    try:
        header = header_of(f.read(min(size, _MAX_HEADER)))
    except ValueError:
        out.bad = 1
        return out
    if header is None:
        out.torn = int(size > 0)
        return out
    out.task = header.task
    begin = max(start, header.size)
    misaligned = (begin - header.size) % RECORD.itemsize
    if misaligned:  # a store that says it covers part of a record: not one we wrote
        out.bad += 1
        begin += RECORD.itemsize - misaligned
    f.seek(begin)
    left = size - begin
    while left >= RECORD.itemsize:
        want = min(left, _BLOCK_RECORDS * RECORD.itemsize)
        block = f.read(want - want % RECORD.itemsize)
        whole = len(block) - len(block) % RECORD.itemsize
        if not whole:
            break
        cols, bad = decode(memoryview(block)[:whole])
        out.bad += bad
        if cols[0].shape[0]:
            out.chunks.append(cols)
        left -= whole
        if whole < len(block):
            break
    out.torn = int(left > 0)
    return out
