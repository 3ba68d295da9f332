"""The fast reader of event files: JSON lines into events and step columns.

Runs of the probe's step lines are decoded in one call each, straight into columns
(:mod:`~faultdrill.timeline.steplines`, :class:`_StepColumns`); a run it cannot vouch for
is read line by line (:class:`_Scan`), with the same result: a probe's own step line is
matched by a regular expression, any other line is decoded, and a line that is torn, not
JSON or not an object is counted, never raised on. Runs of
:data:`PARALLEL_BYTES` or more are read by child processes
(``python -m faultdrill.timeline._child``), their parts joined in file order.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from subprocess import PIPE
from typing import IO, Any

import numpy as np

from faultdrill.events import Event, malformed
from faultdrill.timeline.stepfile import StepFileRead, read_step_file
from faultdrill.timeline.steplines import FastRun, decode_run
from faultdrill.timeline.steps import I4, I8, StepTable

__all__ = ["MAX_LINE", "PARALLEL_BYTES", "bounded_blocks", "bounded_lines", "open_regular"]


#: Event files this large in all (bytes) are read by several processes.
PARALLEL_BYTES = 128 << 20
#: A line longer than this (bytes) is not an event: a probe line is a few hundred bytes, a
#: sampler's port list a few KiB. It is counted as a bad line and skipped without ever being
#: held whole, so a file of one endless line cannot exhaust memory.
MAX_LINE = 1 << 20
_BLOCK = 1 << 17


def open_regular(path: Path) -> IO[bytes] | None:
    """``path`` opened for reading if it is a regular file and its final name is not a
    symbolic link; None otherwise (a link, a FIFO, a device, a directory, a file gone).
    Opened non-blocking, so a FIFO put in a file's place never waits for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def bounded_lines(f: IO[bytes], size: int) -> Iterator[bytes | None]:
    """The lines of the next ``size`` bytes of ``f`` (what the file held when it was
    opened: a file that keeps growing is not followed), each with its newline but maybe
    the last; None in place of a line longer than :data:`MAX_LINE`, which is skipped
    without being held (memory stays under ``MAX_LINE + _BLOCK`` whatever the file)."""
    for block in bounded_blocks(f, size):
        if block is None:
            yield None
        else:
            yield from io.BytesIO(block)


def bounded_blocks(f: IO[bytes], size: int) -> Iterator[bytes | None]:
    """:func:`bounded_lines` a block at a time: each item is one or more whole lines (each
    ending with its newline), or a last line without one, or None in place of a line longer
    than :data:`MAX_LINE`; a block is at most about ``MAX_LINE + _BLOCK`` bytes."""
    rest = b""
    skipping = False  # inside an overlong line: drop bytes up to its newline
    while size > 0:
        block = f.read(min(_BLOCK, size))
        if not block:
            break
        size -= len(block)
        end = block.rfind(b"\n")
        if end < 0:
            if not skipping:
                rest += block
                if len(rest) > MAX_LINE:
                    rest, skipping = b"", True
                    yield None
            continue
        if skipping:
            head, skipping = block[block.find(b"\n") + 1 : end + 1], False
        elif rest:
            head = b"".join((rest, memoryview(block)[: end + 1]))  # one copy, not two
        else:
            head = block[: end + 1]
        rest = block[end + 1 :]
        if head:
            yield head
        if len(rest) > MAX_LINE:
            rest, skipping = b"", True
            yield None
    if rest and not skipping:
        yield rest


@dataclass
class _Part:
    """What one reader made of a run of consecutive event files."""

    task: str
    events: list[Event]
    chunks: list[list[np.ndarray]]  # per step column, its converted chunks in file order
    torn: int  # lines skipped, rows dropped included
    #: Per file name: (lines skipped that are not a torn last line, the file's source).
    bad: dict[str, tuple[int, str]] = field(default_factory=dict)


