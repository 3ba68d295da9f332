"""The Ray Train platform (``platform: ray``): a ``TorchTrainer`` job on an embedded Ray
cluster on the namespace cluster, or on a running cluster given by address.

Modules (none of them imports ``ray`` at import time, so ``faultdrill cleanup`` can undo a
Ray drill's ledger on a machine without Ray):

* :mod:`.embedded`: ``EmbeddedRay``, a head and one Ray worker node per member node,
  started one after another through the node cluster's launch, each daemon recorded in
  the ledger before it starts and stopped by its pid tree (never ``ray stop``), optional
  GCS fault tolerance with a Debian ``redis-server``; restored to its layout between drills.
* :mod:`.cluster`: the nodes and Ray of one run, shared by its items (the platform's
  ``run_scope``).
* :mod:`.platform`: ``RayPlatform``, the job and every action faults ask of it;
  :mod:`.address`: the job on a running cluster.
* :mod:`.observe`: the GCS node table as ``platform`` events (node deaths and drains in
  Ray's own words); :mod:`.callback` (imported by the driver only): Ray Train's
  controller decisions as ``platform`` events.
"""
