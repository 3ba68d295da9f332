"""Platforms behind one seam (``faultdrill.platforms.api``); importing registers them (and
the undo functions their ledger entries need: ``faultdrill cleanup`` imports this)."""

from faultdrill.platforms import local, netns  # noqa: F401
from faultdrill.platforms.api import PLATFORMS, JobSpec, JobState, Platform, Replica
from faultdrill.platforms.ray import embedded  # noqa: F401  (imports no ray: undo only)

__all__ = ["PLATFORMS", "JobSpec", "JobState", "Platform", "Replica"]
