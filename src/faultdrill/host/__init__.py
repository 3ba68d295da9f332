"""The host layer every platform stands on: this Linux machine's processes, cgroups,
network namespaces, mounts and the embedded clusters' nodes.

:mod:`~faultdrill.host.cluster` is the namespace cluster (a cgroup per node; with
``isolation: netns`` also a network namespace per node), on the Linux primitives and undo
functions of :mod:`~faultdrill.host.linux`; :mod:`~faultdrill.host.storage` the storage
outages on a checkpoint directory of this host, on the mounts of
:mod:`~faultdrill.host.mounts` and the FUSE daemon of :mod:`~faultdrill.host.fuse_mirror`;
:mod:`~faultdrill.host.procfs` process and cgroup access; :mod:`~faultdrill.host.owned`
what a run may claim as its own; :mod:`~faultdrill.host.copies` stale replica copies;
:mod:`~faultdrill.host.netsampler` the network track.

The local platform (:mod:`faultdrill.platforms.local`) and the embedded Slurm, Ray and
Kubernetes test clusters all stand on it. This ``__init__`` imports nothing: importing one
host module never loads a platform.
"""
