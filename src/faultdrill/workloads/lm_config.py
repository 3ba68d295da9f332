"""The reference workload's configuration (:class:`LMConfig`), validated without torch.

Split from :mod:`faultdrill.workloads.lm` (which re-exports everything here) so that a plan
can be checked at load time (``faultdrill validate``, ``faultdrill run``) without importing
torch. See that module's docstring for what each field means.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import reprlib
from dataclasses import dataclass
from typing import Any

from faultdrill.errors import DrillError

__all__ = [
    "BAD_MODES",
    "DIGEST_FIELDS",
    "LOADER_STARTS",
    "RAY_BAD_MODES",
    "SAVE_ERRORS",
    "ConfigError",
    "LMConfig",
    "config_digest",
    "config_from_dict",
    "load_config",
]

BAD_MODES = (
    "resume-ignored",
    "data-position-not-restored",
    "skip-ahead",
    "optimizer-not-restored",
    "load-unverified",
    "stale-replica",
    "publish-before-durable",
    "stale-eval-model",
    "handover-stale",
    "skip-unreadable-shard",
)
#: Known-bad modes that only mean something under Ray Train (``workloads.lm_ray``): a
#: platform that hands checkpoints over. ``handover-stale``: rank 0 hands Ray the previous
#: checkpoint instead of the one just saved, so a retry is handed an older checkpoint than
#: the newest valid one (as in ray-project/ray#36357, a retry restoring the wrong one).
RAY_BAD_MODES = ("handover-stale",)
SAVE_ERRORS = ("skip", "crash")
LOADER_STARTS = ("fork", "spawn", "forkserver")


class ConfigError(DrillError, ValueError):
    """The workload config is unreadable or breaks a rule; the message says where and why."""


@dataclass(frozen=True)
class LMConfig:
    """The workload's configuration, validated by :func:`config_from_dict`."""

    ckpt_dir: str
    steps: int = 40
    global_batch: int = 8
    seq_len: int = 16
    vocab: int = 32
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    dropout: float = 0.0
    lr: float = 3e-3
    warmup_steps: int = 5
    seed: int = 1234
    dataset_size: int = 512
    eval_size: int = 32
    ckpt_every: int = 10
    ckpt_keep: int = 3
    gloo_timeout_s: float = 30.0
    step_sleep_s: float = 0.0
    save_error: str = "skip"
    bad_mode: str | None = None
    loader_workers: int = 0
    loader_start: str = "fork"
    loader_persistent: bool = True
    export_path: str = ""
    data_files: bool = False
    data_dir: str = ""
    data_retry_s: float = 60.0


DIGEST_FIELDS = (
    "steps",
    "global_batch",
    "seq_len",
    "vocab",
    "d_model",
    "n_layers",
    "n_heads",
    "dropout",
    "lr",
    "warmup_steps",
    "seed",
    "dataset_size",
    "eval_size",
)

_INT_FIELDS = {f.name for f in dataclasses.fields(LMConfig) if f.type == "int"}
_FLOAT_FIELDS = {f.name for f in dataclasses.fields(LMConfig) if f.type == "float"}
_BOOL_FIELDS = {f.name for f in dataclasses.fields(LMConfig) if f.type == "bool"}
# Ranges beyond the type (each number has both bounds: an absurd value is refused when the
# plan loads, not when torch tries to allocate it).
_MIN_INT = {
    "steps": 1,
    "global_batch": 1,
    "seq_len": 1,
    "vocab": 2,
    "d_model": 1,
    "n_layers": 1,
    "n_heads": 1,
    "warmup_steps": 0,
    "seed": 0,
    "dataset_size": 1,
    "eval_size": 1,
    "ckpt_every": 1,
    "ckpt_keep": 1,
    "loader_workers": 0,
}
_MAX_INT = {
    "steps": 10**9,
    "global_batch": 1 << 16,
    "seq_len": 1 << 16,
    "vocab": 1 << 20,
    "d_model": 1 << 16,
    "n_layers": 1024,
    "n_heads": 1024,
    "warmup_steps": 10**9,
    "seed": 2**63 - 1,
    "dataset_size": 1 << 40,
    "eval_size": 1 << 40,
    "ckpt_every": 10**9,
    "ckpt_keep": 1000,
    "loader_workers": 256,
}
_MAX_FLOAT = {
    "dropout": 1.0,
    "lr": 10.0,
    "gloo_timeout_s": 86_400.0,
    "step_sleep_s": 3600.0,
    "data_retry_s": 3600.0,
}
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 200


