"""Fault plug-ins, one module per family; importing this package registers them all."""

from faultdrill.faults import process  # noqa: F401
from faultdrill.faults.api import FAULTS, Fault, FaultContext, FaultSpec, make_fault, register

__all__ = ["FAULTS", "Fault", "FaultContext", "FaultSpec", "make_fault", "register"]
