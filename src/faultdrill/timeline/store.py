"""The columnar step store: the probe's step events as numpy columns on disk, written by
the harness while the job runs, so that a timeline of tens of millions of steps loads in
seconds instead of minutes.

The probe's JSON lines stay the evidence of record, untouched: the store is derived from
them, line for line, by the same parser as :meth:`~faultdrill.timeline.Timeline.load`
(a step line goes into columns, any other line is kept as it was), and says how many bytes
of each probe file it covers. Loading takes the covered part from the store and reads
only what follows from the JSON lines, so a store that lags (a harness that died) still
gives the whole timeline; a store that does not match the files it names (a file shorter
than it says, covered bytes whose SHA-256 is not the one it recorded) is ignored and
everything is read from the JSON lines.

What the hashes prove: the JSON lines are, byte for byte, those the store was made from
(an edited line makes the store ignored, so the edit is judged from the lines themselves),
and the store's own files (each column, each source's lines) are those its manifest names
(a damaged or naively edited store is ignored). What they cannot prove: that whoever wrote
the run directory derived the columns honestly; nothing in a run directory is signed (a
signed bundle is). The store is read as untrusted input besides: regular files only, no
link followed, its lines held to the event contract, its times finite. Hashing costs one
pass over the covered bytes and the columns, in threads (SHA-256 runs at about 1.7 GB/s a
core with SHA-NI: measured in ``bench/load_cost.py``).
``Timeline.load(..., use_store=False)`` always reads the JSON lines (to re-judge from the
evidence of record alone); deleting ``steps/`` does the same for good.

Layout, in ``<events dir>/steps/``::

    manifest.json      format, rows, ranges, task, lines skipped (torn), the SHA-256 of each
                       column's first rows (``columns``), and per covered
                       source file: bytes covered, their SHA-256 (``sha256``), the lines of
                       them skipped (``bad``), the SHA-256 of its file under lines/
                       (``lines_sha256``) and the file's source (``src``, as
                       :attr:`~faultdrill.timeline.Timeline.bad_lines` names it)
    <column>.<dtype>   raw little-endian columns: mono.f8 rank.i4 pid.i4 step.i8 loss.f8
                       count.i4 (sample ranges per row), rng_start.i8 rng_end.i8 (ranges)
    lines/<source>     the covered source's other lines (run_start, ckpt_save...), as written

A binary step file of the probe (``probe-rank<R>.steps``,
:mod:`~faultdrill.timeline.stepfile`) is a covered source like a JSON-lines file: its
whole records go into the columns (it has no other lines), its covered bytes are hashed
the same way, and a record refused is counted in its ``bad``.

The manifest is replaced atomically after the columns are written: a reader sees the
columns up to the rows it names (a column file may be longer: an append in progress).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from faultdrill.events import Event, malformed
from faultdrill.timeline.reader import (
    _parse_line,
    _Scan,
    _StepColumns,
    bounded_lines,
    open_regular,
)
from faultdrill.timeline.stepfile import RECORD, decode, header_of
from faultdrill.timeline.steps import I4, I8, StepTable, mapping_of

__all__ = [
    "FORMAT",
    "STORE_DIR",
    "Chunk",
    "StepStoreWriter",
    "parse_chunk",
    "parse_step_records",
    "read_store",
    "write_table",
    "write_tables",
]

STORE_DIR = "steps"
FORMAT = "faultdrill-steps/3"  # /2: per source bad lines and src; /3: sha256 of the covered bytes
#: (name, dtype, per range rather than per row), in :class:`_StepColumns` order.
COLUMNS: tuple[tuple[str, Any, bool], ...] = (
    ("mono", np.dtype("<f8"), False),
    ("rank", np.dtype("<i4"), False),
    ("pid", np.dtype("<i4"), False),
    ("step", np.dtype("<i8"), False),
    ("loss", np.dtype("<f8"), False),
    ("count", np.dtype("<i4"), False),
    ("rng_start", np.dtype("<i8"), True),
    ("rng_end", np.dtype("<i8"), True),
)
#: The largest manifest read (bytes): about 200 bytes per source file, 4,096 ranks and more.
MAX_MANIFEST = 64 << 20
_EMPTY_SHA256 = hashlib.sha256().hexdigest()


def _file(name: str, dtype: Any) -> str:
    return f"{name}.{dtype.kind}{dtype.itemsize}"


@dataclass
class Chunk:
    """What a run of complete lines of one probe file holds."""

    records: list[dict[str, Any]]  # the other lines, decoded
    lines: list[bytes]  # ... and as written
    steps: list[np.ndarray] | None  # step columns (COLUMNS order), None if no step
    torn: int  # lines skipped: torn, not JSON, not an object, a malformed record
    task: str = ""
    source: str = ""  # the ``src`` of its first line that decoded ("" if none did)


def parse_chunk(data: bytes) -> Chunk:
    """Parse complete lines (``data`` ends with a newline, or is empty) the way
    :meth:`Timeline.load` does (:func:`~faultdrill.timeline.reader._read_files`), about a
    MiB at a time (the fast path's decoded lines stay that small)."""
    scan = _Scan(_StepColumns(), _split_lines, records=True)
    at = 0
    while at < len(data):
        end = data.rfind(b"\n", at, at + _PIECE) + 1 or data.find(b"\n", at + _PIECE) + 1
        end = end or len(data)
        scan.block(data[at:end])
        at = end
    chunks = scan.steps.chunks()
    steps = [np.concatenate(c) if len(c) > 1 else c[0] for c in chunks] if chunks[0] else None
    assert scan.records is not None
    return Chunk(scan.records, scan.kept, steps, scan.skipped(), scan.task, scan.source)


def _split_lines(data: bytes) -> list[bytes]:
    """The store's lines: ``bytes.splitlines`` (a carriage return ends a line too)."""
    return data.splitlines(keepends=True)


#: parse_chunk reads this much (bytes, rounded to whole lines) at a time.
_PIECE = 1 << 17


def _binary_chunk(src: _Source, data: bytes) -> Chunk:
    """What whole records of a binary step file hold (the file's header first, when
    ``data`` starts the file); ValueError if ``data`` is not whole records of a step file
    (the watch hands over whole ones only)."""
    body = memoryview(data)
    if not src.covered:
        header = header_of(data)
        if header is None:
            raise ValueError("a step file's header is not complete")
        src.task, body = header.task, body[header.size :]
    return parse_step_records(body, src.task)


def parse_step_records(body: bytes | memoryview, task: str = "") -> Chunk:
    """What whole records of a binary step file hold; ValueError if ``body`` is not whole
    records."""
    if len(body) % RECORD.itemsize:
        raise ValueError("not whole step records")
    cols, bad = decode(body)
    return Chunk([], [], cols if cols[0].shape[0] else None, bad, task, "probe")


@dataclass
class _Source:
    covered: int = 0
    task: str = ""  # a binary step file's, from its header
    hash: Any = field(default_factory=hashlib.sha256)  # of the covered bytes
    lines: Any = field(default_factory=hashlib.sha256)  # of its file under lines/
    bad: int = 0  # lines skipped (all complete: a torn last line is never covered)
    src: str = ""


@dataclass
class StepStoreWriter:
    """Appends what the harness reads of the probe files to the store of one events dir.
    Not thread-safe: one tailer writes it."""

    events_dir: Path
    rows: int = 0
    ranges: int = 0
    torn: int = 0
    task: str = ""
    _sources: dict[str, _Source] = field(default_factory=dict)
    _cols: dict[str, IO[bytes]] = field(default_factory=dict)
    _col_hashes: dict[str, Any] = field(default_factory=dict)  # column -> sha256 of it

    def __post_init__(self) -> None:
        self.dir = self.events_dir / STORE_DIR
        (self.dir / "lines").mkdir(parents=True, exist_ok=True)
        for name, dtype, _per_range in COLUMNS:
            self._cols[name] = open(self.dir / _file(name, dtype), "wb")  # noqa: SIM115
            self._col_hashes[name] = hashlib.sha256()

    def _write(self, column: str, data: bytes | memoryview) -> None:
        self._cols[column].write(data)
        self._col_hashes[column].update(data)

    def add(self, source: str, data: bytes, offset: int) -> Chunk:
        """Take the complete lines ``data`` of probe file ``source``, which start at byte
        ``offset`` of it (where the store's coverage of it ends); returns what they hold."""
        src = self._sources.setdefault(source, _Source())
        if offset != src.covered:
            raise ValueError(f"{source}: store covers {src.covered} bytes, not {offset}")
        chunk = _binary_chunk(src, data) if source.endswith(".steps") else parse_chunk(data)
        if chunk.steps is not None:
            for (name, dtype, _r), col in zip(COLUMNS, chunk.steps, strict=True):
                # its buffer, not a copy: written and hashed as it is
                self._write(name, np.ascontiguousarray(col, dtype=dtype).data)
            self.rows += int(chunk.steps[0].shape[0])
            self.ranges += int(chunk.steps[6].shape[0])
        if chunk.lines:  # few (run_start, saves...): opened per write, not held (4,096 ranks)
            lines = b"".join(chunk.lines)
            with open(self.dir / "lines" / source, "ab") as f:
                f.write(lines)
            src.lines.update(lines)
        self.torn += chunk.torn
        src.bad += chunk.torn
        src.src = src.src or chunk.source
        self.task = self.task or chunk.task
        src.covered += len(data)
        src.hash.update(data)
        return chunk

    def sync(self) -> None:
        """Make what was added so far visible to readers (columns first, then the
        manifest, replaced atomically)."""
        for f in self._cols.values():
            f.flush()
        manifest = {
            "format": FORMAT,
            "rows": self.rows,
            "ranges": self.ranges,
            "torn": self.torn,
            "task": self.task,
            "columns": {name: h.hexdigest() for name, h in sorted(self._col_hashes.items())},
            "sources": {
                name: {
                    "bytes": s.covered,
                    "sha256": s.hash.hexdigest(),
                    "lines_sha256": s.lines.hexdigest(),
                    "bad": s.bad,
                    "src": s.src,
                }
                for name, s in sorted(self._sources.items())
            },
        }
        tmp = self.dir / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, self.dir / "manifest.json")

    def close(self) -> None:
        self.sync()
        for f in self._cols.values():
            f.close()


