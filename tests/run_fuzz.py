"""A fuzz corpus of damaged and hostile run directories, and a driver that checks each.

:func:`corpus` builds the cases deterministically (seeded) from the fixture run
(``tests/hostile_run.py``: baseline and the worker kill, real torchrun, with the step
store the harness writes): digits of a value changed in place (same length, the edit the
step store once hid), lines deleted, doubled, swapped, torn, garbage put in, a field set
to a hostile value (a string for a number, NaN, 1e308, a list, a nested bomb), files
replaced by a link (to ``/dev/zero``, to a copy outside the run), a FIFO, a directory or
nothing, bytes of the store's columns, lines and manifest flipped, the run's own JSON files
damaged.

``python -m tests.run_fuzz MANIFEST`` is the driver: it imports faultdrill once, then forks
one child per case that copies the run, damages it and runs ``faultdrill check`` on it
(``faultdrill.cli.main``) under a memory limit, killed after :data:`TIMEOUT_S`; a child
whose check said "overall OK" also judges the damaged run from its JSON lines alone (the
evidence of record, without the step store) and reports both verdict sets. One JSON line
per case. Forking after the import keeps a few hundred cases to seconds each CPU.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT_S = 20.0
MEMORY_LIMIT = 2 << 30
SC = "scenarios/kill-worker"
ITEMS = ("baseline", SC)
RUN_FILES = ("plan.json", "selection.json", "skipped.json", "baseline/dossier.json")
#: Values a field is set to: wrong types, non-finite and absurd numbers, deep nesting.
HOSTILE: tuple[Any, ...] = (
    "x",
    None,
    float("nan"),
    float("inf"),
    1e308,
    -1e9,
    -1,
    0,
    10**30,
    True,
    [],
    {},
    "../../../etc/passwd",
    [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]],
)


@dataclass(frozen=True)
class Mutation:
    """One damage: ``name`` (what, case number) and what it does to a copied run."""

    name: str
    apply: Callable[[Path], None]


def prepare(base: Path) -> Path:
    """The fixture run reduced to the baseline and the worker kill, with step stores."""
    from tests.hostile_run import unpack

    run = unpack(base)
    shutil.rmtree(run / "controls")
    (run / "selection.json").write_text(
        json.dumps({"selected": ["kill-worker"], "no_controls": True})
    )
    plan = json.loads((run / "plan.json").read_text())
    plan["controls"] = []
    (run / "plan.json").write_text(json.dumps(plan))
    return run


def _files(run: Path) -> list[Path]:
    return sorted(p for item in ITEMS for p in (run / item / "events").glob("*.jsonl"))


def _store_files(run: Path) -> list[Path]:
    return sorted(
        p for item in ITEMS for p in (run / item / "events" / "steps").rglob("*") if p.is_file()
    )


def _lines_edit(rng: random.Random, how: str) -> Callable[[Path], None]:
    """An edit of the lines of one events file, chosen when applied (from ``rng``'s state
    at corpus time: the choice is made from a per-case seed)."""
    seed = rng.randrange(1 << 30)

    def apply(run: Path) -> None:
        r = random.Random(seed)
        path = r.choice(_files(run))
        lines = path.read_bytes().splitlines(keepends=True)
        if not lines:
            return
        i = r.randrange(len(lines))
        if how == "digit":
            digits = [k for k, c in enumerate(lines[i]) if 48 <= c <= 57]
            if digits:
                k = r.choice(digits)
                new = bytearray(lines[i])
                new[k] = 48 + (new[k] - 48 + r.randrange(1, 10)) % 10
                lines[i] = bytes(new)
        elif how == "delete":
            del lines[i]
        elif how == "double":
            lines.insert(i, lines[i])
        elif how == "swap":
            j = r.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif how == "tear":
            lines[i] = lines[i][: r.randrange(len(lines[i]))]
        elif how == "garbage":
            lines.insert(i, r.randbytes(r.randrange(1, 300)))
        elif how == "field":
            lines[i] = _set_field(lines[i], r)
        path.write_bytes(b"".join(lines))

    return apply


def _set_field(line: bytes, r: random.Random) -> bytes:
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict) or not obj:
        return line
    obj[r.choice(sorted(obj))] = r.choice(HOSTILE)
    return json.dumps(obj).encode() + b"\n"


def _replace(how: str, rng: random.Random, store: bool = False) -> Callable[[Path], None]:
    """One events file (or store file) replaced by something that is not it."""
    seed = rng.randrange(1 << 30)

    def apply(run: Path) -> None:
        r = random.Random(seed)
        path = r.choice(_store_files(run) if store else _files(run))
        if how == "flip":
            data = bytearray(path.read_bytes())
            if data:
                data[r.randrange(len(data))] ^= 1 << r.randrange(8)
            path.write_bytes(bytes(data))
            return
        outside = run.parent / "outside" / path.name
        outside.parent.mkdir(exist_ok=True)
        shutil.copy(path, outside)
        path.unlink()
        if how == "link-zero":
            path.symlink_to("/dev/zero")
        elif how == "link-outside":
            path.symlink_to(outside)
        elif how == "fifo":
            os.mkfifo(path)
        elif how == "dir":
            path.mkdir()
        elif how == "empty":
            path.write_bytes(b"")

    return apply


def _run_file(rng: random.Random) -> Callable[[Path], None]:
    seed = rng.randrange(1 << 30)

    def apply(run: Path) -> None:
        r = random.Random(seed)
        path = run / r.choice(RUN_FILES)
        data = bytearray(path.read_bytes())
        how = r.choice(["flip", "truncate", "fifo", "link", "bomb"])
        path.unlink()
        if how == "flip" and data:
            data[r.randrange(len(data))] = r.randrange(256)
            path.write_bytes(bytes(data))
        elif how == "truncate":
            path.write_bytes(bytes(data[: r.randrange(len(data) + 1)]))
        elif how == "fifo":
            os.mkfifo(path)
        elif how == "link":
            path.symlink_to("/dev/zero")
        else:
            path.write_bytes(b"[" * 100_000)

    return apply


def _whole(how: str) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        target = run / (SC if how == "item" else f"{SC}/events")
        outside = run.parent / "outside-dir"
        shutil.move(target, outside)
        target.symlink_to(outside)

    return apply


def corpus(n: int = 200, seed: int = 21) -> list[Mutation]:
    """``n`` mutations, the same for the same ``seed``."""
    rng = random.Random(seed)
    line_kinds = ("digit", "delete", "double", "swap", "tear", "garbage", "field")
    file_kinds = ("link-zero", "link-outside", "fifo", "dir", "empty", "flip")
    store_kinds = ("flip", "link-outside", "fifo", "empty")
    out = [Mutation("whole:item", _whole("item")), Mutation("whole:events", _whole("e"))]
    for i in range(n - len(out)):
        pick = rng.random()
        if pick < 0.55:
            how = rng.choice(line_kinds)
            out.append(Mutation(f"line-{how}:{i}", _lines_edit(rng, how)))
        elif pick < 0.7:
            how = rng.choice(file_kinds)
            out.append(Mutation(f"file-{how}:{i}", _replace(how, rng)))
        elif pick < 0.9:
            how = rng.choice(store_kinds)
            out.append(Mutation(f"store-{how}:{i}", _replace(how, rng, store=True)))
        else:
            out.append(Mutation(f"run-file:{i}", _run_file(rng)))
    return out


# --- the driver ---------------------------------------------------------------------------


def _signature(run: Path) -> dict[str, Any]:
    """What a verdict set is: the overall outcome, each item's verdict and recovery class."""
    rep = json.loads((run / "report.json").read_text())
    items = {s["id"]: (s["verdict"], s.get("recovery_class")) for s in rep["scenarios"]}
    return {"ok": rep["summary"]["ok"], "baseline": rep["baseline"]["verdict"], "items": items}


