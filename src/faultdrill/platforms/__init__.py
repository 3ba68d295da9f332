"""Platforms behind one seam (``faultdrill.platforms.api``); importing registers them, and
the undo functions their ledger entries need (``faultdrill cleanup`` imports this).

``local`` (torchrun agents on this host, :mod:`faultdrill.platforms.local`), ``slurm``,
``ray`` and ``kubernetes`` (each against a real cluster or an embedded one on the namespace
cluster), and ``fake`` (runs nothing, records the actions asked of it:
:mod:`faultdrill.platforms.fake`). Importing them imports none of their client libraries.
"""

from faultdrill.platforms import fake, kubernetes, local, slurm  # noqa: F401
from faultdrill.platforms.api import PLATFORMS, Ability, JobSpec, JobState, Platform, Replica
from faultdrill.platforms.ray import address, embedded, platform  # noqa: F401  (none imports ray)

__all__ = ["PLATFORMS", "Ability", "JobSpec", "JobState", "Platform", "Replica"]
