"""The local platform: real torchrun agents on this host, one per simulated node.

:mod:`~faultdrill.platforms.local.platform` is the platform, whose nodes are a
:mod:`~faultdrill.platforms.local.cluster` (a cgroup per node; with ``isolation: netns``
also a network namespace per node: :mod:`~faultdrill.platforms.local.netns`), on the Linux
primitives and undo functions of :mod:`~faultdrill.platforms.local.linux`;
:mod:`~faultdrill.platforms.local.storage` the storage outages on a checkpoint directory
of this host, on the mounts of :mod:`~faultdrill.platforms.local.mounts` and the FUSE
daemon of :mod:`~faultdrill.platforms.local.fuse_mirror`;
:mod:`~faultdrill.platforms.local.agent` the torchrun agent each node runs;
:mod:`~faultdrill.platforms.local.procfs` process and cgroup access;
:mod:`~faultdrill.platforms.local.netsampler` the network track.
Importing this package registers the platform and the undo functions of what it creates.
"""

from faultdrill.platforms.local import netns, platform  # noqa: F401
