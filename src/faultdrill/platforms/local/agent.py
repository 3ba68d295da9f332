"""Real torchrun, with its decisions put on the drill's timeline.

Runs ``torch.distributed.run.main`` unchanged (``python -m faultdrill.platforms.local.agent
<torchrun args>`` behaves exactly like ``torchrun <args>``) after attaching a logging handler
to ``torch.distributed``. The agent's own log records (worker group failed, rendezvous
complete with its round's master port, membership change, exit barrier...) become
``platform`` events with the agent's own clock readings, instead of being parsed from
stderr later with pipe delays.

On a node the harness cannot see (a real Slurm cluster: ``FAULTDRILL_NODE_SAMPLE_HZ`` set),
the agent also samples its node's processes of the run (those whose environment carries
the run id and this node's name) as the harness's process sampler would, into
``sampler-<node>.jsonl``; there, and wherever ``FAULTDRILL_CLOCK_OFFSET`` is set, events
are stamped on the harness's clock (:mod:`faultdrill.events`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

from faultdrill.probe import clock_offset, mono_clock

# Order matters: the most specific phrase first. Values are event kinds.
_CLASSIFY = (
    ("Rendezvous complete for workers", "rdzv_complete"),
    ("Rendezvous'ing worker group", "rdzv_start"),
    ("Starting worker group", "workers_starting"),
    ("Stopping worker group", "workers_stopping"),
    ("attempts left; will restart worker group", "worker_group_failed"),
    ("new nodes from group_rank", "membership_change"),
    ("worker group successfully finished", "workers_succeeded"),
    ("Local worker group finished", "exit_barrier"),
    ("Done waiting for other agents", "exit_barrier_done"),
    ("Error waiting on exit barrier", "exit_barrier_error"),
    ("death signal", "agent_signalled"),
    ("failed (exitcode", "worker_failed"),
    ("RendezvousTimeoutError", "rdzv_timeout"),
    ("RendezvousConnectionError", "rdzv_connection_error"),
    ("RendezvousClosedError", "rdzv_closed"),
    ("keep-alive", "keep_alive"),
    ("Detected dead node", "dead_node"),
)
_RDZV_LOGGER = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
#: The events' ``mono``: this host's monotonic clock, or the harness's (probe.mono_clock).
_MONO = mono_clock()


class _TimelineHandler(logging.Handler):
    def __init__(self, fd: int, node: str, task: str) -> None:
        super().__init__(level=logging.INFO)
        self._fd = fd
        self._base = {
            "src": "platform",
            "task": task,
            "node": node,
            "pid": os.getpid(),
            "source": "torchrun-agent",
        }

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record must not take the agent down
            msg = str(record.msg)
        kind = next((k for phrase, k in _CLASSIFY if phrase in msg), "agent_log")
        fields: dict[str, Any] = {
            "kind": kind,
            "level": record.levelname,
            "logger": record.name,
            "msg": msg[:2000],
        }
        if kind == "rdzv_complete" and isinstance(record.args, dict):
            for key in (
                "restart_count",
                "master_addr",
                "master_port",
                "group_rank",
                "group_world_size",
                "global_ranks",
            ):
                if key in record.args:
                    fields[key] = record.args[key]
        if (
            kind == "worker_group_failed"
            and isinstance(record.args, tuple)
            and len(record.args) >= 3
        ):
            fields["state"], fields["restarts_left"] = record.args[1], record.args[2]
        line = {"ts": time.time(), "mono": _MONO(), **self._base, **fields}
        os.write(self._fd, (json.dumps(line, default=str) + "\n").encode())


def _emit(fd: int, node: str, task: str, kind: str, **fields: Any) -> None:
    line = {
        "ts": time.time(),
        "mono": _MONO(),
        "src": "platform",
        "task": task,
        "kind": kind,
        "node": node,
        "pid": os.getpid(),
        **fields,
    }
    os.write(fd, (json.dumps(line, default=str) + "\n").encode())


def _watch_dead_nodes(handler: logging.Handler) -> None:
    """The rendezvous says that a peer's keep-alive expired ("Detected dead node") only at
    DEBUG level: let exactly that record through to the timeline, no other DEBUG record.
    Set after the import, which sets the logger's level from LOGLEVEL."""
    import torch.distributed.elastic.rendezvous.dynamic_rendezvous  # noqa: F401

    log = logging.getLogger(_RDZV_LOGGER)
    log.addFilter(lambda r: r.levelno >= logging.INFO or "Detected dead node" in r.getMessage())
    log.setLevel(logging.DEBUG)
    handler.setLevel(logging.DEBUG)


class _NodeProcesses:
    """This node's processes of the run, described as the harness's sampler would
    (for :class:`~faultdrill.engine.samplers.ProcessSampler`)."""

    def __init__(self, node: str, run_id: str) -> None:
        from faultdrill.lineage import Lineage

        self.node, self.run_id = node, run_id
        self.lineage = Lineage()

    def replicas(self) -> list[Any]:
        from faultdrill.host import procfs
        from faultdrill.platforms.local.platform import describe_process

        pids = [os.getpid()]
        for pid in procfs.pids_with_env("FAULTDRILL_RUN_ID", self.run_id):
            if procfs.environ(pid).get("FAULTDRILL_NODE") == self.node:
                pids.append(pid)
        reps = [describe_process(pid, self.node) for pid in pids]
        return self.lineage.classify([r for r in reps if r is not None])


