"""Platforms behind one seam (``faultdrill.platforms.api``); their modules are listed in
:mod:`faultdrill.plugins` (which ``faultdrill cleanup`` loads for their undo functions);
this package only hands on the seam's names.

``local`` (torchrun agents on this host, :mod:`faultdrill.platforms.local`), ``slurm``,
``ray`` and ``kubernetes`` (each against a real cluster or an embedded one on the namespace
cluster), and ``fake`` (runs nothing, records the actions asked of it:
:mod:`faultdrill.platforms.fake`). Importing them imports none of their client libraries.
"""

from faultdrill.platforms.api import PLATFORMS, Ability, JobSpec, JobState, Platform, Replica

__all__ = ["PLATFORMS", "Ability", "JobSpec", "JobState", "Platform", "Replica"]