def _read_files(
    paths: list[Path],
    offsets: dict[str, int] | None = None,
    before: dict[str, list[Event]] | None = None,
) -> _Part:
    """Read ``paths`` (each from the byte ``offsets`` gives for its name, else from its
    start) into one part; ``before``: per file name, the events of the bytes skipped (the
    step store's), put where they were in the file, so that ties in time keep file order."""
    scan = _Scan(_StepColumns(), io.BytesIO)
    bad: dict[str, tuple[int, str]] = {}
    for path in paths:
        if before:
            scan.events.extend(before.get(path.name, ()))
        if path.name.endswith(".steps"):  # a binary step file (faultdrill.timeline.stepfile)
            read = _read_step_path(path, offsets.get(path.name, 0) if offsets else 0, scan.steps)
            scan.task = scan.task or read.task
            scan.torn += read.bad + read.torn
            if read.bad:
                bad[path.name] = (read.bad, "probe" if read.task or read.chunks else "")
            continue
        skipped_before = scan.skipped()
        scan.source, scan.last_torn = "", 0
        f = open_regular(path)
        if f is None:  # a directory, a link, a FIFO, a file gone: nothing of it is read
            scan.torn += 1
            bad[path.name] = (1, "")
            continue
        with f:
            start = offsets.get(path.name, 0) if offsets else 0
            f.seek(start)
            for block in bounded_blocks(f, os.fstat(f.fileno()).st_size - start):
                if block is None:
                    scan.torn += 1
                else:
                    scan.block(block)
        scan.steps.close_chunk()  # rows it drops are counted against this file
        skipped = scan.skipped() - skipped_before - scan.last_torn
        if skipped:
            bad[path.name] = (skipped, scan.source)
    chunks = scan.steps.chunks()
    return _Part(scan.task, scan.events, chunks, scan.skipped(), bad)


class _Scan:
    """What the lines of event files hold, read in file order: step rows go into
    :attr:`steps`, other valid events are kept, and every other line is counted in
    :attr:`torn` (and :attr:`last_torn`, if it is a last line without its newline).

    :meth:`block` reads runs of step lines in one call where
    :func:`~faultdrill.timeline.steplines.decode_run` vouches for them, and every other
    line one at a time (:meth:`lines`): the rows, counts, task and source are the same as
    if every line were read alone. ``split``: how a block is cut into lines when read line
    by line (the reader cuts at newlines only, the step store also at carriage returns).
    ``records``: keep other lines as decoded dicts with their bytes (:attr:`records`,
    :attr:`kept`: the step store), not as :attr:`events`."""

    #: A block this short (bytes) is read line by line: the fast path's fixed cost.
    MIN_BLOCK = 4096
    #: A run of fewer step lines than this is read line by line.
    MIN_RUN = 32

    def __init__(
        self, steps: _StepColumns, split: Callable[[bytes], Iterable[bytes]], records: bool = False
    ) -> None:
        self.steps = steps
        self.split = split
        self.events: list[Event] = []
        self.records: list[dict[str, Any]] | None = [] if records else None
        self.kept: list[bytes] = []
        self.torn = 0
        self.task = ""  # the first non-empty task of a line that decoded
        self.source = ""  # the src of the first line that decoded
        self.last_torn = 0

    def skipped(self) -> int:
        """Lines skipped so far, rows dropped when converted included."""
        return self.torn + self.steps.bad

    def block(self, data: bytes) -> None:
        """Read ``data``: whole lines, or a last line without its newline."""
        if len(data) < self.MIN_BLOCK or not data.endswith(b"\n"):
            self.lines(self.split(data))
            return
        first = data.find(b"\n") + 1
        if not _looks_like_step(data[:first]):  # a file's first line: its run_start
            self.lines(self.split(data[:first]))
            data = data[first:]
        run = decode_run(data)
        if run is not None:
            self._add(run)
            return
        for is_step, group in groupby(self.split(data), _looks_like_step):
            if is_step:
                self._take(list(group))
            else:
                self.lines(group)

    def _take(self, lines: list[bytes]) -> None:
        """Read lines that look like step lines: in one call if they are what
        :func:`decode_run` vouches for, else in halves, down to :attr:`MIN_RUN` lines read
        one at a time (so one odd line costs little more than itself)."""
        if len(lines) < self.MIN_RUN:
            self.lines(lines)
            return
        run = decode_run(b"".join(lines))
        if run is not None:
            self._add(run)
            return
        half = len(lines) // 2
        self._take(lines[:half])
        self._take(lines[half:])

    def _add(self, run: FastRun) -> None:
        self.steps.add_columns(run.columns)
        self.source = self.source or "probe"
        self.task = self.task or run.task

    def lines(self, lines: Iterable[bytes]) -> None:
        """Read ``lines`` one at a time: a probe step line in the probe's own layout by
        :data:`_probe_step_line`, any other with the JSON decoder."""
        steps = self.steps
        for line in lines:
            m = _probe_step_line(line)
            if m is not None:  # the probe's own step line: no JSON decoding needed
                fields = m.groups()
                steps.add_matched(fields)
                self.task = self.task or json.loads(b'"' + fields[0] + b'"')
                self.source = self.source or "probe"
                continue
            raw = _parse_line(line)
            if raw is None:
                self.torn += 1
                self.last_torn = int(not line.endswith(b"\n"))
                continue
            self.source = self.source or str(raw.get("src", ""))
            if raw.get("src") == "probe" and raw.get("kind") == "step":
                if not steps.add(raw):
                    self.torn += 1
                    continue
            elif malformed(raw) is None:
                if self.records is None:
                    self.events.append(Event.from_json(raw))
                else:
                    self.records.append(raw)
                    self.kept.append(line)
            else:
                self.torn += 1
                continue
            self.task = self.task or str(raw.get("task", ""))


