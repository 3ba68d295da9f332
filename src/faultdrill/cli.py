"""The ``faultdrill`` command line.

Exit status: 0 the drill proved what it should (every scenario passed, every control was
caught); 1 it did not; 2 bad input or an environment that cannot host the drill (one clear
message, no traceback); 130 interrupted (after reverting every fault).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from importlib import resources
from pathlib import Path
from typing import Any

from faultdrill import __version__
from faultdrill.errors import DrillError

__all__ = ["main"]


def _demo_plan_path() -> Path:
    return Path(str(resources.files("faultdrill") / "plans" / "demo.yaml"))


class _Console:
    """Progress while a drill runs (rich), or nothing but the final lines (--quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._status: Any = None
        self._last = 0.0
        if not quiet:
            from rich.console import Console

            self.rich = Console(stderr=True)

    def live(self) -> AbstractContextManager[Any]:
        if self.quiet:
            return nullcontext()
        self._status = self.rich.status("starting...")
        return self._status

    def progress(self, item: str, line: str) -> None:
        now = time.monotonic()
        if self._status is not None and now - self._last > 0.2:
            self._last = now
            self._status.update(line)

    def item_done(self, item: str, kind: str, verdict: Any) -> None:
        text = verdict.value if verdict is not None else "not run"
        if self.quiet:
            print(f"{kind} {item}: {text}", file=sys.stderr)
        else:
            colour = {"pass": "green", "fail": "red", "retest": "yellow"}.get(text, "white")
            self.rich.print(f"  {kind:<8} {item:<32} [{colour}]{text}[/{colour}]")

    def say(self, text: str) -> None:
        print(text)


def _run(plan_path: Path, out: Path | None, args: argparse.Namespace, demo: bool) -> int:
    from faultdrill.plan import load_plan
    from faultdrill.runner import run_plan

    plan = load_plan(plan_path)
    out = out or Path(
        f"faultdrill-{'demo' if demo else plan.task.id}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    con = _Console(args.quiet)
    only = set(args.only.split(",")) if getattr(args, "only", None) else None
    if only:
        known = {s.id for s in plan.scenarios()} | {c.id for c in plan.controls}
        unknown = only - known
        if unknown:
            raise DrillError(
                f"--only: unknown id(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
    if not args.quiet:
        con.rich.print(f"faultdrill {__version__}: plan [bold]{plan_path}[/bold] -> {out}")
    with con.live():
        result = run_plan(
            plan,
            out,
            source=plan_path,
            only=only,
            controls=not getattr(args, "no_controls", False),
            report=con.progress,
            on_item=con.item_done,
        )
    summ = result.to_json()["summary"]
    con.say(
        f"scenarios: {summ['passed']}/{summ['scenarios']} pass, {summ['failed']} fail, "
        f"{summ['retest']} retest; controls caught: {summ['controls_caught']}/"
        f"{summ['controls']}; overall: {'OK' if result.ok else 'NOT OK'}"
    )
    con.say(f"report: {out / 'report.md'}\nmachine-readable: {out / 'report.json'}")
    return 0 if result.ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    return _run(_demo_plan_path(), args.out, args, demo=True)


def cmd_run(args: argparse.Namespace) -> int:
    return _run(args.plan, args.out, args, demo=False)


def cmd_check(args: argparse.Namespace) -> int:
    from faultdrill.evaluate import evaluate_run
    from faultdrill.report import write_reports

    result = evaluate_run(args.run_dir)
    paths = write_reports(result)
    summ = result.to_json()["summary"]
    print(
        f"re-checked {args.run_dir}: scenarios {summ['passed']}/{summ['scenarios']} pass, "
        f"controls caught {summ['controls_caught']}/{summ['controls']}; overall "
        f"{'OK' if result.ok else 'NOT OK'}\nreport: {paths['markdown']}"
    )
    return 0 if result.ok else 1


def cmd_cleanup(args: argparse.Namespace) -> int:
    from faultdrill import faults as _faults  # noqa: F401  (registers undo functions)
    from faultdrill import platforms as _platforms  # noqa: F401
    from faultdrill.ledger import Ledger, active_ledgers

    targets: list[Path] = []
    for p in args.paths:
        if p.is_dir():
            targets += sorted(p.rglob("ledger.jsonl"))
        elif p.is_file():
            targets.append(p)
        else:
            raise DrillError(f"{p}: no such run directory or ledger file")
    if not args.paths:
        targets = active_ledgers()
    if not targets:
        print("nothing to clean up: no active ledger")
        return 0
    failed = 0
    for path in targets:
        if not path.exists():
            print(f"{path}: ledger file is gone; nothing recorded to undo")
            continue
        ledger = Ledger(path, run_id=_run_id_of(path))
        pending = ledger.pending()
        errors = ledger.revert_all()
        for e in errors:
            print(f"  could not undo: {e}", file=sys.stderr)
        if not ledger.pending():
            ledger.deactivate()
        print(
            f"{path}: {len(pending) - len(ledger.pending())} of {len(pending)} pending "
            "change(s) undone"
        )
        failed += bool(errors)
    return 1 if failed else 0


def _run_id_of(path: Path) -> str:
    """The run id the ledger was opened with, from its index entry or its first record."""
    from faultdrill.ledger import state_dir

    active = state_dir() / "active"
    if active.is_dir():
        for idx in active.iterdir():
            if idx.read_text().strip() == str(path.resolve()):
                return idx.name.removesuffix(".ledger")
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "run-processes":
            return str(rec["data"]["run_id"])
    return path.parent.name


def cmd_schema(args: argparse.Namespace) -> int:
    from faultdrill.plan import plan_schema

    print(json.dumps(plan_schema(), indent=2))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from faultdrill.plan import load_plan

    plan = load_plan(args.plan)
    print(
        f"{args.plan}: valid plan for task {plan.task.id}: {len(plan.rounds)} round(s), "
        f"{len(plan.scenarios())} scenario(s), {len(plan.controls)} control(s)"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="faultdrill", description=__doc__.split("\n")[0] if __doc__ else ""
    )
    p.add_argument("--version", action="version", version=f"faultdrill {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def add(
        name: str, fn: Callable[[argparse.Namespace], int], help_: str
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(fn=fn)
        return sp

    sp = add(
        "demo",
        cmd_demo,
        "baseline, a worker-kill drill and every negative control on the reference workload",
    )
    sp.add_argument(
        "--out", type=Path, help="run directory to create (default: ./faultdrill-demo-TIME)"
    )
    sp.add_argument("--quiet", action="store_true", help="no live progress (for CI)")
    sp.add_argument("--only", help="comma-separated scenario/control ids to run")
    sp.add_argument("--no-controls", action="store_true", help="skip the negative controls")
    sp = add("run", cmd_run, "run the drills of a plan file")
    sp.add_argument("plan", type=Path)
    sp.add_argument("--out", type=Path)
    sp.add_argument("--quiet", action="store_true")
    sp.add_argument("--only", help="comma-separated scenario/control ids to run")
    sp.add_argument("--no-controls", action="store_true")
    sp = add("check", cmd_check, "re-run the checks offline on a recorded run directory")
    sp.add_argument("run_dir", type=Path)
    sp = add("cleanup", cmd_cleanup, "undo every change recorded in ledgers (after a crash)")
    sp.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="run directories or ledger files (default: every active ledger)",
    )
    add("schema", cmd_schema, "print the plan's JSON Schema")
    sp = add("validate", cmd_validate, "validate a plan file")
    sp.add_argument("plan", type=Path)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except DrillError as exc:
        print(f"faultdrill: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("faultdrill: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:
        from faultdrill.engine import DrillInterrupted

        if isinstance(exc, DrillInterrupted):
            print(f"faultdrill: {exc}; every fault was reverted", file=sys.stderr)
            return 130
        raise


if __name__ == "__main__":
    sys.exit(main())
