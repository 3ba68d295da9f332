"""Platforms behind one seam (``faultdrill.platforms.api``); importing registers them."""

from faultdrill.platforms import kubernetes, local, netns  # noqa: F401
from faultdrill.platforms.api import PLATFORMS, JobSpec, JobState, Platform, Replica

__all__ = ["PLATFORMS", "JobSpec", "JobState", "Platform", "Replica"]
