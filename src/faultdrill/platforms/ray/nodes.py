"""The node verbs an embedded Ray cluster needs, over today's namespace cluster.

This is the seam's ``NodeCluster`` (``launch``, ``address``, ``node_pids``) written against
``NetnsPlatform`` until that lands: the lead swaps this one class. Nothing else in the Ray
platform touches namespaces or cgroups directly.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from faultdrill.errors import PlatformError

if TYPE_CHECKING:
    from faultdrill.platforms.local.netns import NetnsPlatform

__all__ = ["NetnsNodes", "Nodes"]


class Nodes(Protocol):
    """What :class:`~faultdrill.platforms.ray.embedded.EmbeddedRay` asks of the nodes."""

    def names(self) -> list[str]: ...

    def address(self, node: str) -> str: ...

    def ifname(self, node: str) -> str: ...

    def launch(
        self,
        node: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log: IO[bytes],
        cgroup: bool = True,
    ) -> subprocess.Popen[bytes]: ...

    def node_pids(self, node: str) -> list[int]: ...


class NetnsNodes:
    """:class:`Nodes` over a prepared ``NetnsPlatform`` (namespaces and cgroups exist)."""

    def __init__(self, platform: NetnsPlatform) -> None:
        self.platform = platform

    def names(self) -> list[str]:
        return [n.name for n in self.platform.nodes()]

    def address(self, node: str) -> str:
        return self.platform.node_address(node)

    def ifname(self, node: str) -> str:
        return self.platform.gloo_ifname(node)

    def launch(
        self,
        node: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log: IO[bytes],
        cgroup: bool = True,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the node's network namespace; with ``cgroup`` it joins the
        node's cgroup BEFORE exec, so every descendant (raylet -> workers) is in it.
        Its own session; stdout and stderr go to ``log``. Raises PlatformError."""
        full = [*self.platform.launch_prefix(node), *argv]
        group = self.platform.cgroup(node)
        if cgroup and group is not None:
            procs = shlex.quote(str(group.path / "cgroup.procs"))
            full = ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *full]
        try:
            return subprocess.Popen(
                full,
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise PlatformError(f"cannot start {argv[0]} on node {node}: {exc}") from exc

    def node_pids(self, node: str) -> list[int]:
        return self.platform.node_pids(node)
