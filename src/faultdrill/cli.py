"""The ``faultdrill`` command line.

Exit status: 0 the drill proved what it should (every scenario passed, every control was
caught); 1 it did not; 2 bad input or an environment that cannot host the drill (one clear
message, no traceback); 130 interrupted (after reverting every fault); 141 the reader of
its output went away (``faultdrill schema | head``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from faultdrill import __version__, rundir
from faultdrill.errors import DrillError

if TYPE_CHECKING:
    from faultdrill.judge.evaluate import ItemResult
    from faultdrill.plan import Plan

__all__ = ["main"]


def _demo_plan_path() -> Path:
    return Path(str(resources.files("faultdrill") / "plans" / "demo.yaml"))


def _elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _label(kind: str, item: str) -> str:
    return item if item == kind else f"{kind} {item}"


class _Console:
    """What a person sees while a drill runs, on standard error.

    On a terminal: a live status line ("item 3 of 17, 1:05 elapsed: step 12, job running")
    and one line per finished item. Without a terminal (CI, a pipe, a log file): one line
    when each item starts and one when it ends, with the same count and elapsed time.
    ``--quiet``: only the end lines. Whatever the mode, an item whose job failed gets the
    failing command, the exit status, the worker's last output lines and the log's path."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live_line = not quiet and sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.run_dir: Path | None = None
        self._status: Any = None
        self._last = 0.0
        self._count = ""  # "item 3 of 17", of the item running now
        if self.live_line:
            from rich.console import Console

            self.rich = Console(stderr=True)

    def live(self) -> AbstractContextManager[Any]:
        if not self.live_line:
            return nullcontext()
        status: AbstractContextManager[Any] = self.rich.status("starting...")
        self._status = status
        return status

    def _now(self) -> str:
        return f"{self._count}, {_elapsed(time.monotonic() - self.t0)} elapsed"

    def progress(self, item: str, line: str) -> None:
        now = time.monotonic()
        if self._status is not None and now - self._last > 0.2:
            self._last = now
            self._status.update(f"{self._now()}: {line}")

    def started(self, item: str, kind: str, index: int, total: int) -> None:
        self._count = f"item {index} of {total}"
        if self._status is not None:
            self._status.update(f"{self._now()}: {_label(kind, item)} starting")
        elif not self.quiet:
            print(
                f"faultdrill: {self._now()}: {_label(kind, item)} started",
                file=sys.stderr,
                flush=True,
            )

    def finished(
        self,
        item: str,
        kind: str,
        index: int,
        total: int,
        result: ItemResult | None,
        reason: str | None,
    ) -> None:
        text = result.verdict.value if result is not None else (reason or "not run")
        self._count = f"item {index} of {total}"
        if self.live_line:
            colour = {"pass": "green", "fail": "red", "retest": "yellow"}.get(text, "white")
            self.rich.print(
                f"  {self._count:<13} {kind:<8} {item:<32} [{colour}]{text}[/{colour}]",
                highlight=False,
            )
        else:
            print(
                f"faultdrill: {self._now()}: {_label(kind, item)}: {text}",
                file=sys.stderr,
                flush=True,
            )
        if result is not None:
            self._why(result)

    def _why(self, result: ItemResult) -> None:
        """Why the job failed, or why nothing could be judged, for a person to act on."""
        from faultdrill.engine.failure import describe

        lines: list[str] = []
        if result.failure is not None:
            facts = dict(result.failure)
            if facts.get("log") and self.run_dir is not None:
                facts["log"] = str(self.run_dir / str(facts["log"]))
            lines += describe(facts)
        if result.no_probe_events:
            lines += [
                f.message
                for f in result.evidence["expectation"].findings
                if f.check == "expectation.probe"
            ]
        for line in lines:
            print(f"    {line}", file=sys.stderr, flush=True)

    def item_done(self, item: str, kind: str, verdict: Any) -> None:
        text = verdict.value if verdict is not None else "not run"
        if self.live_line:
            colour = {"pass": "green", "fail": "red", "retest": "yellow"}.get(text, "white")
            self.rich.print(f"  {kind:<8} {item:<32} [{colour}]{text}[/{colour}]")
        else:
            print(f"{kind} {item}: {text}", file=sys.stderr)

    def say(self, text: str) -> None:
        print(text)


