"""Workloads: real training jobs that drills run, break and check.

* :mod:`faultdrill.workloads.lm`: the reference workload, a small deterministic DDP
  language model run by torchrun, with durable verified checkpoints and known-bad modes
  (negative controls). Run it as ``torchrun ... -m faultdrill.workloads.lm
  --workload-config=<file.json>``.

Importing this package imports nothing heavy; import a workload's module to use it.
"""
