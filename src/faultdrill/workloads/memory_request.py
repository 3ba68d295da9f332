"""The workload's side of the ``oom-worker`` fault (standard library only).

After each step the reference workload calls :meth:`MemoryRequest.after_step`. It costs one
``stat`` of ``<events dir>/memory-request.json`` while no request is there. When one is
(written by the harness: :mod:`faultdrill.host.memcg`), and it names the memory cgroup this
process is in, the process allocates what it asks (``alloc_mb`` MiB, every page touched),
as a job whose batch or cache outgrows its container would: under the group's limit the
kernel's OOM killer kills it. A process in any other group (every process of a run
without the fault, a restarted replica once the cap was lifted) never allocates, and a
request that is not a small JSON object naming both fields is ignored.

The allocation is bounded by the request (at most :data:`MAX_ALLOC_MB`) and made once per
process: if the process survives it (the limit was lifted meanwhile), it frees it and goes
on; the probe's ``memory_allocate`` event says it happened and at which step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["MAX_ALLOC_MB", "MemoryRequest", "own_memory_cgroup"]

REQUEST_FILE = "memory-request.json"
MAX_ALLOC_MB = 8192
_PAGE = 4096


def own_memory_cgroup() -> str | None:
    """This process's memory cgroup (``/a/b``), None if it cannot be read."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if "memory" in controllers.split(","):
            return path or "/"
    return None


class MemoryRequest:
    """Honours the harness's memory request (see the module docstring)."""

    def __init__(self, events_dir: str | None, emit: Any = None) -> None:
        self.path = Path(events_dir, REQUEST_FILE) if events_dir else None
        self.emit = emit
        self.done = False

    def _read(self) -> tuple[str, int] | None:
        assert self.path is not None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        memcg, mb = body.get("memcg"), body.get("alloc_mb")
        if not isinstance(memcg, str) or not isinstance(mb, int) or isinstance(mb, bool):
            return None
        return (memcg, mb) if 0 < mb <= MAX_ALLOC_MB else None

    def after_step(self, step: int) -> None:
        """Allocate as asked when a request names this process's memory group."""
        if self.done or self.path is None or not os.path.exists(self.path):
            return
        request = self._read()
        if request is None or request[0] != own_memory_cgroup():
            return
        self.done = True
        memcg, mb = request
        if self.emit is not None:
            self.emit("memory_allocate", step=step, alloc_mb=mb, memcg=memcg)
        held = []
        for _ in range(mb):
            chunk = bytearray(1 << 20)
            for i in range(0, len(chunk), _PAGE):
                chunk[i] = 1  # touch every page: only touched pages are charged
            held.append(chunk)
        del held  # survived: the limit was lifted before the allocation outgrew it
