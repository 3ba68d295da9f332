"""Fault plug-ins, one module per family; importing this package registers them all."""

from faultdrill.faults import (  # noqa: F401
    checkpoint,
    control_plane,
    harness,
    network,
    node,
    process,
    storage,
)
from faultdrill.faults.api import FAULTS, Fault, FaultContext, FaultSpec, make_fault, register

__all__ = ["FAULTS", "Fault", "FaultContext", "FaultSpec", "make_fault", "register"]