def config_from_dict(raw: Any, source: str = "<config>") -> LMConfig:
    """Validate a parsed config object; raises :class:`ConfigError` naming ``source``."""

    def fail(name: str, rule: str, value: Any) -> ConfigError:
        return ConfigError(f"{source}: field {name!r}: {rule} (got {_short.repr(value)})")

    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: must be a JSON object (got {type(raw).__name__})")
    known = {f.name for f in dataclasses.fields(LMConfig)}
    for key in raw:
        if key not in known:
            raise ConfigError(
                f"{source}: unknown field {_short.repr(key)} (known: {', '.join(sorted(known))})"
            )
    if "ckpt_dir" not in raw:
        raise ConfigError(f"{source}: field 'ckpt_dir' is required")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise fail(name, "must be an integer", value)
            if value < _MIN_INT[name]:
                raise fail(name, f"must be >= {_MIN_INT[name]}", value)
            if value > _MAX_INT[name]:
                raise fail(name, f"must be <= {_MAX_INT[name]}", value)
        elif name in _FLOAT_FIELDS:
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise fail(name, "must be a finite number", value)
            if value > _MAX_FLOAT[name] and name != "dropout":  # dropout: its own rule below
                raise fail(name, f"must be <= {_MAX_FLOAT[name]:g}", value)
            value = float(value)
        elif name in _BOOL_FIELDS and not isinstance(value, bool):
            raise fail(name, "must be true or false", value)
        values[name] = value
    cfg_ckpt = values["ckpt_dir"]
    if not isinstance(cfg_ckpt, str) or not cfg_ckpt:
        raise fail("ckpt_dir", "must be a non-empty string", cfg_ckpt)
    if not 0.0 <= values.get("dropout", 0.0) < 1.0:
        raise fail("dropout", "must be in [0, 1)", values["dropout"])
    for name in ("lr", "gloo_timeout_s"):
        if name in values and values[name] <= 0:
            raise fail(name, "must be > 0", values[name])
    if not isinstance(values.get("export_path", ""), str):
        raise fail(
            "export_path", "must be a string (a file path, or '' for none)", values["export_path"]
        )
    if values.get("step_sleep_s", 0.0) < 0:
        raise fail("step_sleep_s", "must be >= 0", values["step_sleep_s"])
    _check_data_files(values, fail)
    if "save_error" in values and values["save_error"] not in SAVE_ERRORS:
        raise fail("save_error", f"must be one of {', '.join(SAVE_ERRORS)}", values["save_error"])
    if "loader_start" in values and values["loader_start"] not in LOADER_STARTS:
        raise fail(
            "loader_start", f"must be one of {', '.join(LOADER_STARTS)}", values["loader_start"]
        )
    if values.get("bad_mode") is not None and values["bad_mode"] not in BAD_MODES:
        raise fail("bad_mode", f"must be null or one of {', '.join(BAD_MODES)}", values["bad_mode"])
    cfg = LMConfig(**values)
    if cfg.d_model % cfg.n_heads:
        raise fail("n_heads", f"must divide d_model {cfg.d_model}", cfg.n_heads)
    return cfg


def _check_data_files(values: dict[str, Any], fail: Any) -> None:
    """The file-backed dataset's fields: a directory when on, a retry budget >= 0."""
    data_dir = values.get("data_dir", "")
    if not isinstance(data_dir, str):
        raise fail("data_dir", "must be a string (a directory path)", data_dir)
    if values.get("data_files") and not data_dir:
        raise fail(
            "data_dir",
            "must name a directory when data_files is true (faultdrill sets it to the "
            "item's own data directory)",
            data_dir,
        )
    if values.get("data_retry_s", 0.0) < 0:
        raise fail("data_retry_s", "must be >= 0", values["data_retry_s"])
    if values.get("bad_mode") == "skip-unreadable-shard" and not values.get("data_files"):
        raise fail("bad_mode", "skip-unreadable-shard needs data_files: true", values["bad_mode"])


def load_config(path: str | os.PathLike[str]) -> LMConfig:
    """Read and validate a config file; raises :class:`ConfigError`."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"{source}: not valid JSON: {exc}") from exc
    return config_from_dict(raw, source)


def config_digest(cfg: LMConfig) -> str:
    """sha256 of the canonical JSON of the :data:`DIGEST_FIELDS`."""
    canon = {name: getattr(cfg, name) for name in DIGEST_FIELDS}
    return hashlib.sha256(
        json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