def _without_what_this_machine_lacks(plan: Plan) -> tuple[Plan, str | None]:
    """For the demo: the plan without the items this machine cannot run (storage faults
    without root or FUSE...), and a sentence saying which and why; else (plan, None)."""
    from faultdrill.admit import plan_without
    from faultdrill.engine.run import machine_problems

    problems = machine_problems(plan, [item.id for item in plan.items()])
    if not problems:
        return plan, None
    reasons = sorted({why for lacks in problems.values() for why in lacks.values()})
    left_out = ", ".join(problems)
    note = f"this machine lacks {'; '.join(reasons)}; running the demo without {left_out}"
    return plan_without(plan, set(problems), source=f"demo plan without {left_out}"), note


def _run(plan_path: Path, out: Path | None, args: argparse.Namespace, demo: bool) -> int:
    from faultdrill.admit import load_plan
    from faultdrill.engine.run import run_plan

    started = time.monotonic()
    plan = load_plan(plan_path)
    source: Path | None = plan_path
    if demo:
        from faultdrill.engine.demo import without_netns_if_unavailable

        plan, note = without_netns_if_unavailable(plan)
        if note:
            print(f"faultdrill: {note}", file=sys.stderr)
            source = None
        plan, note = _without_what_this_machine_lacks(plan)
        if note:
            print(f"faultdrill: {note}", file=sys.stderr)
            source = None
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
        print(f"faultdrill {__version__}: plan {plan_path} -> {out}", file=sys.stderr)
    con.run_dir = out
    with con.live():
        result = run_plan(
            plan,
            out,
            source=source,
            only=only,
            controls=not getattr(args, "no_controls", False),
            report=con.progress,
            progress=con,
        )
    summ = result.to_report().to_json()["summary"]
    con.say(
        f"scenarios: {summ['passed']}/{summ['scenarios']} pass, {summ['failed']} fail, "
        f"{summ['retest']} retest; controls caught: {summ['controls_caught']}/"
        f"{summ['controls']}; overall: {'OK' if result.ok else 'NOT OK'}"
    )
    _deliverables(out, args, bundle=demo or getattr(args, "bundle", False), say=con.say)
    items = 1 + len(result.items)
    con.say(f"wall time: {time.monotonic() - started:.1f} s ({items} items drilled)")
    return 0 if result.ok else 1


def _deliverables(
    run_dir: Path, args: argparse.Namespace, *, bundle: bool, say: Any, junit: bool = True
) -> None:
    """Reports in the chosen language, the JUnit file, the bundle; says where each is."""
    from faultdrill.report import render_reports

    lang = getattr(args, "lang", "en")
    if lang == "en" and (run_dir / rundir.REPORT_HTML).exists():  # written in English by the run
        paths = {k: str(run_dir / f"report.{x}") for k, x in (("html", "html"), ("markdown", "md"))}
        paths["json"] = str(run_dir / rundir.REPORT_JSON)
    else:
        paths = render_reports(run_dir, lang)
    say(
        f"report: {paths['html']}\nreport (Markdown): {paths['markdown']}\n"
        f"machine-readable: {paths['json']}"
    )
    if junit and getattr(args, "junit", None):
        from faultdrill.archive.junit import report_suite, write_junit
        from faultdrill.report.model import read_report

        say(f"junit: {write_junit(args.junit, report_suite(read_report(run_dir)))}")
    if bundle:
        from faultdrill.archive.bundle import make_bundle

        archive, manifest = make_bundle(run_dir, lang=getattr(args, "lang", "en"))
        say(f"bundle: {archive} (manifest sha256 {manifest['manifest_sha256']})")


def cmd_demo(args: argparse.Namespace) -> int:
    return _run(_demo_plan_path(), args.out, args, demo=True)


def cmd_run(args: argparse.Namespace) -> int:
    return _run(args.plan, args.out, args, demo=False)


