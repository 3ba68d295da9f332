"""Checks, one module per kind of evidence, listed in :mod:`faultdrill.plugins`; this
package only hands on the seam's names (importing it registers no check)."""

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
