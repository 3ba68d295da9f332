"""The plan: frozen, typed data, validated once when it is loaded.

:mod:`~faultdrill.plan.sections` holds the baseline's sections (task, data, resources,
checkpoint policy, trigger, expected state, ...), :mod:`~faultdrill.plan.model` the fault
union, scenarios, rounds, controls and the :class:`Plan` with its cross-field checks, and
:mod:`~faultdrill.plan.validate` the loader whose errors name file, field, rule and fix.
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
from faultdrill.plan.validate import load_plan, parse_plan, plan_schema, plan_without

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
    "load_plan",
    "parse_plan",
    "plan_schema",
    "plan_without",
]
