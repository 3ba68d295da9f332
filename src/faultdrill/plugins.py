"""The one list of faultdrill's plug-ins: every fault, check and platform module.

Each module registers what it defines when it is imported (``faults.api.register``,
``checks.api.check``, ``platforms.api.register_platform``, ``ledger.undoer``); the
registries refuse a name registered twice. Nothing else imports a plug-in to register
it: the packages' ``__init__`` files only hand names on, so importing one fault, check or
host module loads no other plug-in (the floors of the house stay true:
``tests/test_import_graph.py``). Whoever needs a registry filled (the plan's admission, the
drill engine, ``faultdrill cleanup``) calls :func:`load` first.

Adding a plug-in: write its module, and name it here.
"""

from __future__ import annotations

import importlib

__all__ = ["CHECK_MODULES", "FAULT_MODULES", "PLATFORM_MODULES", "load"]

#: One module per fault family.
FAULT_MODULES = (
    "faultdrill.faults.process",
    "faultdrill.faults.straggler",
    "faultdrill.faults.memory",
    "faultdrill.faults.network",
    "faultdrill.faults.node",
    "faultdrill.faults.storage",
    "faultdrill.faults.data",
    "faultdrill.faults.checkpoint",
    "faultdrill.faults.control_plane",
    "faultdrill.faults.harness",
)

#: One module per kind of evidence (and the drill's own expectations).
CHECK_MODULES = (
    "faultdrill.checks.expectation",
    "faultdrill.checks.progress",
    "faultdrill.checks.memory",
    "faultdrill.checks.resources",
    "faultdrill.checks.results",
    "faultdrill.checks.network",
    "faultdrill.checks.storage",
    "faultdrill.checks.straggler",
    "faultdrill.checks.data",
)

#: Every platform, and the modules whose ledger undo functions ``cleanup`` needs (none of
#: them imports a platform's client library: ray, kubernetes).
PLATFORM_MODULES = (
    "faultdrill.platforms.fake",
    "faultdrill.platforms.local.platform",
    "faultdrill.platforms.local.netns",
    "faultdrill.platforms.slurm.platform",
    "faultdrill.platforms.slurm.embedded",
    "faultdrill.platforms.slurm.embedded_platform",
    "faultdrill.platforms.ray.address",
    "faultdrill.platforms.ray.embedded",
    "faultdrill.platforms.ray.platform",
    "faultdrill.platforms.kubernetes.objects",
    "faultdrill.platforms.kubernetes.platform",
    "faultdrill.platforms.kubernetes.procs",
    "faultdrill.platforms.kubernetes.testcluster",
    "faultdrill.platforms.kubernetes.testplatform",
    # host modules whose changes a ledger may hold (their undo functions register)
    "faultdrill.host.linux",
    "faultdrill.host.throttle",
    "faultdrill.host.memcg",
    "faultdrill.host.mounts",
    "faultdrill.host.copies",
)


def load() -> None:
    """Import every plug-in module (once; later calls cost a dictionary lookup each)."""
    for name in (*FAULT_MODULES, *CHECK_MODULES, *PLATFORM_MODULES):
        importlib.import_module(name)
