"""The local platform: real torchrun agents on this host, one per simulated node.

:mod:`~faultdrill.platforms.local.platform` is the platform, whose nodes are a
:mod:`~faultdrill.host.cluster` (a cgroup per node; with ``isolation: netns``
also a network namespace per node: :mod:`~faultdrill.platforms.local.netns`), on the Linux
primitives and undo functions of :mod:`~faultdrill.host.linux`;
:mod:`~faultdrill.host.storage` the storage outages on a checkpoint directory
of this host, on the mounts of :mod:`~faultdrill.host.mounts` and the FUSE
daemon of :mod:`~faultdrill.host.fuse_mirror`;
:mod:`~faultdrill.platforms.local.agent` the torchrun agent each node runs;
:mod:`~faultdrill.host.procfs` process and cgroup access;
:mod:`~faultdrill.host.netsampler` the network track.
Its modules register the platform (:mod:`faultdrill.plugins` loads them).
"""