def _looks_like_step(line: bytes) -> bool:
    """Whether ``line`` may be one that :func:`decode_run` takes (a carriage return: never)."""
    return b'"kind":"step"' in line and b"\r" not in line


def _read_step_path(path: Path, start: int, steps: _StepColumns) -> StepFileRead:
    """Read a binary step file from byte ``start`` into ``steps``; a file that is not a
    regular file is one bad record."""
    f = open_regular(path)
    if f is None:
        return StepFileRead(bad=1)
    with f:
        read = read_step_file(f, start, os.fstat(f.fileno()).st_size)
    for cols in read.chunks:
        steps.add_columns(cols)
    return read


def _read_in_parallel(paths: list[Path], readers: int | None) -> list[_Part] | None:
    """The parts read by ``readers`` child processes
    (``python -m faultdrill.timeline._child``), or None where one reader will do: few
    bytes, one file, one CPU, or a reader that could not start or failed (then the caller
    reads everything itself; nothing is lost).

    Plain subprocesses, not :mod:`multiprocessing`: its spawn re-runs the caller's main
    module in each child, and fork is unsafe beside the engine's sampler threads."""
    sizes = []
    for path in paths:
        try:
            sizes.append(path.stat().st_size)
        except OSError:
            sizes.append(0)
    if readers is None:
        if sum(sizes) < PARALLEL_BYTES:
            return None
        readers = min(4, len(os.sched_getaffinity(0)))
    groups = _split_by_size(paths, sizes, readers)
    if len(groups) < 2:
        return None
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(x for x in (package_root, env.get("PYTHONPATH")) if x)
    argv = [sys.executable, "-m", "faultdrill.timeline._child"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in groups:
            procs.append(subprocess.Popen(argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, env=env))

        def run(proc: subprocess.Popen[bytes], group: list[Path]) -> bytes | None:
            out, _err = proc.communicate(json.dumps([str(p) for p in group]).encode())
            return out if proc.returncode == 0 else None

        with ThreadPoolExecutor(len(procs)) as pool:
            outs = list(pool.map(run, procs, groups))
        parts: list[_Part] = []
        for i, out in enumerate(outs):
            if out is None:
                return None
            outs[i] = None  # one pickled part in memory at a time, besides the parts
            part = pickle.loads(out)
            if not isinstance(part, _Part):
                return None
            parts.append(part)
        return parts
    except (OSError, ValueError, pickle.UnpicklingError, EOFError):
        return None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _split_by_size(paths: list[Path], sizes: list[int], n: int) -> list[list[Path]]:
    """``paths`` cut into at most ``n`` runs of consecutive files of about equal size."""
    total = sum(sizes)
    groups: list[list[Path]] = []
    current: list[Path] = []
    done = 0
    for path, size in zip(paths, sizes, strict=True):
        current.append(path)
        done += size
        if len(groups) < n - 1 and done >= total * (len(groups) + 1) / n:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


_raw_decode = json.JSONDecoder().raw_decode

# Possessive quantifiers: these patterns never need to backtrack, and matching is most of
# the cost of loading (about 1.5 us a line against 4-8 us for the JSON decoder).
_INT = rb"-?(?:0|[1-9][0-9]*+)"
_NUM = rb"(?:-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?[0-9]++)?+|NaN|-?Infinity)"
_CHARS = rb"[\x20\x21\x23-\x5b\x5d-\x7e]*+"  # printable ASCII but the quote and backslash
_STR = _CHARS + rb'(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})' + _CHARS + rb")*+"
#: A step line exactly as :meth:`faultdrill.probe.Probe.step` writes it, with no sample
#: range or one (a null loss too). Only strict JSON (numbers, an ASCII task) matches, so every line it takes
#: is one :func:`_parse_line` would decode to the same values; any other line goes that way.
#: Groups: task, rank, pid, mono, step, loss, range start, range end.
_probe_step_line = re.compile(
    (
        rb'\{"src": "probe", "task": "(STR)", "rank": (INT), "pid": (INT),'
        rb'"ts":NUM,"mono":(NUM),"kind":"step","step":(INT),"loss":(NUM|null),'
        rb'"samples":\[(?:\[(INT),(INT)\])?\]\}\n'
    )
    .replace(b"STR", _STR)
    .replace(b"INT", _INT)
    .replace(b"NUM", _NUM)
).fullmatch


def _parse_line(line: bytes) -> dict[str, Any] | None:
    """One events line as an object, or None if it is torn (no newline: the writer died
    mid-write), not JSON, or not an object: what :func:`~faultdrill.events.read_jsonl`
    accepts, decoded faster for the usual line (one object, then the newline)."""
    if not line.endswith(b"\n"):
        return None
    try:
        text = line.decode()
        obj, end = _raw_decode(text)
        if end != len(text) - 1:  # more than the newline follows: let json.loads judge
            obj = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return None
    return obj if isinstance(obj, dict) else None


def _loss_value(raw: Any) -> Any:
    """A step's loss for the table: NaN when the step reported none (``null`` or absent: a
    job that logs its loss every N steps), +inf for a reported NaN, so that "not reported"
    and "diverged" stay apart (:attr:`StepTable.loss`). Anything else is converted (and
    checked) with the chunk."""
    if raw is None:
        return _NAN
    if isinstance(raw, float) and raw != raw:
        return _INF
    return raw


def _step_types_ok(raw: dict[str, Any], samples: Any) -> bool:
    """A decoded step's values have the probe's types (the slow path only: a line the
    probe wrote itself is matched by :data:`_probe_step_line`)."""
    mono = raw["mono"]
    if type(raw["step"]) is not int or type(mono) not in (int, float) or mono - mono != 0:
        return False
    if type(raw.get("rank", 0)) is not int or type(raw.get("pid", 0)) is not int:
        return False
    if type(raw.get("loss")) not in (int, float, type(None)):
        return False
    if type(samples) not in (list, tuple):
        return False
    return all(
        type(p) in (list, tuple) and len(p) == 2 and type(p[0]) is int and type(p[1]) is int
        for p in samples
    )


_NAN, _INF = float("nan"), float("inf")
#: The same for a loss matched as text by :data:`_probe_step_line`.
_MATCHED_LOSS = {b"null": b"nan", b"NaN": b"inf"}


class _StepColumns:
    """Step events gathered as columns, converted to numpy every :attr:`CHUNK` rows, so
    the event dicts never pile up (at 10 M steps they would take several GiB)."""

    CHUNK = 1 << 16

    def __init__(self) -> None:
        self._done: list[list[np.ndarray]] = [[] for _ in range(8)]  # chunks, per column
        self.bad = 0  # rows dropped because a value was not a number (see _close)
        self._open()

    def _open(self) -> None:
        self.mono: list[Any] = []
        self.rank: list[Any] = []
        self.pid: list[Any] = []
        self.step: list[Any] = []
        self.loss: list[Any] = []
        self.counts: list[int] = []
        self.pairs: list[Any] = []

    def add(self, raw: dict[str, Any]) -> bool:
        """Queue one step event; False (nothing queued) if it lacks ``mono`` or ``step``,
        or a value has the wrong type (numpy would read ``"15"``, ``15.5`` or ``true`` as a
        step). Ranges are checked when the chunk is converted."""
        samples = raw.get("samples") or []
        if "mono" not in raw or "step" not in raw or not _step_types_ok(raw, samples):
            return False
        self.mono.append(raw["mono"])
        self.rank.append(raw.get("rank", 0))
        self.pid.append(raw.get("pid", 0))
        self.step.append(raw["step"])
        self.loss.append(_loss_value(raw.get("loss")))
        self.counts.append(len(samples))
        self.pairs.extend(samples)
        if len(self.step) >= self.CHUNK:
            self._close()
        return True

    def add_matched(self, fields: tuple[Any, ...]) -> None:
        """Queue one step line matched by :data:`_probe_step_line` (its groups). The values
        stay bytes: numpy converts them with the chunk, as it does the numbers of :meth:`add`."""
        _task, rank, pid, mono, step, loss, lo, hi = fields
        self.mono.append(mono)
        self.rank.append(rank)
        self.pid.append(pid)
        self.step.append(step)
        self.loss.append(_MATCHED_LOSS.get(loss, loss))
        if lo is None:
            self.counts.append(0)
        else:
            self.counts.append(1)
            self.pairs.append((lo, hi))
        if len(self.step) >= self.CHUNK:
            self._close()

    def _convert(self) -> tuple[np.ndarray, ...]:
        """The open chunk as columns; ValueError/TypeError/OverflowError if a value is not
        a number or a sample is not a [start, end) pair."""
        pairs = np.asarray(self.pairs, dtype=I8)
        if pairs.size == 0:
            pairs = pairs.reshape(0, 2)
        elif pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError("a sample range is not a [start, end) pair")
        mono = np.asarray(self.mono, dtype=np.float64)
        if not np.isfinite(mono).all():  # the regex admits NaN and Infinity as numbers
            raise ValueError("a step's time is not a finite number")
        return (
            mono,
            np.asarray(self.rank, dtype=I4),
            np.asarray(self.pid, dtype=I4),
            np.asarray(self.step, dtype=I8),
            np.asarray(self.loss, dtype=np.float64),
            np.asarray(self.counts, dtype=I4),
            pairs[:, 0].copy(),
            pairs[:, 1].copy(),
        )

    def _drop_bad_rows(self) -> None:
        """Slow path, only for a chunk that failed to convert: keep the rows whose every
        value converts on its own, count the others in :attr:`bad`."""
        cols = (self.mono, self.rank, self.pid, self.step, self.loss)
        types = (np.float64, I4, I4, I8, np.float64)
        keep: list[int] = []
        starts: list[int] = []
        at = 0
        for i, n in enumerate(self.counts):
            starts.append(at)
            at += n
            try:
                for col, dt in zip(cols, types, strict=True):
                    if np.asarray(col[i], dtype=dt).ndim:
                        raise ValueError("not a single number")
                if not np.isfinite(np.asarray(self.mono[i], dtype=np.float64)):
                    raise ValueError("a time that is not finite")
                pairs = np.asarray(self.pairs[starts[i] : at], dtype=I8)
                if pairs.size and (pairs.ndim != 2 or pairs.shape[1] != 2):
                    raise ValueError("not a pair")
            except (ValueError, TypeError, OverflowError):
                continue
            keep.append(i)
        self.bad += len(self.counts) - len(keep)
        pairs_kept = [p for i in keep for p in self.pairs[starts[i] : starts[i] + self.counts[i]]]
        self.mono, self.rank, self.pid, self.step, self.loss = ([c[i] for i in keep] for c in cols)
        self.counts = [self.counts[i] for i in keep]
        self.pairs = pairs_kept

    def add_columns(self, cols: list[np.ndarray]) -> None:
        """Append already converted, checked columns (a binary step file's block), after
        what is queued."""
        self._close()
        for done, col in zip(self._done, cols, strict=True):
            done.append(col)

    def close_chunk(self) -> None:
        """Convert the rows queued so far now (a reader does it at the end of each file,
        so that :attr:`bad` counts a file's own rows)."""
        self._close()

    def _close(self) -> None:
        if not self.step:
            return
        try:
            chunk = self._convert()
        except (ValueError, TypeError, OverflowError):
            self._drop_bad_rows()
            try:
                chunk = self._convert()
            except (ValueError, TypeError, OverflowError):  # mixed rows numpy still refuses
                self.bad += len(self.step)
                self.step = []
            if not self.step:
                self._open()
                return
        for done, col in zip(self._done, chunk, strict=True):
            done.append(col)
        self._open()

    def chunks(self) -> list[list[np.ndarray]]:
        """Everything added so far, converted: per column, its chunks in order."""
        self._close()
        return self._done

    def absorb(self, chunks: list[list[np.ndarray]]) -> None:
        """Append what another reader's :meth:`chunks` returned, after what is here."""
        self._close()
        for done, more in zip(self._done, chunks, strict=True):
            done.extend(more)

    def table(self) -> StepTable:
        """Everything added so far, in the order added."""
        self._close()
        if not self._done[0]:
            return StepTable.empty()
        cols = []
        for done in self._done:  # one column at a time: its chunks are freed as it is joined
            cols.append(np.concatenate(done) if len(done) > 1 else done[0])
            done.clear()
        mono, rank, pid, step, loss, counts, starts, ends = cols
        return table_of(mono, rank, pid, step, loss, counts, starts, ends)


def table_of(
    mono: np.ndarray,
    rank: np.ndarray,
    pid: np.ndarray,
    step: np.ndarray,
    loss: np.ndarray,
    counts: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
) -> StepTable:
    """A step table from columns and the number of sample ranges of each row."""
    off: np.ndarray | None = None
    if not (starts.shape[0] == counts.shape[0] and bool((counts == 1).all())):
        off = np.zeros(counts.shape[0] + 1, dtype=I8)
        np.cumsum(counts, out=off[1:])
    return StepTable.from_columns(
        mono, rank, pid, step, loss, rng_off=off, rng_start=starts, rng_end=ends
    )
