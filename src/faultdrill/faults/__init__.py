"""Fault plug-ins, one module per family, listed in :mod:`faultdrill.plugins`; this package
only hands on the seam's names (importing it registers no fault)."""

from faultdrill.faults.api import FAULTS, Fault, FaultContext, FaultSpec, make_fault, register

__all__ = ["FAULTS", "Fault", "FaultContext", "FaultSpec", "make_fault", "register"]
