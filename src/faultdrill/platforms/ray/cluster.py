"""The embedded Ray cluster of a run: nodes (:class:`NodeCluster`) and Ray on them
(:class:`~.embedded.EmbeddedRay`), brought up once per ``faultdrill run`` and shared by its
items, or per item when no run holds it.

Layout (``resources.ray.head``)::

    own (default)   head  : ray start --head, 0 CPUs (GCS, redis with gcs_ft: redis)
                    n1..nN: Ray worker nodes, procs_per_node CPUs each; the driver on n1
    n1              n1    : ray start --head with procs_per_node CPUs (and the driver)
                    n2..nN: Ray worker nodes

Spares (``n<N+1>``...) are network namespaces and cgroups from the start but join Ray only
when a member is lost (Ray would otherwise place Train workers on them from the start, and
node faults could not aim at a rank). The head of its own is a *controller* node of the
node cluster: it never runs a replica, node faults cannot name it, control-plane faults
act on it.

Sharing: :func:`shared_cluster` is :meth:`RayPlatform.run_scope`. It records the cluster
in a ledger of its own (``RUN/ray-cluster/ledger.jsonl``, listed for ``faultdrill
cleanup``), lets each item's platform attach its own event sink while it runs, and takes
everything down when the run ends, whatever the reason (signals arriving meanwhile are
held and delivered after). Before each item the cluster is restored to its layout
(:meth:`~.embedded.EmbeddedRay.restore`).
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from faultdrill import rundir
from faultdrill.errors import PlatformError
from faultdrill.events import EventSink
from faultdrill.host.cluster import NodeCluster
from faultdrill.ledger import Ledger
from faultdrill.platforms.ray.embedded import EmbeddedRay, RayTuning

if TYPE_CHECKING:
    from faultdrill.plan import RaySettings, Resources

__all__ = ["HEAD", "LIVE", "RayCluster", "current", "settings_of", "shared_cluster"]

#: The name of a head node of its own (a controller node of the node cluster).
HEAD = "head"
#: Ledger run id -> the live Ray cluster of this process (for undos that restart a daemon).
LIVE: dict[str, EmbeddedRay] = {}
_SHARED: ContextVar[RayCluster | None] = ContextVar("faultdrill_ray_cluster", default=None)


def settings_of(resources: Resources) -> RaySettings:
    """The plan's ``resources.ray`` (a Ray plan always has it: the plan fills defaults)."""
    if resources.ray is None:
        raise PlatformError("platform ray without resources.ray settings")
    return resources.ray


class RayCluster:
    """The nodes and the Ray cluster on them for one layout (see the module)."""

    def __init__(self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink):
        settings = settings_of(resources)
        self.resources = resources
        self.settings = settings
        self.ledger = ledger
        self.home_sink = sink
        n = resources.nodes
        self.members = [f"n{i}" for i in range(1, n + 1)]
        self.spares = [f"n{i}" for i in range(n + 1, n + 1 + resources.spares)]
        own = settings.head == "own"
        self.nodes = NodeCluster(
            ledger, sink, self.members, self.spares, netns=True, controllers=[HEAD] if own else []
        )
        self.ray = EmbeddedRay(
            self.nodes,
            ledger,
            sink,
            work_dir,
            head=HEAD if own else "n1",
            members=self.members,
            gcs_ft=settings.gcs_ft == "redis",
            tuning=RayTuning.from_settings(settings),
            cpus=resources.procs_per_node,
            head_cpus=0 if own else None,
        )
        self._up = False

    def fits(self, resources: Resources) -> bool:
        """Whether an item with ``resources`` can run on this cluster (the same layout)."""
        return resources == self.resources

    def attach(self, sink: EventSink) -> None:
        """Send the cluster's events to ``sink`` (an item's timeline) from now on."""
        self.nodes.sink = sink
        self.ray.sink = sink

    def detach(self) -> None:
        self.attach(self.home_sink)

    def ensure_up(self) -> dict[str, Any]:
        """Bring the cluster up (the first time) or restore its layout (later); facts for
        the item's timeline. Raises EnvironmentPrepError."""
        began = time.monotonic()
        LIVE[self.ledger.run_id] = self.ray
        if not self._up:
            self.nodes.prepare()
            self.ray.start()
            self._up = True
            return {"brought_up_s": round(time.monotonic() - began, 3), "restored": []}
        restored = self.ray.restore()
        return {"brought_up_s": None, "restored": restored}

    def down(self) -> None:
        """Stop Ray, then remove the nodes (idempotent). Raises FaultError naming what
        could not be undone."""
        self.nodes.stop_network_track()
        try:
            self.ray.stop()
        finally:
            LIVE.pop(self.ledger.run_id, None)
            self.nodes.teardown()
            self._up = False


def current(resources: Resources) -> RayCluster | None:
    """The run's shared cluster, when one is open and fits ``resources``."""
    cluster = _SHARED.get()
    return cluster if cluster is not None and cluster.fits(resources) else None


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP noted, not obeyed, for the body; the first one noted is
    raised again afterwards (a tear-down must not be cut short)."""
    noted: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append(signum)

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    try:
        old = {s: signal.signal(s, note) for s in sigs}
    except ValueError:  # not the main thread: signals go to the main thread's handlers
        yield
        return
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if noted:
            signal.raise_signal(noted[0])


@contextlib.contextmanager
def shared_cluster(resources: Resources, run_dir: Path) -> Iterator[None]:
    """One embedded Ray cluster for every item of a run (see the module docstring)."""
    if resources.ray is None or not resources.ray.is_embedded or _SHARED.get() is not None:
        yield
        return
    work = run_dir / "ray-cluster"
    work.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(rundir.ledger_path(work), run_id=f"ray-{uuid.uuid4().hex[:12]}")
    sink = EventSink(rundir.events_dir(work), "ray-cluster")
    ledger.activate()
    cluster = RayCluster(resources, work, ledger, sink)
    token = _SHARED.set(cluster)
    try:
        yield
    finally:
        _SHARED.reset(token)
        with _signals_held():
            problems: list[str] = []
            try:
                cluster.down()
            except Exception as exc:  # said in the event; the ledger replays what is left
                problems.append(f"{type(exc).__name__}: {exc}")
            problems += ledger.revert_all()
            pending = ledger.pending()
            if not pending:
                ledger.deactivate()
            sink.emit(
                "harness",
                "cleanup",
                scope="ray-cluster",
                problems=problems,
                ledger_pending=len(pending),
            )
            sink.close()
