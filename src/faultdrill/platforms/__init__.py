"""Platforms behind one seam (``faultdrill.platforms.api``); importing registers them.

``local`` (torchrun agents on this host, :mod:`faultdrill.platforms.local`) and ``fake``
(runs nothing, records the actions asked of it: :mod:`faultdrill.platforms.fake`).
"""

from faultdrill.platforms import fake, local  # noqa: F401
from faultdrill.platforms.api import PLATFORMS, Ability, JobSpec, JobState, Platform, Replica

__all__ = ["PLATFORMS", "Ability", "JobSpec", "JobState", "Platform", "Replica"]