def cmd_check(args: argparse.Namespace) -> int:
    from faultdrill.judge.evaluate import evaluate_run
    from faultdrill.report import write_reports

    result = evaluate_run(args.run_dir)
    paths = write_reports(result, args.lang)
    summ = result.to_report().to_json()["summary"]
    print(
        f"re-checked {args.run_dir}: scenarios {summ['passed']}/{summ['scenarios']} pass, "
        f"controls caught {summ['controls_caught']}/{summ['controls']}; overall "
        f"{'OK' if result.ok else 'NOT OK'}\nreport: {paths['markdown']}\n"
        f"report (HTML): {paths['html']}"
    )
    return 0 if result.ok else 1


def cmd_bundle(args: argparse.Namespace) -> int:
    from faultdrill.archive.bundle import make_bundle, verify_bundle

    target = args.target
    if target[0] == "verify" and len(target) == 2:
        if args.sign is not None:
            raise DrillError("--sign makes a signed bundle; to check one: bundle verify --key PUB")
        archive = Path(target[1])
        if archive.is_dir():
            raise DrillError(
                f"{archive} is a directory; `bundle verify` expects an archive made by "
                f"`faultdrill bundle` (to make one of this run: faultdrill bundle {archive})"
            )
        if not archive.exists():
            raise DrillError(f"{archive}: no such file; name a bundle archive (.tar.gz)")
        res = verify_bundle(archive, args.key)
        print("\n".join(res.lines()))
        return 0 if res.ok else 1
    if len(target) != 1 or target == ["verify"]:
        raise DrillError(
            "usage: faultdrill bundle RUN_DIR [--out FILE] [--sign KEY] | "
            "bundle verify ARCHIVE [--key PUB]"
        )
    if args.key is not None:
        raise DrillError("--key checks a signature: faultdrill bundle verify ARCHIVE --key PUB")
    run_dir = Path(target[0])
    if not run_dir.is_dir():
        raise DrillError(f"{run_dir}: no such run directory")
    archive, manifest = make_bundle(
        run_dir,
        args.out,
        lang=args.lang,
        with_checkpoints=args.with_checkpoints,
        sign=args.sign,
    )
    signed = manifest.get("signature")
    print(
        f"bundle: {archive}\n{len(manifest['files'])} file(s); manifest sha256 "
        f"{manifest['manifest_sha256']}"
        + (f"\nsigned by key {signed['key_id']}" if signed else "\nnot signed (--sign KEY)")
        + f"\nverify with: faultdrill bundle verify {archive}"
        + (" --key PUB" if signed else "")
    )
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from faultdrill.archive.signing import keygen

    private, public, kid = keygen(args.out)
    print(
        f"private key: {private} (mode 600: keep it to yourself; sign with "
        f"`faultdrill bundle RUN_DIR --sign {private}`)\npublic key: {public} (give it to "
        f"whoever verifies: `faultdrill bundle verify ARCHIVE --key {public}`)\nkey id: {kid}"
    )
    return 0


def _band(args: argparse.Namespace) -> Any:
    from faultdrill.archive.diff import Band

    if not (args.time_band_s >= 0 and args.time_band_rel >= 0):  # also refuses nan
        raise DrillError("--time-band-s and --time-band-rel must be numbers >= 0")
    if math.isinf(args.time_band_s) or math.isinf(args.time_band_rel):
        raise DrillError("--time-band-s and --time-band-rel must be finite")
    return Band(abs_s=args.time_band_s, rel=args.time_band_rel)


def cmd_replay(args: argparse.Namespace) -> int:
    from faultdrill.archive.replay import Trust, replay_bundle

    ids = [i for chunk in args.scenario or [] for i in chunk.split(",") if i]
    out = args.out or Path(f"faultdrill-replay-{time.strftime('%Y%m%d-%H%M%S')}")
    con = _Console(args.quiet)
    with con.live():
        rr = replay_bundle(
            args.bundle,
            args.operator,
            out,
            scenarios=ids or None,
            lang=args.lang,
            band=_band(args),
            trust=Trust(
                key=args.key, unsigned=args.unsigned or args.no_verify, verify=not args.no_verify
            ),
            report=con.progress,
            on_item=con.item_done,
        )
    print("\n".join(rr.lines()))
    _deliverables(out, args, bundle=False, say=print, junit=False)
    if args.junit:
        from faultdrill.archive.junit import replay_suite, report_suite, write_junit
        from faultdrill.report.model import read_report

        suites = (replay_suite(rr), report_suite(read_report(out)))
        print(f"junit: {write_junit(args.junit, *suites)}")
    return 0 if rr.matches else 1


