"""The machines under the test cluster: one network namespace and cgroup per node.

This is the only place that knows where nodes come from. Today it wraps the namespace
cluster of :class:`~faultdrill.platforms.local.netns.NetnsPlatform`; when ``NodeCluster``
(``faultdrill.platforms.local.cluster``) lands, :class:`NetnsNodes` is replaced by it and
nothing else changes: the test cluster uses only the members of :class:`NodeHost`.

Layout: worker nodes ``n1..nN`` (each runs a kubelet), then spare worker nodes (also
registered: Kubernetes has no spares, only Nodes the scheduler may use), then one more
namespace, the *control-plane host* ``cp``, on the same bridge. etcd, kube-apiserver,
kube-controller-manager, kube-scheduler (and the job's rendezvous store) run there; the
kubelets reach the apiserver through their node's veth, so cutting a node's link really
cuts its kubelet off the control plane.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from faultdrill.errors import EnvironmentPrepError
from faultdrill.platforms.local import procfs

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.platforms.local.netns import NetnsPlatform

__all__ = ["NetnsNodes", "NodeHost"]


class NodeHost(Protocol):
    """What the test cluster needs of its machines."""

    workers: list[str]
    control: str

    def prepare(self) -> None: ...

    def teardown(self) -> None: ...

    def address(self, node: str) -> str: ...

    def ifname(self, node: str) -> str: ...

    def netns(self, node: str) -> str: ...

    def cgroup(self, node: str) -> procfs.Cgroup: ...

    def enter(self, node: str) -> list[str]:
        """Argv prefix that runs a command in the node's network namespace (the cgroup is
        joined by the launcher, before this runs)."""
        ...


class NetnsNodes:
    """Nodes of a :class:`NetnsPlatform` (its bring-up, ledger entries and tear-down),
    ``workers + spares`` worker nodes plus the control-plane host as its last node."""

    def __init__(
        self, work_dir: Path, ledger: Ledger, sink: EventSink, *, workers: int, spares: int = 0
    ) -> None:
        from faultdrill.plan.sections import Resources
        from faultdrill.platforms.local.netns import NetnsPlatform

        res = Resources(isolation="netns", nodes=workers + spares + 1, spares=0)
        self._p: NetnsPlatform = NetnsPlatform(res, work_dir, ledger, sink)
        names = list(self._p.node_names)
        self.workers = names[:-1]
        self.control = names[-1]

    def prepare(self) -> None:
        self._p._prepare()
        for node in [*self.workers, self.control]:
            if self._p.cgroup(node) is None:
                raise EnvironmentPrepError(f"node {node} has no cgroup (cgroup v1 freezer)")

    def teardown(self) -> None:
        self._p._teardown()

    def address(self, node: str) -> str:
        return self._p.node_address(node)

    def ifname(self, node: str) -> str:
        return self._p.gloo_ifname(node)

    def netns(self, node: str) -> str:
        return self._p.link(node).ns

    def cgroup(self, node: str) -> procfs.Cgroup:
        group = self._p.cgroup(node)
        if group is None:
            raise EnvironmentPrepError(f"node {node} has no cgroup")
        return group

    def enter(self, node: str) -> list[str]:
        return self._p.launch_prefix(node)

    @property
    def platform(self) -> NetnsPlatform:
        """The wrapped namespace cluster (its link and node helpers, for faults)."""
        return self._p
