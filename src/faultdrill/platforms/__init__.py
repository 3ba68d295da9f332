"""Platforms behind one seam (``faultdrill.platforms.api``); their modules are listed in
:mod:`faultdrill.plugins` (which ``faultdrill cleanup`` loads for their undo functions);
this package only hands on the seam's names.

``local`` (torchrun agents on this host, :mod:`faultdrill.platforms.local`), ``slurm``,
``ray`` and ``kubernetes`` (each against a real cluster or an embedded one on the namespace
cluster), and ``fake`` (runs nothing, records the actions asked of it:
:mod:`faultdrill.platforms.fake`). Importing them imports none of their client libraries.

The seam's names are loaded on first use (PEP 562): the torchrun agent every node of every
item starts (``python -m faultdrill.platforms.local.agent``) imports this package first,
and needs none of them; loading the seam (the plan, pydantic) cost each agent start about
0.2 s of CPU, 0.45 s of wall on a busy machine (measured; part of ``bench/demo_time.py``'s
*job start*).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultdrill.platforms.api import (
        PLATFORMS,
        Ability,
        JobSpec,
        JobState,
        Platform,
        Replica,
    )

__all__ = ["PLATFORMS", "Ability", "JobSpec", "JobState", "Platform", "Replica"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from faultdrill.platforms import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
