"""``platform: ray`` with ``resources.ray.address``: the job on a running Ray cluster.

faultdrill runs on a node of that cluster (the driver attaches to this host's raylet, as
``ray job submit`` entrypoints do on the head): it owns no node, link, control plane or
mount of the cluster, so it offers only what it can do from here (``signal-rank`` and
``checkpoint-files``; the plan validator refuses the rest, naming the embedded cluster as
the fix):

* the driver runs in this host's network namespace with ``RAY_ADDRESS`` = the address;
* the job's events reach the harness through ``FAULTDRILL_EVENTS_DIR``, which the Train
  workers must see: on a cluster of more than this host, the run directory must be on a
  filesystem every node mounts at the same path (as must the checkpoint directory, Ray's
  storage path);
* a rank's Train worker is signalled only when it runs on this host: its ``run_start``
  names this host, and its pid is alive here with the start time it had then (a pid
  announced by a worker of another host is never signalled here);
* the GCS observer runs here, recorded in the ledger like an embedded cluster's daemons.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from typing import Any

from faultdrill import rundir
from faultdrill.errors import EnvironmentPrepError, FaultError, PlatformError
from faultdrill.host import procfs
from faultdrill.platforms.api import JobSpec, JobState, NodeInfo, Replica
from faultdrill.platforms.ray.embedded import MARKER_ENV, RayTuning, ray_missing
from faultdrill.platforms.ray.platform import VARIANTS, RayPlatform

__all__ = ["RayAddressPlatform"]


class RayAddressPlatform(RayPlatform):
    """A Ray Train job on the running cluster at ``resources.ray.address`` (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tuning = RayTuning.from_settings(self.settings)
        self._observer: tuple[str, subprocess.Popen[bytes]] | None = None
        self._hosts: dict[int, str] = {}  # pid -> host it announced

    @property
    def address(self) -> str:
        return str(self.settings.address)

    def _prepare(self) -> None:
        why = ray_missing()
        if why:
            raise EnvironmentPrepError(f"Ray cluster at {self.address}: {why}")
        self.sink.emit(
            "platform",
            "ray_cluster",
            shared=False,
            address=self.address,
            embedded=False,
            dossier=json.dumps(
                {"gcs_address": self.address, "driver_env": self.tuning.driver_env()}
            ),
        )

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(socket.gethostname(), self.address.rpartition(":")[0], "up")]

    def _start_observer(self, job: JobSpec) -> None:
        marker = uuid.uuid4().hex
        argv = [
            sys.executable,
            "-m",
            "faultdrill.platforms.ray.observe",
            f"--address={self.address}",
            f"--events-dir={job.events_dir}",
            f"--task={job.task_id}",
        ]
        eid = self.ledger.record(
            "ray-daemon",
            {"node": "this host", "role": "observer", "marker": marker, "argv": argv},
            "GCS observer on this host",
        )
        with open(rundir.logs_dir(job.work_dir) / "ray-observer.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, MARKER_ENV: marker, "FAULTDRILL_RUN_ID": self.ledger.run_id},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.ledger.update(eid, pid=proc.pid, start_time=procfs.start_time(proc.pid))
        self.ledger.mark_applied(eid)
        self._observer = (eid, proc)

    def _submit(self, job: JobSpec) -> None:
        argv, env = self._driver_command(
            job, {**self.tuning.driver_env(), "RAY_ADDRESS": self.address}
        )
        rundir.logs_dir(job.work_dir).mkdir(parents=True, exist_ok=True)
        self._start_observer(job)
        with open(rundir.logs_dir(job.work_dir) / "ray-driver.log", "ab") as log:
            try:
                self.driver = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=job.work_dir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                raise PlatformError(f"cannot start the Ray driver: {exc}") from exc
        self._driver_spawned(socket.gethostname())

    def _poll(self) -> JobState:
        if self.driver is None:
            return JobState.PENDING
        rc = self.driver.poll()
        if rc is None:
            return JobState.RUNNING
        return JobState.SUCCEEDED if rc == 0 else JobState.FAILED

    def _announced_here(self) -> dict[int, int]:
        """pid -> rank of the Train workers that announced this host."""
        if self._seen is None:
            return {}
        self._seen.read()
        here = socket.gethostname()
        hosts = _hosts_of(self._seen.dir)
        return {p: r for p, r in self._seen.ranks.items() if hosts.get(p) == here}

    def replicas(self) -> list[Replica]:
        """The driver, and the Train workers on this host with the processes below them."""
        if self._seen is None:
            return []
        ranks = self._announced_here()
        agents = {self.driver.pid} if self.driver is not None else set()
        if self._seen.controller is not None:
            agents.add(self._seen.controller)
        here = socket.gethostname()
        procs = []
        for pid in _descendants_and(set(ranks) | agents):
            ids = procfs.identity(pid)
            if ids is None:
                continue
            role = "agent" if pid in agents else "worker" if pid in ranks else "other"
            procs.append(Replica(pid, ids[0], role, here, ranks.get(pid), None, ids[1], ids[2]))
        return [r for r in self._lineage.classify(procs) if r.role != "other"]

    def job_actor_pids(self) -> dict[int, str]:
        return {}

    def _teardown(self) -> None:
        if self.driver is not None:
            if self.driver.poll() is None:
                self.driver.kill()
            self.driver.wait()
        if self._observer is not None:
            eid, proc = self._observer
            self.ledger.revert(eid)
            proc.wait(5)
            self._observer = None

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        if node is not None:
            raise FaultError(
                "a Ray cluster given by address has no nodes faultdrill names; target a rank"
            )
        return super().rank_replica(rank=rank)


def _hosts_of(events_dir: Any) -> dict[int, str]:
    """pid -> the host its ``run_start`` names, from the probe's files."""
    out: dict[int, str] = {}
    for path in events_dir.glob("probe-rank*.jsonl"):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for raw in lines:
            if '"run_start"' not in raw:
                continue
            try:
                ev = json.loads(raw)
                out[int(ev["pid"])] = str(ev.get("host"))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def _descendants_and(roots: set[int]) -> list[int]:
    """``roots`` that are alive, and every live process below them."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            ppid = procfs.parent_pid(int(entry.name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [p for p in roots if procfs.alive(p)]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.append(pid)
            todo.extend(children.get(pid, ()))
    return out


VARIANTS["address"] = RayAddressPlatform