def cmd_diff(args: argparse.Namespace) -> int:
    from faultdrill.archive.diff import diff_reports, load_report

    band = _band(args)
    a, la = load_report(args.a, verify=not args.no_verify)
    b, lb = load_report(args.b, verify=not args.no_verify)
    res = diff_reports(a, b, label_a=la, label_b=lb, band=band, gate_times=args.gate_times)
    print("\n".join(res.lines()))
    if args.json:
        from faultdrill.safepath import write_file

        write_file(args.json, json.dumps(res.to_json(), indent=2, default=str) + "\n", within=None)
    if args.junit:
        from faultdrill.archive.junit import diff_suite, write_junit

        write_junit(args.junit, diff_suite(res))
    return 1 if res.regressed else 0


def cmd_serve(args: argparse.Namespace) -> int:
    from faultdrill.report.serve import serve

    try:
        serve(args.source, args.host, args.port, args.lang)
    except KeyboardInterrupt:
        return 0
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from faultdrill import plugins
    from faultdrill.ledger import active_entries

    plugins.load()  # every plug-in's undo functions
    targets: list[tuple[Path, str | None]] = []  # (ledger file, run id when known)
    for p in args.paths:
        if p.is_dir():
            targets += [(f, None) for f in _ledgers_below(p)]
        elif p.is_file() or p.is_symlink():
            targets.append((p, None))  # a link is refused when opened, and said
        else:
            raise DrillError(f"{p}: no such run directory or ledger file")
    failed = skipped = removed = 0
    if not args.paths:
        for entry in active_entries():
            if entry.ledger is None:
                print(
                    f"{entry.index}: unreadable index entry ({entry.problem}); check that no "
                    "drill of it still runs, then delete it by hand",
                    file=sys.stderr,
                )
                failed += 1
            elif entry.harness_alive() and not args.force:
                print(
                    f"{entry.ledger}: skipped: its drill is still running (harness pid "
                    f"{entry.pid}); `faultdrill cleanup --force` reverts it anyway"
                )
                skipped += 1
            elif not entry.ledger.exists():
                entry.index.unlink(missing_ok=True)
                print(
                    f"{entry.ledger}: ledger file is gone, nothing recorded to undo; "
                    f"removed its index entry {entry.index}"
                )
                removed += 1
            else:
                targets.append((entry.ledger, entry.run_id))
    if not targets:
        if not (failed or skipped or removed):
            print("nothing to clean up: no active ledger")
        return 1 if failed else 0
    for path, run_id in targets:
        try:
            failed += _clean_ledger(path, run_id)
        except (DrillError, OSError, ValueError) as exc:  # one bad ledger never stops the rest
            print(f"{path}: could not clean up: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def _ledgers_below(run_dir: Path) -> list[Path]:
    """The ledger files under ``run_dir``, none reached through a symbolic link."""
    from faultdrill.safepath import escape

    base = run_dir.resolve()
    found = []
    for f in sorted(run_dir.rglob(rundir.LEDGER)):
        why = escape(base, base / f.relative_to(run_dir))
        if why is None:
            found.append(f)
        else:
            print(f"{f}: not cleaned up: {why}", file=sys.stderr)
    return found


def _clean_ledger(path: Path, run_id: str | None) -> int:
    """Undo what one ledger left pending; 1 if anything could not be undone or read, or
    was refused (unsigned, or naming what this run could not have made: never acted on).
    The run is the one the ledger's signed header names (:mod:`faultdrill.ledger`), and,
    for an index entry (``run_id``), must be that entry's; an unsigned ledger is refused
    whole."""
    from faultdrill.ledger import Ledger

    if not os.path.lexists(path):
        print(f"{path}: ledger file is gone; nothing recorded to undo")
        return 0
    ledger = Ledger(path, run_id=run_id or "unverified")
    if not ledger.trusted:
        return _refuse_untrusted(path, ledger)
    if run_id is not None and ledger.run_id != run_id:
        print(
            f"{path}: refused: its signed header names run {ledger.run_id}, but the index "
            f"entry that led here is run {run_id}; nothing done, check both by hand",
            file=sys.stderr,
        )
        return 1
    for problem in ledger.problems:
        print(
            f"  {path}: {problem}: skipped; what that line recorded cannot be undone "
            "automatically, check it by hand",
            file=sys.stderr,
        )
    pending = ledger.pending()
    unsigned = len(ledger.refused)
    errors = ledger.revert_all()
    for e in errors:
        print(f"  could not undo: {e}", file=sys.stderr)
    for note in ledger.notes:
        print(f"  left alone, not ours: {note}")
    for why in ledger.refused:
        print(
            f"  refused, not of this run's making (nothing done): {why}; this ledger was "
            "edited or does not belong here: check it by hand",
            file=sys.stderr,
        )
    if not ledger.pending():
        ledger.deactivate()
    undone = len(pending) - len(ledger.pending()) - (len(ledger.refused) - unsigned)
    print(f"{path}: {undone} of {len(pending)} pending change(s) undone (run {ledger.run_id})")
    return int(bool(errors or ledger.problems or ledger.refused))


def _refuse_untrusted(path: Path, ledger: Any) -> int:
    """Say why nothing of an unsigned ledger is done, what it holds, and the way out."""
    print(
        f"{path}: refused: {ledger.untrusted}. Run `faultdrill cleanup` on the machine that "
        "ran the drill, on the ledger where the drill wrote it (or with no argument there); "
        "what a ledger of another machine recorded must be undone by hand on that machine",
        file=sys.stderr,
    )
    for why in ledger.refused:
        print(f"  not acted on: {why}", file=sys.stderr)
    return 1


def cmd_schema(args: argparse.Namespace) -> int:
    if args.report:
        from faultdrill.report.model import report_schema

        print(json.dumps(report_schema(), indent=2))
        return 0
    from faultdrill.admit import plan_schema

    print(json.dumps(plan_schema(), indent=2))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from faultdrill.admit import load_plan
    from faultdrill.engine.run import host_problem, machine_problems

    plan = load_plan(args.plan)
    print(
        f"{args.plan}: valid plan for task {plan.task.id}: {len(plan.rounds)} round(s), "
        f"{len(plan.scenarios())} scenario(s), {len(plan.controls)} control(s)"
    )
    # Valid is about the plan; whether this machine can drill it is said, not judged.
    host = host_problem(plan)
    if host is not None:
        print(f"  this machine cannot run this plan at all: {host}")
    for item, lacks in machine_problems(plan, [i.id for i in plan.items()]).items():
        for ability, why in lacks.items():
            print(f"  this machine cannot run {item}: it needs {ability!r}, missing {why}")
    return 0


def _language(value: str) -> str:
    """``--lang``: a language of the reports (one module of ``faultdrill.i18n``;
    imported only when the option is given, so that ``--help`` stays fast)."""
    from faultdrill.i18n import check_lang

    try:
        return check_lang(value)
    except DrillError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _lang(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--lang",
        type=_language,
        default="en",
        metavar="{en,zh}",
        help="language of report.md and report.html: en, zh, or any other language file of "
        "faultdrill/i18n (default: en; report.json is language-neutral)",
    )


def _junit(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help="also write the verdicts as JUnit XML to FILE, for CI (default: none)",
    )


def _band_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--time-band-s", type=float, default=3.0, help="times agree within this many seconds"
    )
    sp.add_argument(
        "--time-band-rel",
        type=float,
        default=0.5,
        help="... or within this fraction of the original, whichever is larger",
    )


