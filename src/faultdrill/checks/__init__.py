"""Checks, one module per kind of evidence; importing this package registers them all."""

from faultdrill.checks import (  # noqa: F401
    expectation,
    network,
    progress,
    resources,
    results,
    storage,
)
from faultdrill.checks.api import (
    CATEGORIES,
    CHECKS,
    CheckContext,
    EvidenceResult,
    Finding,
    Verdict,
    combine,
    run_checks,
)

__all__ = [
    "CATEGORIES",
    "CHECKS",
    "CheckContext",
    "EvidenceResult",
    "Finding",
    "Verdict",
    "combine",
    "run_checks",
]
