"""Pure parsers of Slurm's command output (no subprocess here; tested on literal text).

* :func:`parse_records`: ``scontrol show job|node|step -o`` (one record per line of
  ``Key=value`` pairs; a value may contain spaces, e.g. ``Reason=Not responding [slurm@..]``,
  or ``=``, e.g. ``AllocTRES=cpu=2,mem=1000M``).
* :func:`expand_hostlist`: ``n[1-3,5],ctl`` -> ``["n1", "n2", "n3", "n5", "ctl"]``.
* :func:`slurm_time`: ``2026-11-30T09:00:00`` (slurmctld's local time, 1 s resolution) ->
  epoch seconds; ``Unknown``/``None``/``N/A`` -> None.
* :func:`reason_of`: ``Not responding [slurm@2026-11-30T09:00:00]`` -> (text, user, epoch).
"""

from __future__ import annotations

import re
import time

__all__ = ["base_state", "expand_hostlist", "parse_records", "reason_of", "slurm_time"]

# A key starts a pair only at the start of the line or after whitespace: the '=' inside
# values such as ``cpu=2,mem=1000M`` follows a letter, a comma or another '='.
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.]*)=")


def parse_records(text: str) -> list[dict[str, str]]:
    """One dict per non-empty line of ``scontrol show ... -o`` output, values stripped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or "=" not in line:
            continue
        keys = list(_KEY.finditer(line))
        rec: dict[str, str] = {}
        for i, m in enumerate(keys):
            end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
            rec[m.group(1)] = line[m.end() : end].strip()
        if rec:
            out.append(rec)
    return out


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(spec: str) -> list[str]:
    """Expand a Slurm host list (``prefix[1-3,7]suffix`` items separated by commas at the
    top level). ``""`` and ``(null)`` give ``[]``. Raises ValueError on a malformed list."""
    spec = spec.strip()
    if not spec or spec in ("(null)", "None"):
        return []
    items, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out: list[str] = []
    for item in items:
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", item)
        if m is None:
            if "[" in item or "]" in item:
                raise ValueError(f"malformed host list {spec!r}")
            out.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for part in ranges.split(","):
            r = _RANGE.match(part)
            if r is None:
                raise ValueError(f"malformed range {part!r} in host list {spec!r}")
            lo, hi = r.group(1), r.group(2) or r.group(1)
            width = len(lo) if lo.startswith("0") else 0
            out += [f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1)]
    return out


def slurm_time(value: str | None) -> float | None:
    """Epoch seconds of a Slurm timestamp (local time), None when unset or unparseable."""
    if not value or value in ("Unknown", "None", "N/A", "(null)"):
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


_REASON = re.compile(r"^(.*?)\s*\[([^@\]]*)@([0-9T:-]+)\]\s*$")


def reason_of(value: str | None) -> tuple[str, str | None, float | None]:
    """(reason text, user who set it, when) from a node's ``Reason`` field."""
    if not value or value in ("(null)", "None"):
        return "", None, None
    m = _REASON.match(value)
    if m is None:
        return value, None, None
    return m.group(1), m.group(2) or None, slurm_time(m.group(3))


def base_state(state: str) -> str:
    """A node or job state without its flags: ``DOWN+NOT_RESPONDING`` -> ``DOWN``,
    ``IDLE*`` -> ``IDLE`` (``*``: not responding, as sinfo prints it)."""
    return state.split("+")[0].rstrip("*~#!%$@^-").upper()