def _node_sampler(events_dir: str, node: str, task: str) -> Any:
    """The sampler of this node's processes when the harness cannot see them (None
    otherwise). Its events go to ``sampler-<node>.jsonl``: one writer per file."""
    hz = os.environ.get("FAULTDRILL_NODE_SAMPLE_HZ")
    run_id = os.environ.get("FAULTDRILL_RUN_ID")
    if not hz or not run_id:
        return None
    from pathlib import Path

    from faultdrill.engine.samplers import ProcessSampler
    from faultdrill.events import EventSink

    class _NodeSink(EventSink):
        def emit(self, src: str, kind: str, *, stream: str | None = None, **fields: Any) -> Any:
            return super().emit(src, kind, stream=f"{src}-{node}", **fields)

    sink = _NodeSink(Path(events_dir), task, mono_offset=clock_offset())
    sampler = ProcessSampler(_NodeProcesses(node, run_id), sink, float(hz))
    sampler.start()
    return sampler


def _stop_sampler(sampler: Any) -> None:
    """Last reading, then the agent's own end (it sampled itself while it ran)."""
    sampler.stop()
    me = os.getpid()
    for (pid, start), (rep, last) in list(sampler.known.items()):
        if pid == me:
            sampler.sink.emit(
                "sampler",
                "proc_gone",
                pid=pid,
                start_time=start,
                role=rep.role,
                rank=rep.rank,
                node=rep.node,
                last_seen_mono=last,
            )


def main() -> None:
    events_dir = os.environ["FAULTDRILL_EVENTS_DIR"]
    node = os.environ.get("FAULTDRILL_NODE", "node")
    task = os.environ.get("FAULTDRILL_TASK_ID", "")
    path = os.path.join(events_dir, f"agent-{node}.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    handler = _TimelineHandler(fd, node, task)
    logging.getLogger("torch.distributed").addHandler(handler)
    _emit(fd, node, task, "agent_start", argv=sys.argv[1:])
    sampler = _node_sampler(events_dir, node, task)
    rc = 0
    try:
        from torch.distributed.run import main as torchrun_main

        _watch_dead_nodes(handler)

        torchrun_main(sys.argv[1:])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
        raise
    except BaseException as exc:
        rc = 1
        _emit(fd, node, task, "agent_error", error=type(exc).__name__, msg=str(exc)[:2000])
        raise
    finally:
        if sampler is not None:
            _stop_sampler(sampler)
        _emit(fd, node, task, "agent_exit", rc=rc)


def _wait_for_peers(cap_s: float = 3.0) -> None:
    """On the agent hosting the rendezvous store: wait (at most ``cap_s``) until every
    other agent of the last rendezvous round has closed the rendezvous (its ``agent_exit``
    is written) or is gone. Their closing talks to this process's store; leaving first
    would make it fail ("failed to shutdown the rendezvous")."""
    if not any(a.startswith("--rdzv-conf=") and "is_host=1" in a for a in sys.argv[1:]):
        return
    events = os.environ["FAULTDRILL_EVENTS_DIR"]
    own = f"agent-{os.environ.get('FAULTDRILL_NODE', 'node')}.jsonl"
    rounds = {name: _last_round(os.path.join(events, name)) for name in os.listdir(events)}
    port = rounds.get(own, (None, 0, False))[0]
    deadline = time.monotonic() + cap_s
    while port is not None and time.monotonic() < deadline:
        waiting = [
            name
            for name, (p, pid, closed) in rounds.items()
            if name != own and p == port and not closed and os.path.exists(f"/proc/{pid}/cmdline")
        ]
        if not waiting:
            return
        time.sleep(0.02)
        rounds.update({name: _last_round(os.path.join(events, name)) for name in waiting})


def _last_round(path: str) -> tuple[int | None, int, bool]:
    """(master port of the agent's last rendezvous round, its pid, whether it has exited
    since) from one agent's events file; (None, 0, False) for any other file."""
    port, pid, closed = None, 0, False
    if not os.path.basename(path).startswith("agent-"):
        return port, pid, closed
    with open(path, "rb") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("kind") == "rdzv_complete":
                port, pid, closed = ev.get("master_port"), int(ev.get("pid", 0)), False
            elif ev.get("kind") == "agent_exit":
                closed = True
    return port, pid, closed


if __name__ == "__main__":
    # Once torchrun returns, everything the agent says is written (unbuffered) and its
    # workers are gone: exit without the interpreter's teardown of torch (about 2 s of a
    # node's end on 2 busy cores), with torchrun's status, once no peer still needs this
    # agent's rendezvous store. A failure keeps the normal path.
    try:
        main()
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    _wait_for_peers()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
