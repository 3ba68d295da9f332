"""Process exits by event: when each followed process really ended, to the millisecond.

Sampling /proc at 10 Hz knows that a process is gone only at the next sample (up to 100 ms
late, later on a busy host). :class:`ExitWatch` follows each process the sampler has seen
by event instead:

* a **pidfd** per process (``os.pidfd_open``, Linux 5.3+, any user) becomes readable the
  moment the process has exited (all its threads), whoever its parent is and whether or
  not it was reaped yet. It makes the exit certain and ties it to the process that was
  seen (a pidfd names one process, never a later holder of its pid);
* the kernel's **process connector** (a netlink socket, where the host lets this process
  listen: root, in the initial namespaces) stamps every exit with the kernel's own
  ``CLOCK_MONOTONIC`` reading, the clock of ``time.monotonic()`` and of every event. When it
  reported the exit of a followed process, that reading is the exit time
  (``clock="kernel"``); otherwise the time the pidfd woke this thread is
  (``clock="pidfd"``: as late as the thread was scheduled, a few ms on a busy host).

The connector is read before the pidfds on every wake: the kernel queues its message
before it wakes pidfd waiters, so a reported exit is there when its pidfd fires. A process
that was already gone when it was followed, with no connector report of its exit, gets no
exit event: sampling (``proc_gone``) covers it, as it covers a host without pidfds.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Exit", "ExitWatch"]

# <linux/connector.h>, <linux/cn_proc.h>
_NETLINK_CONNECTOR = 11
_CN_IDX_PROC = 1
_CN_VAL_PROC = 1
_NLMSG_DONE = 3
_LISTEN, _IGNORE = 1, 2
_PROC_EVENT_EXIT = 0x80000000
_NLMSGHDR = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT_HEAD = struct.Struct("=IIQ")  # what, cpu, timestamp_ns (CLOCK_MONOTONIC)
_EXIT_BODY = struct.Struct("=IIII")  # pid (thread), tgid (process), exit_code, exit_signal
_EVENT_AT = _NLMSGHDR.size + _CN_MSG.size
#: Exits of processes nobody follows (yet) are kept this long, for one followed too late.
_RECENT_S = 5.0


@dataclass(frozen=True)
class Exit:
    """One followed process's end."""

    pid: int
    start_time: int
    mono: float  # when it exited, on time.monotonic()'s clock
    clock: str  # "kernel" (the connector's stamp) or "pidfd" (when this thread woke)
    #: How it ended, when the connector said: ``exit_code`` (0-255) or ``signal`` (number).
    exit_code: int | None
    signal: int | None
    facts: dict[str, Any]  # what the follower passed in (role, rank, node...)


@dataclass
class _Followed:
    pid: int
    start_time: int
    seen_mono: float
    facts: dict[str, Any]
    pidfd: int


@dataclass
class _Reported:
    """What the connector said of one process's threads so far."""

    last_ns: int = 0
    leader_ns: int | None = None  # the main thread's exit (pid == tgid)
    status: int | None = None  # the main thread's wait status