DESCRIPTION = """\
Prove whether a distributed training platform really recovers from faults.

faultdrill runs a real PyTorch distributed job (torchrun) under a plan: a fault-free
baseline, then scenarios that each inject one fault (a worker killed, a link lossy or cut,
a node lost, the control plane or checkpoint storage away, a checkpoint damaged) and
negative controls (known-bad workloads a named check must catch). Every event lands on
one timeline; checks judge progress, resources and results evidence: pass, retest or fail.

typical use:
  faultdrill demo                       the built-in plan (about 6 minutes, as root)
  faultdrill validate PLAN.yaml         check a plan, and what this machine can drill
  faultdrill run PLAN.yaml --out DIR    drill it; reports and evidence in DIR
  faultdrill check DIR                  judge a recorded run again, offline
  faultdrill bundle DIR                 pack it for someone else to verify and replay

exit status: 0 proven, 1 not proven, 2 bad input (one message naming file, field and
fix), 130 interrupted (every fault reverted), 141 output cut off by a closed pipe.
"""


def _drill_options(sp: argparse.ArgumentParser, default_out: str) -> None:
    """The options ``demo`` and ``run`` share, each with its default."""
    sp.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help=f"run directory to create; must not exist or be empty (default: {default_out})",
    )
    sp.add_argument(
        "--quiet",
        action="store_true",
        help="only one line per finished item and the summary, no live status line (default: "
        "a live status line on a terminal, else one line per item start and end)",
    )
    sp.add_argument(
        "--only",
        metavar="IDS",
        help="comma-separated scenario/control ids to drill, besides the baseline (default: "
        "every scenario and control of the plan)",
    )
    sp.add_argument(
        "--no-controls",
        action="store_true",
        help="skip the negative controls (default: they run after the scenarios)",
    )


