"""The probe: what a training script calls to put its progress on the drill's timeline.

Standard library only, so it can be imported by any training script without torch or
faultdrill's other dependencies. A script that is not run under faultdrill (no
``FAULTDRILL_EVENTS_DIR`` in the environment) gets a probe that does nothing.

Contract
--------
* One append-only JSON-lines file per rank, ``<events dir>/probe-rank<R>.jsonl``. Every
  event is written with a single ``os.write`` on an ``O_APPEND`` descriptor, unbuffered,
  so a SIGKILL loses at most the line being written, and a process that restarts on the
  same rank appends after it. A torn last line is terminated before the first new event,
  so readers only ever lose that one line.
* Every event carries ``ts`` (wall clock), ``mono`` (``time.monotonic()``, shared by all
  processes of one host and the drill's ordering clock; on another host than the harness's,
  ``FAULTDRILL_CLOCK_OFFSET=<offset>`` (the harness's ``time.time() - time.monotonic()``,
  set by the platform) makes it ``ts - offset``, the harness's monotonic clock as far as
  the hosts' wall clocks agree: :func:`mono_clock`; ``pid`` is the process id, with the host
  name folded in where containers number their own: :func:`own_pid`), ``src`` = ``"probe"``,
  ``kind``,
  ``task``, ``rank`` and ``pid``. Kinds and their extra fields:

  ============  ===============================================================
  run_start     world_size, local_rank, node, host, restart_count, master,
                config_digest, uid, user (the identity the process runs as: the
                data access identity)  (call after the process group is initialised);
                under a scheduler that restarts whole jobs, also sched_job_id and
                sched_incarnation (from ``FAULTDRILL_SCHED_JOB_ID`` /
                ``FAULTDRILL_SCHED_INCARNATION``, which the platform exports)
  step          step, loss (``null``: not reported this step), samples:
                ``[[start, end), ...]`` global sample ids
  ckpt_save     id, step, path, sha256, bytes, data_position  (after it is durable);
                optional duration_s (seconds the save blocked training)
  ckpt_save_failed  step, error, errno, duration_s: a save that raised (nothing published)
  ckpt_load     id, step, path, verified, data_position, rejected ``[{id, reason}]``;
                optional duration_s (seconds spent finding, verifying and restoring)
  ckpt_none     rejected: nothing valid to load; training starts from scratch
  ckpt_components  id, step, phase (``saved`` or ``restored``), components ``{name:
                digest}``: this rank's digests of the parts of checkpoint ``id``
                (model, optimizer, scheduler, rng, dataloader...) as saved, or as they
                are right after the load restored them (:meth:`Probe.components`)
  evaluation    step, split, metrics ``{name: value}``: held-out metrics of the model
                after that step (at checkpoints and at the end)
  artifact      name, path, sha256, bytes, step: a file the job exported (the final
                model), once it is durable; the harness re-hashes it at the end
  run_end       status, final_step, model_digest
  ============  ===============================================================

* The cost per ``step`` call is one ``json.dumps`` and one ``write``; sample ids given as
  a list are folded into ranges first. See ``docs/probe.md`` and ``bench/``.
* Binary steps (``FAULTDRILL_STEP_FORMAT=binary``, e.g. in a plan's ``task.env`` on the
  local platforms, whose events dir is the harness's; or ``Probe(..., binary_steps=True)``):
  a step with at most one sample range is appended as one fixed-size record to
  ``<events dir>/probe-rank<R>.steps`` instead (one ``struct.pack`` and one ``write``; read
  back with numpy, no per-line parsing); any other step, and every other event, stays a
  JSON line. The file starts with :data:`STEP_FILE_MAGIC`, the format version, the record
  size, the rank and the task id (:func:`step_file_header`); then records of
  :data:`STEP_RECORD` (little-endian ``mono`` f8, ``rank`` i4, ``pid`` i4, ``step`` i8,
  ``loss`` f8, ``count`` i4 (ranges: 0 or 1), ``flags`` i4 (:data:`STEP_TAG` in the high
  16 bits; bit 0: no loss reported), ``start`` i8, ``end`` i8). A record torn by a kill is
  completed with zeros by the next process on that rank (its tag is then wrong: readers
  count it as a bad record, as they do a torn line that a later line terminated).
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "ENV_CLOCK_OFFSET",
    "ENV_EVENTS_DIR",
    "ENV_PID_PER_HOST",
    "ENV_STEP_FORMAT",
    "STEP_FILE_MAGIC",
    "STEP_FILE_VERSION",
    "STEP_RECORD",
    "STEP_TAG",
    "Probe",
    "SampleIds",
    "clock_offset",
    "fold_ranges",
    "mono_clock",
    "own_pid",
    "probe_from_env",
    "step_file_header",
]

ENV_EVENTS_DIR = "FAULTDRILL_EVENTS_DIR"
#: Set by a platform whose jobs run on other hosts than the harness (a real Slurm or
#: Kubernetes cluster): the harness's ``time.time() - time.monotonic()`` when it submitted
#: the job. Every writer there stamps ``mono = time.time() - offset`` (:func:`mono_clock`).
ENV_CLOCK_OFFSET = "FAULTDRILL_CLOCK_OFFSET"
#: Set by a platform whose replicas have pid namespaces of their own (containers: every pod
#: numbers its processes from 1): ``pid`` then also carries the host name (:func:`own_pid`).
ENV_PID_PER_HOST = "FAULTDRILL_PID_PER_HOST"
#: ``binary``: step events go to the rank's binary step file (see the module docstring).
ENV_STEP_FORMAT = "FAULTDRILL_STEP_FORMAT"
ENV_TASK_ID = "FAULTDRILL_TASK_ID"
ENV_NODE = "FAULTDRILL_NODE"
ENV_SCHED_JOB = "FAULTDRILL_SCHED_JOB_ID"
ENV_SCHED_INCARNATION = "FAULTDRILL_SCHED_INCARNATION"

SampleIds = Sequence[int] | Sequence[Sequence[int]] | range

STEP_FILE_MAGIC = b"FDSTEPS\n"
STEP_FILE_VERSION = 1
#: One step: mono, rank, pid, step, loss, count, flags, start, end (56 bytes).
STEP_RECORD = struct.Struct("<diiqdiiqq")
#: The high 16 bits of every record's flags ("FD"): a zero-filled torn record lacks them.
STEP_TAG = 0x46440000
#: The header before the task id: magic, version, record size, rank, task id's bytes.
_STEP_HEAD = struct.Struct("<8sIIiI")
#: The longest task id a step file's header holds (bytes of UTF-8).
MAX_STEP_TASK = 4096


def step_file_header(rank: int, task_id: str) -> bytes:
    """The header of a binary step file: :data:`_STEP_HEAD`, then the task id in UTF-8,
    zero-padded to a multiple of 8 bytes (records start there)."""
    task = task_id.encode()[:MAX_STEP_TASK]
    head = _STEP_HEAD.pack(STEP_FILE_MAGIC, STEP_FILE_VERSION, STEP_RECORD.size, rank, len(task))
    return head + task + b"\0" * (-len(task) % 8)


def clock_offset() -> float | None:
    """The harness's wall-minus-monotonic offset from :data:`ENV_CLOCK_OFFSET`, or None
    (unset or not a finite number: this host's ``time.monotonic()`` is the drill's clock)."""
    try:
        offset = float(os.environ.get(ENV_CLOCK_OFFSET, ""))
    except ValueError:
        return None
    return offset if math.isfinite(offset) else None


def mono_clock() -> Callable[[], float]:
    """The events' ``mono`` clock: ``time.monotonic`` on the harness's host; with
    :data:`ENV_CLOCK_OFFSET` set, the wall clock minus the harness's offset (so events of
    every host fall on the harness's clock, within the hosts' clock sync)."""
    offset = clock_offset()
    if offset is None:
        return time.monotonic
    return lambda: time.time() - offset


def own_pid() -> int:
    """This process's ``pid`` in events: ``os.getpid()``; with :data:`ENV_PID_PER_HOST`
    set, the pid in its low 22 bits (Linux's largest pid_max) and 15 bits of the host
    name's CRC-32 above, so that processes of different containers stay apart."""
    pid = os.getpid()
    if not os.environ.get(ENV_PID_PER_HOST):
        return pid
    import zlib

    return ((zlib.crc32(socket.gethostname().encode()) & 0x7FFF) << 22) | pid


def fold_ranges(ids: SampleIds) -> list[list[int]]:
    """Fold sample ids into sorted half-open ``[start, end)`` ranges.

    Accepts a ``range``, a list of ints, or a list of ``[start, end)`` pairs (kept as
    given). Duplicates inside one call are kept visible: ``[3, 3]`` gives ``[[3, 4], [3, 4]]``
    so that the sample ledger check can see them.
    """
    if isinstance(ids, range):
        if ids.step != 1:
            return [[i, i + 1] for i in ids]
        return [[ids.start, ids.stop]] if ids.stop > ids.start else []
    if not ids:
        return []
    first = ids[0]
    if not isinstance(first, int):
        return [[int(pair[0]), int(pair[1])] for pair in ids]  # type: ignore[index]
    out: list[list[int]] = []
    start = prev = int(first)
    for raw in ids[1:]:
        i = int(raw)  # type: ignore[arg-type]
        if i == prev + 1:
            prev = i
            continue
        out.append([start, prev + 1])
        start = prev = i
    out.append([start, prev + 1])
    return out


class Probe:
    """Writes one rank's events. Safe to call from the training loop on every step."""

    def __init__(
        self,
        events_dir: str | os.PathLike[str] | None,
        *,
        rank: int = 0,
        task_id: str = "",
        binary_steps: bool | None = None,
    ) -> None:
        """``binary_steps``: write steps to the binary step file (None: as
        :data:`ENV_STEP_FORMAT` says)."""
        self.rank = rank
        self.task_id = task_id
        self.pid = own_pid()
        self._fd: int | None = None
        self._steps_fd: int | None = None
        self._mono = mono_clock()
        if events_dir is None:
            return
        os.makedirs(events_dir, exist_ok=True)
        path = os.path.join(os.fspath(events_dir), f"probe-rank{rank}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._terminate_torn_line(path)
        if binary_steps is None:
            binary_steps = os.environ.get(ENV_STEP_FORMAT) == "binary"
        if binary_steps:
            self._steps_fd = _open_step_file(
                os.path.join(os.fspath(events_dir), f"probe-rank{rank}.steps"), rank, task_id
            )
        # The prefix of every line is fixed per process: build it once.
        head = json.dumps({"src": "probe", "task": task_id, "rank": rank, "pid": self.pid})
        self._head = head[:-1]

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def _terminate_torn_line(self, path: str) -> None:
        assert self._fd is not None
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                os.write(self._fd, b"\n")

    def emit(self, kind: str, **fields: Any) -> None:
        """Append one event. Fields must be JSON-serialisable and flat where possible."""
        if self._fd is None:
            return
        body = json.dumps(fields, separators=(",", ":"))
        line = (
            f'{self._head},"ts":{time.time()!r},"mono":{self._mono()!r},'
            f'"kind":"{kind}"' + ("," + body[1:] if len(body) > 2 else "}") + "\n"
        )
        os.write(self._fd, line.encode())

    # --- the calls a training script makes ------------------------------------------

    def run_start(
        self,
        *,
        world_size: int,
        local_rank: int = 0,
        restart_count: int | None = None,
        config_digest: str = "",
        **extra: Any,
    ) -> None:
        """Call once the process group is initialised (the replica is ready)."""
        env = os.environ
        if restart_count is None:
            raw = env.get("TORCHELASTIC_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT") or "0"
            restart_count = int(raw)
        master = None
        if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            master = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        # The scheduler's incarnation of the whole job (a Slurm requeue keeps the job id and
        # counts up): the timeline keys generations by it, so an old task that still runs
        # on a cut-off node is told from the requeued job's.
        sched = env.get(ENV_SCHED_INCARNATION, "")
        if env.get(ENV_SCHED_JOB):
            extra.setdefault("sched_job_id", env[ENV_SCHED_JOB])
        if sched.isdigit():
            extra.setdefault("sched_incarnation", int(sched))
        self.emit(
            "run_start",
            world_size=world_size,
            local_rank=local_rank,
            node=env.get(ENV_NODE) or socket.gethostname(),
            host=socket.gethostname(),
            restart_count=restart_count,
            master=master,
            config_digest=config_digest,
            **{**_identity(), **extra},  # a launcher may know the identity better
        )

    def step(self, step: int, loss: float | None, samples: SampleIds | Iterable[int] = ()) -> None:
        """Record one optimizer step: its number, this rank's loss, the samples it consumed.

        ``loss=None``: this step's loss was not computed or not synchronised (a job that
        logs it every N steps); the results check then compares only the steps that have one.
        """
        ids = samples if isinstance(samples, (range, list, tuple)) else list(samples)
        value = None if loss is None else float(loss)
        ranges = fold_ranges(ids)  # type: ignore[arg-type]
        if self._steps_fd is not None and len(ranges) <= 1:
            start, end = ranges[0] if ranges else (0, 0)
            flags = STEP_TAG | (value is None)
            try:
                record = STEP_RECORD.pack(
                    self._mono(),
                    self.rank,
                    self.pid,
                    step,
                    value or 0.0,
                    len(ranges),
                    flags,
                    start,
                    end,
                )
            except struct.error:  # not an int64 step or ids: as a JSON line, judged there
                pass
            else:
                os.write(self._steps_fd, record)
                return
        self.emit("step", step=step, loss=value, samples=ranges)

    def checkpoint_saved(
        self,
        *,
        ckpt_id: str,
        step: int,
        path: str,
        sha256: str,
        data_position: int,
        size_bytes: int | None = None,
        duration_s: float | None = None,
        components: Mapping[str, str] | None = None,
    ) -> None:
        """Call only after the checkpoint is durable and published (``latest`` moved).

        ``duration_s`` (optional): how long the save blocked training, for goodput.
        ``components`` (optional): digests of the parts saved (:meth:`components`)."""
        extra = {} if duration_s is None else {"duration_s": round(float(duration_s), 6)}
        self.emit(
            "ckpt_save",
            id=ckpt_id,
            step=step,
            path=path,
            sha256=sha256,
            bytes=size_bytes,
            data_position=data_position,
            **extra,
        )
        if components is not None:
            self.components(ckpt_id=ckpt_id, step=step, phase="saved", components=components)

    def checkpoint_failed(
        self,
        *,
        step: int,
        error: str,
        errno: int | None = None,
        duration_s: float | None = None,
    ) -> None:
        """Call when a save raised: nothing was published (``latest`` must not have moved)."""
        self.emit(
            "ckpt_save_failed",
            step=step,
            error=error[:500],
            errno=errno,
            duration_s=None if duration_s is None else round(float(duration_s), 6),
        )

    def checkpoint_loaded(
        self,
        *,
        ckpt_id: str,
        step: int,
        path: str,
        verified: bool,
        data_position: int,
        rejected: Sequence[dict[str, str]] = (),
        duration_s: float | None = None,
        components: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        """Call after restoring; ``verified`` says whether its digest was checked first.

        ``duration_s`` (optional): how long finding, verifying and restoring took. ``extra``:
        flat fields a platform adds (e.g. ``handed_over``: the checkpoint it handed over).
        ``components`` (optional): digests of the parts as restored (:meth:`components`)."""
        if duration_s is not None:
            extra["duration_s"] = round(float(duration_s), 6)
        self.emit(
            "ckpt_load",
            id=ckpt_id,
            step=step,
            path=path,
            verified=verified,
            data_position=data_position,
            rejected=list(rejected),
            **extra,
        )
        if components is not None:
            self.components(ckpt_id=ckpt_id, step=step, phase="restored", components=components)

    def components(
        self, *, ckpt_id: str, step: int, phase: str, components: Mapping[str, str]
    ) -> None:
        """Record this rank's digests of the parts of checkpoint ``ckpt_id``.

        ``phase``: ``"saved"`` (the state written into it, reported with the save) or
        ``"restored"`` (the live state right after the load restored it, reported after
        the load; a part restored later, such as RNG state a framework restores at the
        first step, may come in a further ``restored`` call). ``components``: name ->
        digest, e.g. from :func:`faultdrill.integrations.digest.component_digests`; report
        only what the checkpoint holds (a job that does not save its RNG state reports no
        ``rng``). The check ``progress.restored-components`` fails a part that was saved
        but is not restored to the same digest."""
        if phase not in ("saved", "restored"):
            raise ValueError(f"phase must be 'saved' or 'restored', not {phase!r}")
        digests = {str(k): str(v) for k, v in components.items()}
        self.emit("ckpt_components", id=ckpt_id, step=step, phase=phase, components=digests)

    def no_checkpoint(self, rejected: Sequence[dict[str, str]] = (), **extra: Any) -> None:
        """Call when starting from scratch, with any checkpoints found but refused."""
        self.emit("ckpt_none", rejected=list(rejected), **extra)

    def evaluation(self, step: int, metrics: dict[str, float], split: str = "heldout") -> None:
        """Record held-out metrics of the model as it is after ``step`` (e.g. at every
        checkpoint and at the end). ``metrics``: name -> number (``loss``, ``accuracy``...);
        a result check compares them with the baseline's at the same step and split."""
        values = {str(k): float(v) for k, v in metrics.items()}
        self.emit("evaluation", step=step, split=split, metrics=values)

    def artifact(
        self,
        *,
        path: str,
        sha256: str,
        size_bytes: int | None = None,
        name: str = "final-model",
        step: int | None = None,
    ) -> None:
        """Call once an exported file (the final model) is durable: its path and sha256.

        The harness hashes the file again after the job ended; a result check fails when
        it is gone or its content differs."""
        self.emit("artifact", name=name, path=path, sha256=sha256, bytes=size_bytes, step=step)

    def run_end(self, *, final_step: int, model_digest: str = "", status: str = "ok") -> None:
        self.emit("run_end", status=status, final_step=final_step, model_digest=model_digest)

    def worker_error(self, exc: BaseException) -> None:
        """What stopped training in this process (e.g. a collective that timed out), when it
        was raised: a survivor's own notice of a hung peer, before its exit (which may
        wait on that peer) tells its agent."""
        self.emit("worker_error", error=f"{type(exc).__name__}: {exc}"[:500])

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._steps_fd is not None:
            os.close(self._steps_fd)
            self._steps_fd = None


def _open_step_file(path: str, rank: int, task_id: str) -> int | None:
    """The rank's binary step file opened for appending: its header written if it is new,
    a torn last record completed with zeros; None (steps stay JSON lines) if the file
    holds something else (another rank's header, another format, a torn header)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    size = os.fstat(fd).st_size
    header = step_file_header(rank, task_id)
    if size == 0:
        os.write(fd, header)
        return fd
    head = os.pread(fd, _STEP_HEAD.size, 0)
    if len(head) < _STEP_HEAD.size:
        os.close(fd)
        return None
    magic, version, record, owner, task_len = _STEP_HEAD.unpack(head)
    start = _STEP_HEAD.size + task_len + (-task_len % 8)
    if (magic, version, record, owner) != (
        STEP_FILE_MAGIC,
        STEP_FILE_VERSION,
        STEP_RECORD.size,
        rank,
    ) or size < start:
        os.close(fd)
        return None
    torn = (size - start) % record
    if torn:
        os.write(fd, b"\0" * (record - torn))
    return fd


def _identity() -> dict[str, Any]:
    """The user this process runs as: the identity its data and checkpoints are read with."""
    uid = os.getuid()
    try:
        import pwd

        user: str | None = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):  # no passwd entry (a container's arbitrary uid)
        user = None
    return {"uid": uid, "user": user}


def probe_from_env(rank: int | None = None) -> Probe:
    """The probe for this process, configured by the launcher's environment.

    ``rank`` defaults to ``$RANK`` (set by torchrun, and by faultdrill's other platforms).
    """
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    return Probe(
        os.environ.get(ENV_EVENTS_DIR),
        rank=rank,
        task_id=os.environ.get(ENV_TASK_ID, ""),
    )