class ExitWatch:
    """Follows processes to their exit; calls ``on_exit`` (from its own thread) once for
    each followed process that exits. Thread-safe. ``connector=False`` leaves the
    process connector alone (pidfds only).

    ``available`` is False where the host has no pidfds: :meth:`follow` then returns False
    and nothing is followed."""

    def __init__(self, on_exit: Callable[[Exit], None], *, connector: bool = True) -> None:
        self.on_exit = on_exit
        self.available = hasattr(os, "pidfd_open")
        self.lost_reports = 0  # connector messages the kernel dropped (socket full)
        self._lock = threading.RLock()  # the followed processes and the connector's reports
        self._by_fd: dict[int, _Followed] = {}
        self._reports: dict[int, _Reported] = {}  # tgid -> what the connector said
        self._epoll = select.epoll() if self.available else None
        self._wake_r, self._wake_w = os.pipe()
        self._sock: socket.socket | None = None
        if self.available and connector:
            self._sock = _open_connector()
        assert self._epoll is not None or not self.available
        if self._epoll is not None:
            self._epoll.register(self._wake_r, select.EPOLLIN)
            if self._sock is not None:
                self._epoll.register(self._sock.fileno(), select.EPOLLIN)
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="exit-watch", daemon=True)

    @property
    def clock(self) -> str | None:
        """Where exit times come from: ``kernel``, ``pidfd``, or None (not followed)."""
        if not self.available:
            return None
        return "kernel" if self._sock is not None else "pidfd"

    def start(self) -> None:
        if self.available:
            self._thread.start()

    def follow(self, pid: int, start_time: int, seen_mono: float, **facts: Any) -> bool:
        """Follow the process ``pid`` that started at ``start_time`` (``/proc`` ticks) and
        was seen alive at ``seen_mono``. Returns whether its exit will be (or was just)
        reported; False when it was gone before it could be followed and nothing said
        when, or where pidfds are missing."""
        if self._epoll is None or self._stop:
            return False
        from faultdrill.host import procfs

        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return self._gone_before(pid, start_time, seen_mono, facts)
        if procfs.start_time(pid) != start_time:  # another process holds the pid now
            os.close(fd)
            return self._gone_before(pid, start_time, seen_mono, facts)
        with self._lock:
            self._by_fd[fd] = _Followed(pid, start_time, seen_mono, facts, fd)
            rep = self._reports.get(pid)
            if rep is not None and rep.last_ns / 1e9 < seen_mono:
                del self._reports[pid]  # an earlier holder of the pid
        self._epoll.register(fd, select.EPOLLIN)
        return True

    def close(self) -> None:
        """Stop following (processes still alive get no exit event). Idempotent."""
        if self._stop:
            return
        self._stop = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            fds = list(self._by_fd)
            self._by_fd.clear()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.send(_control(_IGNORE, 0))  # the kernel counts listeners
            self._sock.close()
        if self._epoll is not None:
            self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # --- the watching thread ---------------------------------------------------------------

    def _loop(self) -> None:
        assert self._epoll is not None
        while not self._stop:
            try:
                ready = self._epoll.poll(1.0)
            except InterruptedError:
                continue
            woke = time.monotonic()
            if self._stop:
                return
            own = (self._wake_r, self._sock.fileno() if self._sock else -1)
            with self._lock:
                self._read_connector()
                ended = [self._forget(fd) for fd, _mask in ready if fd not in own]
            for f, rep in (x for x in ended if x is not None):
                self._emit(f.pid, f.start_time, f.seen_mono, f.facts, rep, woke)

    def _forget(self, fd: int) -> tuple[_Followed, _Reported | None] | None:
        """Stop following the process of a readable pidfd (it ended): it, and what the
        connector said of it. Called with the lock held."""
        assert self._epoll is not None
        f = self._by_fd.pop(fd, None)
        if f is None:
            return None
        with contextlib.suppress(OSError):
            self._epoll.unregister(fd)
        os.close(fd)
        return f, self._reports.pop(f.pid, None)

    def _gone_before(
        self, pid: int, start_time: int, seen_mono: float, facts: dict[str, Any]
    ) -> bool:
        """A process that ended between the sample that saw it and :meth:`follow`: its exit
        is reported only if the connector stamped it after that sample (an earlier holder
        of the pid ended before this one started, so before it was seen)."""
        if self._sock is None:
            return False
        with self._lock:
            self._read_connector()
            rep = self._reports.get(pid)
            if rep is None or rep.leader_ns is None or rep.last_ns / 1e9 < seen_mono:
                return False
            del self._reports[pid]
        self._emit(pid, start_time, seen_mono, facts, rep, time.monotonic())
        return True

    def _emit(
        self,
        pid: int,
        start_time: int,
        seen_mono: float,
        facts: dict[str, Any],
        rep: _Reported | None,
        woke: float,
    ) -> None:
        code = sig = None
        if rep is not None and rep.leader_ns is not None and rep.last_ns / 1e9 >= seen_mono:
            mono, clock = rep.last_ns / 1e9, "kernel"
            if rep.status is not None:
                sig = rep.status & 0x7F or None
                code = None if sig else (rep.status >> 8) & 0xFF
        else:
            mono, clock = woke, "pidfd"
        self.on_exit(Exit(pid, start_time, mono, clock, code, sig, facts))

    def _read_connector(self) -> None:
        """Take every queued connector message; keep the exits of followed processes and,
        for a while, of the others (a process may be followed just after it ended). Called
        with the lock held."""
        if self._sock is None:
            return
        followed = {f.pid for f in self._by_fd.values()}
        now_ns = time.monotonic_ns()
        while True:
            try:
                data = self._sock.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # the kernel dropped messages; go on
                    self.lost_reports += 1
                    continue
                break
            if len(data) < _EVENT_AT + _EVENT_HEAD.size + _EXIT_BODY.size:
                continue
            what, _cpu, ts = _EVENT_HEAD.unpack_from(data, _EVENT_AT)
            if what != _PROC_EVENT_EXIT:
                continue
            tid, tgid, status, _sig = _EXIT_BODY.unpack_from(data, _EVENT_AT + _EVENT_HEAD.size)
            rep = self._reports.get(tgid)
            if rep is None:
                if tgid not in followed and tid != tgid:
                    continue  # a thread of a process nobody follows
                rep = self._reports[tgid] = _Reported()
            rep.last_ns = max(rep.last_ns, ts)
            if tid == tgid:
                rep.leader_ns, rep.status = ts, status
        if len(self._reports) > 256:  # forget old exits of processes nobody followed
            horizon = now_ns - int(_RECENT_S * 1e9)
            for tgid in [t for t, r in self._reports.items() if r.last_ns < horizon]:
                if tgid not in followed:
                    del self._reports[tgid]


def _control(op: int, events: int) -> bytes:
    """A connector control message: listen (to ``events`` only, where the kernel can
    filter: 6.6+) or stop listening."""
    body = struct.pack("=II", op, events) if events else struct.pack("=I", op)
    cn = _CN_MSG.pack(_CN_IDX_PROC, _CN_VAL_PROC, 0, 0, len(body), 0) + body
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(cn), _NLMSG_DONE, 0, 0, 0) + cn


def _kernel_filters() -> bool:
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 6)


def _open_connector() -> socket.socket | None:
    """A socket subscribed to the process connector's exit reports, or None where this
    process may not listen (not root, not in the initial namespaces, no connector)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_CONNECTOR)
    except (OSError, AttributeError):
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((0, _CN_IDX_PROC))
        sock.send(_control(_LISTEN, _PROC_EVENT_EXIT if _kernel_filters() else 0))
    except OSError:
        sock.close()
        return None
    return sock
