"""Platforms behind one seam (``faultdrill.platforms.api``); importing registers them (and
the undo functions their ledger entries need: ``faultdrill cleanup`` imports this)."""

from faultdrill.platforms import kubernetes, local, slurm  # noqa: F401
from faultdrill.platforms.api import PLATFORMS, JobSpec, JobState, Platform, Replica
from faultdrill.platforms.ray import embedded, platform  # noqa: F401  (neither imports ray)

__all__ = ["PLATFORMS", "JobSpec", "JobState", "Platform", "Replica"]
