"""The plan: frozen, typed data, validated once when it is loaded.

:mod:`~faultdrill.plan.sections` holds the baseline's sections (task, data, resources,
checkpoint policy, trigger, expected state, ...), :mod:`~faultdrill.plan.faults` every fault's spec and the fault union,
:mod:`~faultdrill.plan.model` scenarios, rounds, controls and the :class:`Plan`. The plan
is data at the bottom of the house: it imports no fault, check, platform or report. Loading
a file and admitting a plan against the registries and the platform is
:mod:`faultdrill.admit` (``load_plan``, ``parse_plan``).
"""

from faultdrill.plan.model import Control, Plan, Round, Scenario
from faultdrill.plan.sections import (
    ARG_PLACEHOLDERS,
    REFERENCE_WORKLOAD,
    RaySettings,
    RecoveryClass,
    Resources,
    SlurmSettings,
    StopConditions,
    StopOverrides,
    Trigger,
)

__all__ = [
    "ARG_PLACEHOLDERS",
    "REFERENCE_WORKLOAD",
    "Control",
    "Plan",
    "RaySettings",
    "RecoveryClass",
    "Resources",
    "Round",
    "Scenario",
    "SlurmSettings",
    "StopConditions",
    "StopOverrides",
    "Trigger",
]
