"""Kubernetes: a real v1.20.2 control plane with process kubelets (the test cluster).

Importing this package registers the ledger undos of the test cluster (``k8s-process``,
``k8s-files``, ``k8s-sigstop``) so that ``faultdrill cleanup`` can replay them; it does not
import the ``kubernetes`` client (an optional dependency, needed only to talk to a cluster).
"""

from faultdrill.platforms.kubernetes import platform, procs, testcluster  # noqa: F401  (undoers)
