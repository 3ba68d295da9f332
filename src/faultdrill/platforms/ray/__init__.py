"""The Ray Train platform: an embedded Ray cluster on the namespace cluster, and the
reference workload run by ``TorchTrainer``.

Modules (none of them imports ``ray`` at import time, so ``faultdrill cleanup`` can undo a
Ray drill's ledger on a machine without Ray):

* :mod:`.nodes`: the few node verbs the cluster needs (launch a process inside a node's
  namespace AND cgroup, a node's address and interface), over today's ``NetnsPlatform``;
  the one place to swap for ``NodeCluster``.
* :mod:`.embedded`: ``EmbeddedRay``, a head and one worker node per other node, started
  one after another through the node launch, each daemon recorded in the ledger before it
  starts and stopped by its pid tree (never ``ray stop``), optional GCS fault tolerance
  with a Debian ``redis-server``.
* :mod:`.observe`: Ray's own decisions as flat ``platform`` events (the Train controller's
  state changes and failure decisions through a controller callback; node deaths from the
  GCS node table).
"""
