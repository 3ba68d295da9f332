"""The local platform: real torchrun agents on this host, one per simulated node.

:mod:`~faultdrill.platforms.local.platform` is the platform (one cgroup per node);
:mod:`~faultdrill.platforms.local.netns` the same with every node in its own network
namespace, on the Linux primitives of :mod:`~faultdrill.platforms.local.linux`;
:mod:`~faultdrill.platforms.local.agent` the torchrun agent each node runs;
:mod:`~faultdrill.platforms.local.procfs` process and cgroup access;
:mod:`~faultdrill.platforms.local.netsampler` the network track;
:mod:`~faultdrill.platforms.local.fuse_mirror` the FUSE daemon of the storage outage.
Importing this package registers the platform and the undo functions of what it creates.
"""

from faultdrill.platforms.local import netns, platform  # noqa: F401