def _of_record(run: Path) -> dict[str, Any]:
    """The verdicts of ``run`` judged from its JSON lines alone (no step store)."""
    from faultdrill.judge.evaluate import evaluate_run

    for item in ITEMS:
        shutil.rmtree(run / item / "events" / "steps", ignore_errors=True)
    rep = evaluate_run(run).to_report().to_json()
    items = {s["id"]: (s["verdict"], s.get("recovery_class")) for s in rep["scenarios"]}
    return {"ok": rep["summary"]["ok"], "baseline": rep["baseline"]["verdict"], "items": items}


def _run_one(base: Path, index: int, work: Path) -> int:
    """In a forked child: copy, damage, ``faultdrill check``; output into ``work``."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = os.fdopen(1, "w", closefd=False)
    sys.stderr = os.fdopen(2, "w", closefd=False)
    from faultdrill.cli import main

    run = work / "run"
    shutil.copytree(base, run, symlinks=True)
    corpus()[index].apply(run)
    try:
        rc = main(["check", str(run)])
        if rc == 0:
            extra = {"checked": _signature(run), "of_record": _of_record(run)}
            (work / "ok.json").write_text(json.dumps(extra))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # as the interpreter would: the traceback, status 1
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


def drive(base: Path, out: Path, first: int, count: int) -> None:
    import faultdrill.cli
    import faultdrill.judge.evaluate  # noqa: F401

    cases = corpus()
    for index in range(first, min(first + count, len(cases))):
        work = out / str(index)
        work.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _run_one(base, index, work)
            finally:
                os._exit(code)
        rc: int | None = None
        while time.monotonic() - started < TIMEOUT_S:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.005)
        if rc is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        ok = work / "ok.json"
        result = {
            "name": cases[index].name,
            "rc": rc,
            "hang": rc is None,
            "seconds": round(time.monotonic() - started, 3),
            "stdout": (work / "stdout").read_text(errors="replace")[-3000:],
            "stderr": (work / "stderr").read_text(errors="replace")[-3000:],
            "ok": json.loads(ok.read_text()) if ok.exists() else None,
        }
        shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    drive(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
