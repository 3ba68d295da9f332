"""The machine a drill runs (or a bundle is made) on, as facts for the dossiers and reports.

At the bottom floor: it imports nothing of faultdrill but its version, so the engine, the
judge and the archive can all record the same facts without importing one another.
"""

from __future__ import annotations

import os
import platform as pyplatform
import socket
from typing import Any

from faultdrill import __version__

__all__ = ["environment_facts"]


def environment_facts() -> dict[str, Any]:
    """The harness's version, Python, host name, kernel, machine, CPU count, whether it runs
    as root, and torch's version (None when torch is missing: a fact, not an error)."""
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
