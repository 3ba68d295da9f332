"""The final model's digest, the same on every rank and in every integration.

``model_digest`` is the sha256 over a module's ``state_dict``: each key, then its tensor's
raw bytes (on the CPU, contiguous), in key order. torch is imported when it is called.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["model_digest"]


def model_digest(module: Any) -> str:
    """sha256 of ``module.state_dict()`` (see the module docstring)."""
    import torch

    h = hashlib.sha256()
    for key, tensor in module.state_dict().items():
        h.update(key.encode())
        if isinstance(tensor, torch.Tensor):
            raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            h.update(raw.numpy().tobytes())
    return h.hexdigest()
