"""Ways to damage a recorded run's event files, for ``faultdrill check`` to survive.

Each :class:`Damage` edits one events file of a copied run directory in place: a line
torn in the middle, garbage, bytes that are not UTF-8, JSON that is no object, a field of
the wrong type on each kind of event the timeline derives from, a line nested too deep to
decode, a file that is a directory... Only ``torn-last-line`` is what a killed writer
leaves behind; every other case is damage that must make the affected evidence retest.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DAMAGES", "Damage"]


@dataclass(frozen=True)
class Damage:
    name: str
    item: str  # "scenarios/kill-worker" or "baseline"
    file: str  # the events file damaged (its name, as a check must say it)
    apply: Callable[[Path], None]  # given the events file's path (it may not exist yet)
    torn_only: bool = False  # a torn last line: expected, not damage


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _insert(line: bytes) -> Callable[[Path], None]:
    """Insert ``line`` in the middle of the file."""

    def apply(path: Path) -> None:
        lines = _lines(path)
        lines.insert(len(lines) // 2, line)
        path.write_bytes(b"".join(lines))

    return apply


def _edit(
    kind: str, change: Callable[[dict[str, Any]], None], nth: int = 0
) -> Callable[[Path], None]:
    """Rewrite the ``nth`` event of ``kind`` in the file after ``change`` edits it."""

    def apply(path: Path) -> None:
        lines = _lines(path)
        seen = 0
        for i, line in enumerate(lines):
            obj = json.loads(line)
            if obj.get("kind") != kind:
                continue
            if seen == nth:
                change(obj)
                lines[i] = json.dumps(obj).encode() + b"\n"
                path.write_bytes(b"".join(lines))
                return
            seen += 1
        raise AssertionError(f"{path.name}: no {kind} event #{nth}")

    return apply


def _set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda obj: obj.update(fields)


def _drop(*names: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        for n in names:
            obj.pop(n, None)

    return change


def _torn_last(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1 - len(data.splitlines()[-1]) // 2])


def _torn_middle(path: Path) -> None:
    lines = _lines(path)
    mid = len(lines) // 2
    lines[mid] = lines[mid][: len(lines[mid]) // 2]  # its newline gone: joined to the next
    path.write_bytes(b"".join(lines))


def _step_text(change: Callable[[str], str]) -> Callable[[Path], None]:
    """Rewrite the text of a middle step line (as the probe wrote it)."""

    def apply(path: Path) -> None:
        lines = _lines(path)
        steps = [i for i, ln in enumerate(lines) if b'"kind":"step"' in ln]
        i = steps[len(steps) // 2]
        lines[i] = change(lines[i].decode()).encode()
        path.write_bytes(b"".join(lines))

    return apply


def _sub(pattern: str, repl: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        new, n = re.subn(pattern, repl, text, count=1)
        assert n == 1, (pattern, text)
        return new

    return change


def _a_directory(path: Path) -> None:
    path.mkdir()


def _random_file(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(5000) + b"\n")


def _net_samples(path: Path) -> None:
    """A network track of two samples (a run without namespaces has none), the second with
    its round trips as a list. Stamped inside the item's run (a time far outside it is
    damage of another kind: :mod:`faultdrill.judge.plausible`)."""
    harness = (path.parent / "harness.jsonl").read_text().splitlines()
    start = json.loads(next(ln for ln in harness if '"item_start"' in ln))
    ts, mono = start["ts"] + 1.0, start["mono"] + 1.0
    good = {"ts": ts, "mono": mono, "src": "net", "kind": "net_sample", "task": "t"}
    good.update(node="n1", rtt_ms={"n2": 0.1}, probed_mono=mono)
    bad = {**good, "ts": ts + 1.0, "mono": mono + 1.0, "rtt_ms": [1, 2]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")


SC = "scenarios/kill-worker"
P0, P1 = "probe-rank0.jsonl", "probe-rank1.jsonl"

DAMAGES: tuple[Damage, ...] = (
    Damage("torn-last-line", SC, P0, _torn_last, torn_only=True),
    Damage("torn-middle-line", SC, P0, _torn_middle),
    Damage("garbage-line", SC, P0, _insert(b"garbage, not JSON\n")),
    Damage("not-utf8-line", SC, P0, _insert(b'{"src": "probe", "x": "\xff\xfe"}\n')),
    Damage("json-array-line", SC, P0, _insert(b"[1, 2, 3]\n")),
    Damage("json-null-line", SC, P0, _insert(b"null\n")),
    Damage("empty-line", SC, P0, _insert(b"\n")),
    Damage("nul-bytes-line", SC, P0, _insert(b"\x00" * 64 + b"\n")),
    Damage("junk-after-object", SC, P0, _step_text(_sub(r"\}\n$", "} junk\n"))),
    Damage(
        "deeply-nested-line", SC, "harness.jsonl", _insert(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    ),
    Damage("step-mono-string", SC, P1, _step_text(_sub(r'"mono":[0-9.]+', '"mono":"late"'))),
    Damage("step-step-string", SC, P1, _step_text(_sub(r'"step":(\d+)', r'"step":"\1"'))),
    Damage("step-step-float", SC, P1, _step_text(_sub(r'"step":(\d+)', r'"step":\1.5'))),
    Damage(
        "step-step-huge", SC, P1, _step_text(_sub(r'"step":(\d+)', '"step":1180591620717411303424'))
    ),
    Damage("step-step-bool", SC, P1, _step_text(_sub(r'"step":(\d+)', '"step":true'))),
    Damage("step-loss-string", SC, P1, _step_text(_sub(r'"loss":[-0-9.e]+', '"loss":"low"'))),
    Damage("step-samples-not-list", SC, P1, _step_text(_sub(r'"samples":\[.*\]', '"samples":5'))),
    Damage("step-rank-string", SC, P1, _step_text(_sub(r'"rank": \d+', '"rank": "one"'))),
    Damage("run-start-pid-string", SC, P0, _edit("run_start", _set(pid="abc"))),
    Damage("run-start-rank-null", SC, P1, _edit("run_start", _set(rank=None))),
    Damage("run-start-no-pid", SC, P0, _edit("run_start", _drop("pid"))),
    Damage("ckpt-save-no-step", SC, P0, _edit("ckpt_save", _drop("step"))),
    Damage("ckpt-save-id-list", SC, P0, _edit("ckpt_save", _set(id=[1, 2]))),
    Damage("ckpt-load-step-string", SC, P0, _edit("ckpt_load", _set(step="ten"))),
    Damage("proc-seen-pid-string", SC, "sampler.jsonl", _edit("proc_seen", _set(pid="x"))),
    Damage(
        "proc-gone-last-seen-string",
        SC,
        "sampler.jsonl",
        _edit("proc_gone", _set(last_seen_mono="x")),
    ),
    Damage("event-mono-nan", SC, "harness.jsonl", _edit("procs_final", _set(mono=float("nan")))),
    Damage("event-mono-missing", SC, "fault.jsonl", _edit("injected", _drop("mono"))),
    Damage("event-mono-string", SC, "fault.jsonl", _edit("injected", _set(mono="3969.8"))),
    Damage("event-kind-number", SC, "platform.jsonl", _edit("job_state", _set(kind=7))),
    Damage("job-state-number", SC, "platform.jsonl", _edit("job_state", _set(state=3))),
    Damage("fault-at-step-string", SC, "fault.jsonl", _edit("injected", _set(at_step="15"))),
    Damage("net-rtt-not-a-map", SC, "net-extra.jsonl", _net_samples),
    Damage("events-file-is-a-directory", SC, "extra.jsonl", _a_directory),
    Damage("binary-garbage-file", SC, "junk.jsonl", _random_file),
    Damage("baseline-garbage-line", "baseline", P0, _insert(b"garbage\n")),
    Damage(
        "baseline-step-string", "baseline", P1, _step_text(_sub(r'"step":(\d+)', r'"step":"\1"'))
    ),
)