#: What ``add_subparsers`` returns: each ``_add_<command>`` adds its subcommand to it.
_Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="faultdrill",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"faultdrill {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_demo(sub)
    _add_run(sub)
    _add_check(sub)
    _add_bundle(sub)
    _add_keygen(sub)
    _add_replay(sub)
    _add_diff(sub)
    _add_serve(sub)
    _add_cleanup(sub)
    _add_schema(sub)
    _add_validate(sub)
    return p


def _subcommand(
    sub: _Subcommands, name: str, fn: Callable[[argparse.Namespace], int], help_: str
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` (run by ``fn``; ``help_`` is its help and description)."""
    sp = sub.add_parser(name, help=help_, description=help_)
    sp.set_defaults(fn=fn)
    return sp


def _add_demo(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub,
        "demo",
        cmd_demo,
        "the built-in plan on the reference workload: baseline, three rounds of faults and "
        "every negative control; writes the reports and the evidence bundle",
    )
    _drill_options(sp, "./faultdrill-demo-YYYYmmdd-HHMMSS")
    _lang(sp)
    _junit(sp)


def _add_run(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub,
        "run",
        cmd_run,
        "drill a plan: its baseline, then its scenarios round by round (a round runs only if "
        "the earlier ones passed), then its negative controls; writes report.html, "
        "report.md and report.json into the run directory",
    )
    sp.add_argument("plan", type=Path, metavar="PLAN", help="the plan file (YAML or JSON)")
    _drill_options(sp, "./faultdrill-TASK_ID-YYYYmmdd-HHMMSS")
    sp.add_argument(
        "--bundle",
        action="store_true",
        help="also pack the run into DIR.bundle.tar.gz for verify/replay (default: off; "
        "`faultdrill bundle DIR` does it later)",
    )
    _lang(sp)
    _junit(sp)


def _add_check(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub, "check", cmd_check, "re-run the checks offline on a recorded run directory"
    )
    sp.add_argument("run_dir", type=Path)
    _lang(sp)


def _add_bundle(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub,
        "bundle",
        cmd_bundle,
        "pack a run into one verifiable archive (`bundle RUN_DIR`), or check one "
        "(`bundle verify ARCHIVE`)",
    )
    sp.add_argument("target", nargs="+", metavar="RUN_DIR | verify ARCHIVE")
    sp.add_argument("--out", type=Path, help="archive to write (default: RUN_DIR.bundle.tar.gz)")
    sp.add_argument(
        "--with-checkpoints", action="store_true", help="include checkpoint files (large)"
    )
    sp.add_argument(
        "--sign",
        type=Path,
        metavar="KEY",
        help="sign the manifest with this Ed25519 private key (`faultdrill keygen`); the "
        "key id is recorded in the manifest and the bundled responsibility dossier "
        "(default: not signed)",
    )
    sp.add_argument(
        "--key",
        type=Path,
        metavar="PUB",
        help="with verify: also check the signature against this public key (default: "
        "integrity only; origin is then not checked, and said)",
    )
    _lang(sp)


def _add_keygen(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub,
        "keygen",
        cmd_keygen,
        "make an Ed25519 key pair to sign bundles: NAME (private, mode 600) and NAME.pub",
    )
    sp.add_argument(
        "--out", type=Path, required=True, metavar="NAME", help="private key file to create"
    )


def _add_replay(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub,
        "replay",
        cmd_replay,
        "re-run a bundle's scenarios on this environment as another operator and compare",
    )
    sp.add_argument("bundle", type=Path, help="bundle archive (or run directory)")
    sp.add_argument("--operator", required=True, help="the person replaying the drill")
    sp.add_argument(
        "--scenario", action="append", help="scenario/control id (repeat or comma-separate)"
    )
    sp.add_argument("--out", type=Path, help="new run directory")
    sp.add_argument("--quiet", action="store_true")
    sp.add_argument(
        "--key",
        type=Path,
        metavar="PUB",
        help="replay only if the bundle's signature verifies against this public key "
        "(the bundle's plan runs programs as root here)",
    )
    sp.add_argument(
        "--unsigned",
        action="store_true",
        help="replay a bundle (or run directory) whose origin is not checked: unsigned, or "
        "signed without --key; recorded in the replay's responsibility dossier",
    )
    sp.add_argument(
        "--no-verify",
        action="store_true",
        help="replay even a bundle that fails verification (implies --unsigned; recorded)",
    )
    _band_args(sp)
    _lang(sp)
    _junit(sp)


def _add_diff(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub, "diff", cmd_diff, "regression diff of two runs or bundles; exit 1 on a regression"
    )
    sp.add_argument("a", type=Path, help="before: run directory, bundle or report.json")
    sp.add_argument("b", type=Path, help="after: run directory, bundle or report.json")
    sp.add_argument("--json", type=Path, help="also write the diff as JSON")
    sp.add_argument(
        "--gate-times",
        action="store_true",
        help="count detection/recovery times outside the band as regressions",
    )
    sp.add_argument("--no-verify", action="store_true", help="compare bundles that fail verify")
    _band_args(sp)
    _junit(sp)


def _add_serve(sub: _Subcommands) -> None:
    sp = _subcommand(sub, "serve", cmd_serve, "serve a run's HTML report locally (read-only)")
    sp.add_argument("source", type=Path, help="run directory or bundle")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8000)
    _lang(sp)


def _add_cleanup(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub, "cleanup", cmd_cleanup, "undo every change recorded in ledgers (after a crash)"
    )
    sp.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="run directories or ledger files (default: every active ledger whose drill is "
        "no longer running)",
    )
    sp.add_argument(
        "--force",
        action="store_true",
        help="without paths: also revert the ledgers of drills that are still running",
    )


def _add_schema(sub: _Subcommands) -> None:
    sp = _subcommand(sub, "schema", cmd_schema, "print the plan's JSON Schema (or report.json's)")
    sp.add_argument(
        "--report",
        action="store_true",
        help="print the JSON Schema of report.json (its schema_version) instead",
    )


def _add_validate(sub: _Subcommands) -> None:
    sp = _subcommand(
        sub,
        "validate",
        cmd_validate,
        "validate a plan file, and say what this machine cannot drill of it (root, FUSE)",
    )
    sp.add_argument("plan", type=Path, metavar="PLAN", help="the plan file (YAML or JSON)")


def _interrupted_message(exc: Any) -> str:
    """What a DrillInterrupted means for the machine: all reverted, or what is left."""
    pending: list[str] = list(getattr(exc, "pending", []) or [])
    if not pending:
        return f"faultdrill: {exc}; every fault was reverted"
    return (
        f"faultdrill: {exc}; {len(pending)} recorded change(s) could NOT be reverted: "
        f"{'; '.join(pending)}\nrun `faultdrill cleanup` to undo them"
    )


def _reader_went_away() -> int:
    """Our output's reader closed the pipe (``faultdrill schema | head``): stop quietly,
    as a tool killed by SIGPIPE would, with its status (128 + 13). Standard output is
    pointed at /dev/null so that the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (captured): nothing left to protect
        pass
    return 141


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
    except BrokenPipeError:
        return _reader_went_away()
    except BaseException as exc:
        from faultdrill.engine.item import DrillInterrupted

        if isinstance(exc, DrillInterrupted):
            print(_interrupted_message(exc), file=sys.stderr)
            return 130
        raise


if __name__ == "__main__":
    sys.exit(main())
