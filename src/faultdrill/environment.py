"""The machine a run was recorded on: versions, host, kernel, CPUs, whether root.

One function, :func:`environment_facts`, recorded by the engine in each item's result and
run summary, by the judge when a result lacks it, and by the bundle. It sits on the ground
floor (it imports only the package version) so that none of those readers imports another.
"""

from __future__ import annotations

import os
import platform as pyplatform
import socket
from typing import Any

from faultdrill import __version__

__all__ = ["environment_facts"]


def environment_facts() -> dict[str, Any]:
    """The facts of this machine, as plain JSON values; never raises (a missing torch is None)."""
    facts: dict[str, Any] = {
        "faultdrill": __version__,
        "python": pyplatform.python_version(),
        "host": socket.gethostname(),
        "kernel": pyplatform.release(),
        "machine": pyplatform.machine(),
        "cpus": os.cpu_count(),
        "root": os.geteuid() == 0,
    }
    try:
        from importlib.metadata import version

        facts["torch"] = version("torch")
    except Exception:  # torch missing is a fact, not an error
        facts["torch"] = None
    return facts