def write_table(events_dir: Path, st: StepTable, task: str) -> None:
    """Write a whole step table as the store of ``events_dir``, covering no source file:
    for step events that never were JSON lines (the benchmark's synthetic drills)."""
    write_tables(events_dir, [st], task)


def write_tables(events_dir: Path, tables: Iterable[StepTable], task: str) -> None:
    """:func:`write_table` of the tables one after the other, as one store: a table too
    large to hold in memory is written a part at a time."""
    writer = StepStoreWriter(events_dir)
    for st in tables:
        counts = np.ones(len(st), dtype=I4) if st.one_range_each else np.diff(st.rng_off)
        cols = (st.mono, st.rank, st.pid, st.step, st.loss, counts, st.rng_start, st.rng_end)
        for (name, dtype, _r), col in zip(COLUMNS, cols, strict=True):
            for a in range(0, col.shape[0], 1 << 22):
                block = np.ascontiguousarray(col[a : a + (1 << 22)], dtype)
                writer._write(name, block.tobytes())
        writer.rows += len(st)
        writer.ranges += int(st.rng_start.shape[0])
    writer.task = task
    writer.close()


@dataclass
class Stored:
    """What the store of an events dir holds, checked against the files it covers."""

    task: str
    events: dict[str, list[Event]]  # per covered source: its other lines, in file order
    columns: list[np.ndarray]  # COLUMNS order
    torn: int
    covered: dict[str, int]  # source file name -> bytes covered
    #: Source file name -> (lines of its covered part skipped, its source), every one.
    bad: dict[str, tuple[int, str]] = field(default_factory=dict)

    def bad_lines(self, rest: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
        """``Timeline.bad_lines`` of the store's part and ``rest``'s (what the JSON lines
        after the covered bytes gave): the counts added, the source of the first line."""
        out = {name: n for name, n in self.bad.items() if n[0]}
        for name, (n, src) in rest.items():
            m, first = self.bad.get(name, (0, ""))
            out[name] = (m + n, first or src)
        return out


def read_store(events_dir: Path) -> Stored | None:
    """The store of ``events_dir``, or None if there is none or it does not match the
    files it covers (then everything is read from the JSON lines)."""
    root = events_dir / STORE_DIR
    try:
        manifest = json.loads(_read_small(root / "manifest.json", MAX_MANIFEST))
        if manifest.get("format") != FORMAT:
            return None
        rows, ranges = int(manifest["rows"]), int(manifest["ranges"])
        sources = {str(k): v for k, v in manifest["sources"].items()}
        covered = {name: int(info["bytes"]) for name, info in sources.items()}
        hashes = {name: str(info["sha256"]) for name, info in sources.items()}
        if not _all_cover(events_dir, covered, hashes):
            return None
        columns = _columns(
            root, rows, ranges, {str(k): str(v) for k, v in manifest["columns"].items()}
        )
        events = _lines(root / "lines", sources) if columns is not None else None
        bad = {name: (int(info["bad"]), str(info["src"])) for name, info in sources.items()}
        torn = int(manifest["torn"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # unreadable or not ours: read the JSON lines instead
    if events is None or columns is None:
        return None
    return Stored(str(manifest.get("task", "")), events, columns, torn, covered, bad)


def _read_small(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ValueError otherwise."""
    f = open_regular(path)
    if f is None:
        raise ValueError(f"{path} is not a regular file")
    with f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


def _columns(root: Path, rows: int, ranges: int, hashes: dict[str, str]) -> list[np.ndarray] | None:
    """The step columns, each as long as the manifest says (a column file may be longer: an
    append in progress), or None when one is short, not a regular file, not of the SHA-256
    the manifest gives, or holds what the JSON reader never gives (a time that is not
    finite, a negative count of ranges).

    Each column is the file itself, memory-mapped read-only (:func:`_mapped`), not a copy
    in this process's memory: pages are read as the judge touches them, they are shared
    with the page cache, and the kernel may drop them again under memory pressure. The
    columns are hashed in threads (:mod:`hashlib` releases the GIL on large buffers)."""
    if rows < 0 or ranges < 0:
        return None
    columns = []
    for name, dtype, per_range in COLUMNS:
        col = _mapped(root / _file(name, dtype), dtype, ranges if per_range else rows)
        if col is None:
            return None
        columns.append(col)
    workers = max(1, min(4, len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(workers) as pool:
        digests = list(pool.map(_sha256, columns))
    if any(d != hashes.get(name) for d, (name, _t, _r) in zip(digests, COLUMNS, strict=True)):
        return None
    columns = [
        c.astype(_native(dt), copy=False) for c, (_n, dt, _r) in zip(columns, COLUMNS, strict=True)
    ]
    if not _valid(columns[0], columns[5], ranges):
        return None
    return columns


def _mapped(path: Path, dtype: Any, n: int) -> np.ndarray | None:
    """The first ``n`` values of the regular file ``path`` as a read-only array mapped from
    it; None if it is not a regular file or is shorter. The file is not read here."""
    f = open_regular(path)
    if f is None:
        return None
    with f:
        size = n * dtype.itemsize
        if os.fstat(f.fileno()).st_size < size:
            return None
        if size == 0:
            return np.zeros(0, dtype=dtype)
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=dtype, count=n)


def _valid(mono: np.ndarray, counts: np.ndarray, ranges: int) -> bool:
    """Whether every time is finite and the counts of ranges are not negative and add up
    to ``ranges``: checked a block at a time, so no temporary as long as a column."""
    total = 0
    for a in range(0, max(mono.shape[0], counts.shape[0]), _CHECK_BLOCK):
        if not bool(np.isfinite(mono[a : a + _CHECK_BLOCK]).all()):
            return False
        block = counts[a : a + _CHECK_BLOCK]
        if block.size and int(block.min()) < 0:
            return False
        total += int(block.sum(dtype=np.int64))
    return total == ranges


#: Rows checked at a time by :func:`_valid`.
_CHECK_BLOCK = 1 << 22


def _sha256(col: np.ndarray) -> str:
    """The SHA-256 of a column's bytes. A column mapped from its file is hashed a block at
    a time, each block's pages dropped from resident memory once hashed (they stay in the
    page cache): hashing every column must not make them all resident at once."""
    data = np.ascontiguousarray(col).data.cast("B")
    mapped = mapping_of(col)
    if mapped is not None and np.frombuffer(mapped, np.uint8).ctypes.data != col.ctypes.data:
        mapped = None  # not at the mapping's (page-aligned) start: offsets would differ
    h = hashlib.sha256()
    for a in range(0, len(data), _HASH_BLOCK):
        block = data[a : a + _HASH_BLOCK]
        h.update(block)
        if mapped is not None:
            mapped.madvise(mmap.MADV_DONTNEED, a, len(block))
    return h.hexdigest()


#: Bytes of a column hashed at a time (a multiple of the page size).
_HASH_BLOCK = 64 << 20


def _native(dtype: Any) -> Any:
    return {"f": np.float64, "i": I4 if dtype.itemsize == 4 else I8}[dtype.kind]


def _all_cover(events_dir: Path, covered: dict[str, int], hashes: dict[str, str]) -> bool:
    """Whether every covered file still starts with the bytes the store was made from
    (hashed in threads: :mod:`hashlib` releases the GIL on large buffers)."""
    if any("/" in name or name in ("", ".", "..") for name in covered):
        return False  # a source is a file of this directory, never a path
    names = sorted(covered)
    workers = max(1, min(4, len(names), len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(workers) as pool:
        done = pool.map(lambda n: _covers(events_dir / n, covered[n], hashes[n]), names)
        return all(list(done))


def _covers(path: Path, covered: int, digest: str) -> bool:
    """Whether ``path`` (a regular file, not a link) still starts with what the store
    covered: at least as long, and its first ``covered`` bytes of that SHA-256."""
    f = open_regular(path)
    if f is None or covered < 0:
        return False
    with f:
        if os.fstat(f.fileno()).st_size < covered:
            return False
        h = hashlib.sha256()
        left = covered
        while left > 0:
            block = f.read(min(left, 8 << 20))
            if not block:
                return False
            h.update(block)
            left -= len(block)
    return h.hexdigest() == digest


def _lines(folder: Path, sources: dict[str, Any]) -> dict[str, list[Event]] | None:
    """The other lines of every covered source, as events, per source; None if one is not
    what the store writes (a line that is not a valid event, a probe step, a link)."""
    out: dict[str, list[Event]] = {}
    for name in sorted(sources):
        path = folder / name
        if not os.path.lexists(path):
            if sources[name].get("lines_sha256") != _EMPTY_SHA256:
                return None  # it wrote lines of this source: they are gone
            continue
        f = open_regular(path)
        if f is None:
            return None
        events = out.setdefault(name, [])
        h = hashlib.sha256()
        with f:
            for line in bounded_lines(f, os.fstat(f.fileno()).st_size):
                raw = None if line is None else _parse_line(line)
                h.update(line or b"")
                if raw is None or malformed(raw) is not None:
                    return None  # the store wrote only valid events: not ours
                if raw.get("src") == "probe" and raw.get("kind") == "step":
                    return None  # steps are in the columns
                events.append(Event.from_json(raw))
        if h.hexdigest() != sources[name].get("lines_sha256"):
            return None
    return out
