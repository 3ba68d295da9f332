"""What the platforms whose nodes are this host's do alike, written once.

The local platform and the embedded Slurm, Ray and Kubernetes test clusters all run the
job's replicas as processes of this machine, and (with network namespaces) its nodes on a
:class:`~faultdrill.host.cluster.NodeCluster`. So a rank's replica is signalled the same way
on all of them (:class:`ProcessReplicas`: ability group ``SignalsRanks``), and a node's link
is lost, slowed, set down or cut the same way (:class:`NodeLinks`: ``LinkActions``). Each
platform keeps only what is its own: which of several processes claiming a rank is the
current replica, what an operator types to reach a node, how a node is cut off from its
control plane. Like :class:`~faultdrill.host.storage.HostStorage`, these are mixins: the
class they are mixed into is a :class:`~faultdrill.platforms.api.Platform`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from faultdrill.errors import FaultError
from faultdrill.host import procfs
from faultdrill.host.linux import signal_change
from faultdrill.plan.faults import CONTROL_PLANE_PEER

if TYPE_CHECKING:
    from faultdrill.host.api import Change, Replica
    from faultdrill.host.cluster import NodeCluster

__all__ = ["NodeLinks", "ProcessReplicas"]


class ProcessReplicas:
    """Mixin: ``signal_replica`` and ``replica_alive`` for replicas that are processes of
    this host, and the live workers a platform's ``rank_replica`` chooses from.

    A signal goes to the pid only while it is still the process that started at the
    replica's start time (never to a reused pid; ``apply`` raises ProcessLookupError when it
    is gone); aliveness is the same test."""

    #: What a signalled replica is called in the ledger's label (``"SIGKILL pid 42 ..."``).
    signal_noun: ClassVar[str] = "pid"
    #: What a worker is called when none holds the rank asked for.
    worker_noun: ClassVar[str] = "worker"

    def live_workers(
        self, replicas: Iterable[Replica], *, rank: int | None, node: str | None
    ) -> list[Replica]:
        """The workers (``role == "worker"``) of ``replicas`` that hold ``rank`` and sit on
        ``node`` (either None: any). Raises FaultError naming what was asked when none does."""
        found = [
            r
            for r in replicas
            if r.role == "worker"
            and (rank is None or r.rank == rank)
            and (node is None or r.node == node)
        ]
        if not found:
            what = f"rank {rank}" if rank is not None else f"a {self.worker_noun} on node {node}"
            raise FaultError(f"no live {self.worker_noun} holds {what}")
        return found

    def kill_command(self, replica: Replica, sig: str) -> str:
        """What an operator would type to send ``sig`` to ``replica`` (a platform whose
        nodes are reached over ssh says so)."""
        return f"kill -{sig.removeprefix('SIG')} {replica.pid}"

    def signal_replica(self, replica: Replica, sig: str) -> Change:
        pid = replica.pid
        return signal_change(
            pid,
            replica.start_time,
            sig,
            f"{sig} {self.signal_noun} {pid} (rank {replica.rank}, node {replica.node})",
            self.kill_command(replica, sig),
            {"pid": pid, "rank": replica.rank, "node": replica.node},
        )

    def replica_alive(self, replica: Replica) -> bool:
        return procfs.alive(replica.pid, replica.start_time)


class NodeLinks:
    """Mixin: ``LinkActions`` on the nodes of a namespace cluster of this host.

    The class it is mixed into says which cluster (:meth:`node_cluster`) and, when its
    control plane is a service the node reaches over its link, how a node is cut off from
    it (:meth:`cut_from_control_plane`); without that, ``peer="control-plane"`` goes to the
    cluster as any other peer."""

    def node_cluster(self) -> NodeCluster:
        """The cluster whose nodes the job runs on (raises FaultError before it exists)."""
        raise NotImplementedError

    def cut_from_control_plane(self, node: str) -> list[Change] | None:
        """The changes that cut ``node`` off from the control plane only; None: no such
        service of its own (the default)."""
        return None

    def link_loss(self, node: str, percent: float, *, peer: str | None = None) -> list[Change]:
        return self.node_cluster().link_loss(node, percent, peer=peer)

    def link_slow(self, node: str, *, rate: str, burst: str, queue_ms: int) -> list[Change]:
        return self.node_cluster().link_slow(node, rate=rate, burst=burst, queue_ms=queue_ms)

    def link_down(self, node: str) -> Change:
        return self.node_cluster().link_down(node)

    def link_cut(self, node: str, *, peer: str | None = None) -> list[Change]:
        if peer == CONTROL_PLANE_PEER:
            cut = self.cut_from_control_plane(node)
            if cut is not None:
                return cut
        return self.node_cluster().link_cut(node, peer=peer)
