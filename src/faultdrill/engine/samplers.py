"""The process sampler: which pids hold which rank and incarnation, alive or not.

A background thread reads the platform's replicas at a fixed rate and emits a ``proc_seen``
event (with the process's parent, session and, for a child of a replica, its ``owner``:
see :mod:`faultdrill.lineage`) the first time a (pid, start time) appears and a
``proc_gone`` event (with the last time it was seen) the first time it is missing.

Where the platform's processes are this host's (``Platform.host_processes``), every process
seen is also followed to its end by event (:mod:`faultdrill.engine.exits`): a ``proc_exit``
event stamped with the real exit time (``clock``: ``kernel`` or ``pidfd``) and, where the
kernel said, the exit code or signal. Sampling stays for what has no event (a process gone
before it was followed, a host without pidfds); the timeline prefers the exit event.

Listening ports of the job's processes are recorded once a second, so that the end-of-job
snapshot can say whether they were released. Extra samplers (e.g. the network track) plug
in as ``tick`` callables.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from faultdrill.engine.exits import Exit, ExitWatch
from faultdrill.events import EventSink
from faultdrill.host import procfs
from faultdrill.platforms.api import Platform, Replica

__all__ = ["HasReplicas", "ProcessSampler", "end_snapshot"]


class HasReplicas(Protocol):
    """What the sampler reads: a platform, or a node agent's view of its own processes."""

    def replicas(self) -> list[Replica]: ...


class ProcessSampler:
    """Samples the platform's processes at ``hz``; follows their exits by event where the
    platform's processes are this host's (``follow_exits=None``: decide by the platform)."""

    def __init__(
        self,
        platform: HasReplicas,
        sink: EventSink,
        hz: float,
        *,
        follow_exits: bool | None = None,
    ) -> None:
        self.platform = platform
        self.sink = sink
        self.period = 1.0 / hz
        self.known: dict[tuple[int, int], tuple[Replica, float]] = {}
        self.ports_seen: set[int] = set()
        self.extra: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-sampler", daemon=True)
        self._lock = threading.Lock()
        self._last_ports = 0.0
        # A child an agent just forked still shows the agent's command line and environment
        # until it execs into a worker; its first description would stick (proc_seen).
        self._unborn: dict[tuple[int, int], float] = {}
        if follow_exits is None:
            follow_exits = bool(getattr(platform, "host_processes", False))
        self.exits: ExitWatch | None = ExitWatch(self._exited) if follow_exits else None

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        if self.exits is not None:
            self.exits.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sample()  # one last reading, so the end state is on the timeline
        watch, self.exits = self.exits, None
        if watch is not None:
            watch.close()
        # Events are emitted on change only; this one says until when "no change" held.
        self.sink.emit(
            "sampler",
            "sampling_stopped",
            alive=len(self.known),
            exit_clock=watch.clock if watch is not None else None,
            exit_reports_lost=watch.lost_reports if watch is not None else 0,
        )

    def wait_gone(self, timeout_s: float, poll_s: float = 0.02) -> bool:
        """Wait until none of the job's processes is left (at most ``timeout_s``); returns
        whether none is. A job that has released everything cannot release more, so
        waiting longer would prove nothing new."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if not self.platform.replicas():
                    return True
            except Exception:  # a failed reading proves nothing: wait out the time
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(poll_s, left))

    def _exited(self, ex: Exit) -> None:
        self.sink.emit(
            "sampler",
            "proc_exit",
            at_mono=ex.mono,
            pid=ex.pid,
            start_time=ex.start_time,
            clock=ex.clock,
            exit_code=ex.exit_code,
            signal=ex.signal,
            **ex.facts,
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            with contextlib.suppress(Exception):  # a failed reading is a gap, not a crash
                self.sample()
            for tick in self.extra:
                with contextlib.suppress(Exception):
                    tick()
            self._stop.wait(max(0.0, self.period - (time.monotonic() - t)))

    def sample(self) -> None:
        with self._lock:
            now = time.monotonic()
            current = {(r.pid, r.start_time): r for r in self.platform.replicas()}
            agents = {r.pid for r in current.values() if r.role == "agent"}
            self._unborn = {k: t for k, t in self._unborn.items() if k in current}
            for key, rep in current.items():
                if key not in self.known:
                    unborn = rep.role != "worker" and rep.ppid in agents
                    if unborn and now - self._unborn.setdefault(key, now) < 1.0:
                        continue  # not exec'd yet: describe it at a later sample
                    self._unborn.pop(key, None)
                    self.sink.emit(
                        "sampler",
                        "proc_seen",
                        pid=rep.pid,
                        start_time=rep.start_time,
                        role=rep.role,
                        rank=rep.rank,
                        node=rep.node,
                        restart_count=rep.restart_count,
                        ppid=rep.ppid,
                        sid=rep.sid,
                        owner=rep.owner,
                    )
                    if self.exits is not None:
                        self.exits.follow(
                            rep.pid,
                            rep.start_time,
                            now,
                            role=rep.role,
                            rank=rep.rank,
                            node=rep.node,
                        )
                self.known[key] = (rep, now)
            for key in [k for k in self.known if k not in current]:
                rep, last = self.known.pop(key)
                self.sink.emit(
                    "sampler",
                    "proc_gone",
                    pid=rep.pid,
                    start_time=rep.start_time,
                    role=rep.role,
                    rank=rep.rank,
                    node=rep.node,
                    last_seen_mono=last,
                )
            if now - self._last_ports >= 1.0 and current:
                self._last_ports = now
                held = procfs.listening_ports(pid for pid, _ in current)
                new = {p for ports in held.values() for p in ports} - self.ports_seen
                if new:
                    self.ports_seen |= new
                    self.sink.emit(
                        "sampler",
                        "ports",
                        ports=sorted(new),
                        by_pid={str(k): v for k, v in held.items()},
                    )


def end_snapshot(
    platform: Platform, sampler: ProcessSampler, *, settle_s: float, after_stop: bool
) -> dict[str, Any]:
    """What of the job is left now: live processes, ports still listening, and what the
    platform says it still holds (mounts, frozen groups, rules...)."""
    sampler.sample()
    alive = [
        {"pid": r.pid, "role": r.role, "rank": r.rank, "node": r.node, "owner": r.owner}
        for r in platform.replicas()
    ]
    still = []
    if sampler.ports_seen:
        listening = _listening_now()
        still = sorted(sampler.ports_seen & listening)
    leftovers = platform.leftovers()
    return {
        "alive": alive,
        "ports": still,
        "leftovers": leftovers,
        "settle_s": settle_s,
        "after_stop": after_stop,
    }


def _listening_now() -> set[int]:
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 3 and cols[3] == "0A":
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports
