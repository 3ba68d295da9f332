"""Kubernetes: ``platform: kubernetes`` on a cluster given by kubeconfig, or on the test
cluster (a real v1.20.2 control plane with process kubelets) that faultdrill starts.

Its modules register the platform and the ledger undos of its changes
(``k8s-objects``, ``k8s-request``, ``k8s-cordon``, ``k8s-daemon-stop``, ``k8s-process``,
``k8s-files``, ``k8s-sigstop``) so that ``faultdrill cleanup`` can replay them (they are loaded by
:func:`faultdrill.plugins.load`); none imports the ``kubernetes`` client (an optional dependency, needed only to talk to a cluster).
"""
